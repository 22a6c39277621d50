#!/usr/bin/env bash
# bench_cp.sh — context parallelism benchmark: `flashgpt train --bench` of d12 with
# RoPE, B = 1, at long T, on one GPU and with --cp 2 on 2 GPUs (scripts/launch.sh). A benchmark,
# not a test: it records what it measures, and a run that cannot fit one GPU is a result
# ("does not fit"), not a failure.
#
#   scripts/bench_cp.sh                         # T = 128K, 256K, 512K, 1M
#   TS="131072 262144" BENCH_CP_OUT=runs/bench_cp_a scripts/bench_cp.sh   # a subset (each run is minutes)
#
# Per T: the cp 2 run, then the one-GPU run where T <= CP1_MAX_T (1M needs ~76 GiB with
# layer-but-attn; raise CP1_MAX_T on an H200) and no smaller T already did not fit. Each run
# tries --recompute $RECOMPUTE, then $RECOMPUTE_FALLBACK if it fails (out of memory, or a mode
# the cp path refuses); the table says which one ran. Each run: $WARMUP untimed steps, then the
# median of $STEPS timed ones (train --bench-warmup / --bench-steps).
#
# Output under $BENCH_CP_OUT (default runs/bench_cp): one log per run, runs.csv (one row per
# run: T, cp, recompute, status, ms/step, tokens/s, peak GiB per GPU, comm_wait_ms when the
# bench line prints comm_wait_ms=),
# and from scripts/plot_cp.py: the table (table.md; printed), bench_cp.csv (one row per T:
# tokens/s cp 1 and cp 2, efficiency = tok/s(cp 2) / (2 x tok/s(cp 1)), peak GiB per GPU) and
# bench_cp.png (tokens/s and memory per GPU against T). plot_cp.py also merges the runs.csv of
# several invocations: python3 scripts/plot_cp.py A/runs.csv B/runs.csv --out DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${BENCH_CP_OUT:-runs/bench_cp}  # not the generic OUT (a caller's own)
TS=${TS:-131072 262144 524288 1048576}
MODEL=${MODEL:-d12}
B=${B:-1}
ATTN=${ATTN:-auto}                # auto = the trainer's default (flash3 on an H100); the bench line names it
RECOMPUTE=${RECOMPUTE:-layer-but-attn}
RECOMPUTE_FALLBACK=${RECOMPUTE_FALLBACK:-layer}
CP=${CP:-2}                       # GPUs of the cp run (--cp CP, one cp group)
CP1_MAX_T=${CP1_MAX_T:-524288}    # the largest T tried on one GPU
WARMUP=${WARMUP:-1}
STEPS=${STEPS:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-1200}  # seconds per run
BIN=${FLASHGPT:-build/flashgpt}
source scripts/log_folder.sh
log_folder bench_cp.sh "$OUT" BENCH_CP_OUT || exit 1
export NCCL_NVLS_ENABLE=0
[ -x "$BIN" ] || { echo "bench_cp.sh: '$BIN' not found; run make first" >&2; exit 1; }
COMMON=(--bench --model "$MODEL" --pos rope --batch "$B" --attn "$ATTN" --bench-warmup "$WARMUP"
        --bench-steps "$STEPS")
RUNS="$OUT/runs.csv"
[ -s "$RUNS" ] || echo "T,cp,recompute,status,ms_per_step,tokens_per_s,peak_gib_per_gpu,comm_wait_ms,device,log" > "$RUNS"
RECS="$RECOMPUTE"
[ "$RECOMPUTE_FALLBACK" != "$RECOMPUTE" ] && [ -n "$RECOMPUTE_FALLBACK" ] && RECS="$RECS $RECOMPUTE_FALLBACK"

# A memory failure: the model's plan check ("needs X GiB of GPU memory"), a failed cudaMalloc,
# or CUDA's own out-of-memory error.
is_oom() { grep -qiE "GiB of GPU memory|cudaMalloc of|out of memory" "$1"; }

# bench_run NGPU T: runs one point (with the recompute fallback) and appends its row to runs.csv.
# Sets STATUS (ok | does not fit | timeout | failed).
bench_run() {
  local ngpu=$1 T=$2 rec log rc line ms tok peak comm device
  for rec in $RECS; do
    log="$OUT/cp${ngpu}_T${T}_${rec}.log"
    echo "== T=$T cp=$ngpu --recompute $rec ($(date +%H:%M:%S)) -> $log"
    if [ "$ngpu" -eq 1 ]; then
      timeout "$RUN_TIMEOUT" "$BIN" train "${COMMON[@]}" --seq-len "$T" --recompute "$rec" >"$log" 2>&1
    else
      timeout "$RUN_TIMEOUT" scripts/launch.sh --gpus "$ngpu" -- "${COMMON[@]}" --seq-len "$T" \
        --recompute "$rec" --cp "$ngpu" >"$log" 2>&1
    fi
    rc=$?
    line=$(grep -m1 '^bench:' "$log")
    if [ $rc -eq 0 ] && [ -n "$line" ]; then
      STATUS="ok"
      ms=$(sed -nE 's/.*median ([0-9.]+) ms\/step.*/\1/p' <<<"$line")
      tok=$(sed -nE 's/.*\| ([0-9.]+) tokens\/s.*/\1/p' <<<"$line")
      peak=$(sed -nE 's/.*peak memory ([0-9.]+) (B|KiB|MiB|GiB|TiB).*/\1 \2/p' <<<"$line" |
             awk '{f = $2 == "TiB" ? 1024 : $2 == "GiB" ? 1 : $2 == "MiB" ? 1 / 1024 : $2 == "KiB" ? 1 / 1048576 : 1 / 1073741824; printf "%.3f", $1 * f}')
      comm=$(grep -oE 'comm_wait_ms=[0-9.]+' "$log" | tail -n 1 | cut -d= -f2)
      device=$(sed -nE "s/^bench: (.*) $MODEL attn=.*/\1/p" <<<"$line")
      echo "   $line"
      echo "$T,$ngpu,$rec,ok,$ms,$tok,$peak,$comm,$device,$log" >> "$RUNS"
      return 0
    fi
    if [ $rc -eq 124 ]; then STATUS="timeout"
    elif is_oom "$log"; then STATUS="does not fit"
    else STATUS="failed"; fi
    echo "   $STATUS (rc $rc): $(grep -m1 -E 'error' "$log" | cut -c1-300)"
    echo "$T,$ngpu,$rec,$STATUS,,,,,,$log" >> "$RUNS"
    [ $rc -eq 124 ] && return 1  # a timeout would only repeat with the slower fallback
  done
  return 1
}

cp1_fits=1
for T in $TS; do
  bench_run "$CP" "$T"
  if [ "$T" -gt "$CP1_MAX_T" ]; then
    echo "== T=$T on one GPU: skipped (T > CP1_MAX_T=$CP1_MAX_T)"
    echo "$T,1,,skipped (CP1_MAX_T),,,,,," >> "$RUNS"
  elif [ $cp1_fits -eq 0 ]; then
    echo "== T=$T on one GPU: skipped (a smaller T did not fit)"
    echo "$T,1,,does not fit (smaller T did not),,,,,," >> "$RUNS"
  else
    bench_run 1 "$T" || { [ "$STATUS" = "does not fit" ] && cp1_fits=0; }
  fi
done

# The first Python that has matplotlib draws the plot (a pyenv python3 may lack it); the table
# and CSV come out either way.
PY=python3
for py in python3 /usr/bin/python3; do
  if "$py" -c "import matplotlib" 2>/dev/null; then PY=$py; break; fi
done
"$PY" scripts/plot_cp.py "$RUNS" --out "$OUT"
