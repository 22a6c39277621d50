#!/usr/bin/env bash
# test_multigpu.sh — multi-GPU checks on a machine with >= 2 GPUs (issue 6). Logs in $OUT.
#   1. world 2 with --batch B matches world 1 with --batch 2B (same seed, same global batch)
#      in per-step loss over 10 steps within bf16 tolerance: data parallel with the all-reduce
#      overlapped (default) and not (--no-overlap), with gradient accumulation, and --zero 1;
#   2. checkpoint at step 5 and --resume to step 10 at world 2 matches the uninterrupted run
#      (both modes); resuming that checkpoint at world 1 is refused with a clear error;
#   3. a rank that fails (injected with FLASHGPT_TEST_FAIL) ends the other rank with a
#      message naming it, and launch.sh exits non-zero naming it.
#   cp: context parallelism (--cp 2 on 2 GPUs; d12, --pos rope, T = CP_T, B = CP_B, 10 steps):
#      (a) --cp 2 matches 1 GPU (same data, seed and --batch) within TOL; (b) checkpoint at 5
#      and --resume to 10 at --cp 2 matches the uninterrupted run within TOL_RESUME, and
#      resuming it with --cp 1 at world 2 (dp 2) is refused naming --cp; (c) a rank that fails
#      ends the other; (d) --pos learned (wpe rows at global positions) at --cp 2 matches 1 GPU;
#      (e) with 4 GPUs: dp 2 x cp 2 with --batch B matches 1 GPU with --batch 2B.
# SECTIONS picks what runs (default "dp cp"; SECTIONS=cp runs only context parallelism).
# Needs build/flashgpt and DATA (default runs/data/fortunes, from `flashgpt prepare`).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/test_multigpu}
DATA=${DATA:-runs/data/fortunes}
B=${B:-4}
TOL=${TOL:-0.03}          # |loss difference|, world 2 vs world 1 (different GEMM shapes in bf16)
TOL_RESUME=${TOL_RESUME:-0.01}  # resumed vs uninterrupted (flash backward's dQ is not bitwise reproducible)
SECTIONS=${SECTIONS:-dp cp}
CP_T=${CP_T:-1024}        # cp section: --seq-len
CP_B=${CP_B:-2}           # cp section: --batch
CP_ATTN=${CP_ATTN:-auto}  # cp section: --attn (a backend that saves only the LSE)
# cp section: --lr. At 6e-4 (the dp section's) this run spiked at step 9 (loss 7.09 -> 10.07 in
# both the cp 2 and the one-GPU run, 2x H100, 2026-11-25): steps 1-8 agreed within 5e-4, but the
# spike amplified the bf16 difference to 0.04 at step 10. The check is of equivalence, so it runs
# where training is smooth.
CP_LR=${CP_LR:-3e-4}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
BIN=${FLASHGPT:-build/flashgpt}  # FLASHGPT: a stand-in, as for launch.sh
COMMON=(--data "$DATA" --model d12 --seq-len 256 --steps 10 --lr 6e-4 --warmup 2 --eval-every 0
        --eval-steps 4 --sample-every 0 --seed 1337)
fails=0
result() { echo "$1"; echo "$1" >> "$OUT/summary.txt"; }

# check_failed_rank NAME LOG TIMEOUT TRAIN_ARGS...: rank 1 fails at step 3 (FLASHGPT_TEST_FAIL),
# two processes started by hand (no launcher to kill rank 0); rank 0 must stop with a message
# naming rank 1, neither may hang (timeout) or exit 0.
check_failed_rank() {
  local name=$1 log=$2 limit=$3 tmpd t0 t1 pid0 pid1 rc0 rc1 r
  shift 3
  tmpd=$(mktemp -d)
  t0=$(date +%s)
  for r in 0 1; do
    FLASHGPT_TEST_FAIL=1:3 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout "$limit" $BIN train "$@" \
      --dist-init "file://$tmpd/id" --dist-timeout 60 >"$OUT/${log}$r.log" 2>&1 &
    eval "pid$r=\$!"
  done
  wait $pid0; rc0=$?
  wait $pid1; rc1=$?
  t1=$(date +%s)
  rm -rf "$tmpd"
  if [ $rc0 -ne 0 ] && [ $rc0 -ne 124 ] && [ $rc1 -ne 0 ] && grep -q "rank 1" "$OUT/${log}0.log"; then
    result "PASS $name: rank 1 rc $rc1, rank 0 rc $rc0 after $((t1 - t0)) s: $(grep -m1 error "$OUT/${log}0.log")"
  else
    result "FAIL $name: rc0 $rc0 rc1 $rc1 after $((t1 - t0)) s"; tail -n 3 "$OUT/${log}"*.log; fails=$((fails + 1))
  fi
}
: > "$OUT/summary.txt"

compare() {  # compare NAME A.jsonl B.jsonl TOL [first_step]
  python3 - "$@" <<'PY'
import json, sys
name, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
first = int(sys.argv[5]) if len(sys.argv) > 5 else 1
def load(p):
    d = {}
    for line in open(p):
        line = line.strip()
        if line:
            j = json.loads(line); d[j["step"]] = j["loss"]
    return d
A, B = load(a), load(b)
steps = [s for s in sorted(A) if s >= first]
missing = [s for s in steps if s not in B]
if not steps or missing:
    print(f"FAIL {name}: steps missing: {missing or 'none logged'}"); sys.exit(1)
diffs = [abs(A[s] - B[s]) for s in steps]
print(f"{name}: " + " ".join(f"{s}:{A[s]:.4f}/{B[s]:.4f}" for s in steps))
worst = max(diffs)
ok = worst <= tol
print(f"{'PASS' if ok else 'FAIL'} {name}: max |loss diff| {worst:.2e} over steps {steps[0]}..{steps[-1]} (tolerance {tol:g})")
sys.exit(0 if ok else 1)
PY
}

run() {  # run LOGNAME cmd...
  local log="$OUT/$1.log"; shift
  "$@" >"$log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { result "FAIL: $* (rc $rc), see $log"; tail -n 8 "$log"; fails=$((fails + 1)); }
  return $rc
}

check() {  # check NAME A.jsonl B.jsonl TOL [first_step]: compare, one summary line, count a failure
  local out rc
  out=$(compare "$@"); rc=$?
  echo "$out" >> "$OUT/summary.txt"; echo "$out"; [ $rc -eq 0 ] || fails=$((fails + 1))
}
has() { [[ " $SECTIONS " == *" $1 "* ]]; }

if has dp; then
# 1 + 2: world 1 reference, world 2 (with checkpoints), world 2 ZeRO-1 (with checkpoints)
run w1 $BIN train "${COMMON[@]}" --batch $((2 * B)) --log "$OUT/w1.jsonl"
for mode in dp zero; do
  extra=(); [ $mode = zero ] && extra=(--zero 1)
  ck="$OUT/ck_$mode"; rm -rf "$ck"
  run "w2_$mode" scripts/launch.sh --gpus 2 -- "${COMMON[@]}" --batch $B "${extra[@]}" \
    --log "$OUT/w2_$mode.jsonl" --out "$ck" --checkpoint-every 5
  out=$(compare "world2-$mode vs world1" "$OUT/w1.jsonl" "$OUT/w2_$mode.jsonl" "$TOL"); rc=$?
  echo "$out" >> "$OUT/summary.txt"; echo "$out"; [ $rc -eq 0 ] || fails=$((fails + 1))
  ls "$ck" >> "$OUT/summary.txt"
  # drop the final checkpoint and resume from step 5
  rm -f "$ck"/model_00000010.bin "$ck"/state_00000010*.bin
  run "w2_${mode}_resume" scripts/launch.sh --gpus 2 -- "${COMMON[@]}" --batch $B "${extra[@]}" \
    --log "$OUT/w2_${mode}_resume.jsonl" --out "$ck" --checkpoint-every 5 --resume
  out=$(compare "world2-$mode resumed@5 vs uninterrupted" "$OUT/w2_$mode.jsonl" "$OUT/w2_${mode}_resume.jsonl" "$TOL_RESUME" 6); rc=$?
  echo "$out" >> "$OUT/summary.txt"; echo "$out"; [ $rc -eq 0 ] || fails=$((fails + 1))
done
# the same without overlapping the all-reduce with the backward, and with gradient
# accumulation (2 micro-steps of batch B/2 per rank: the overlap only runs in the last one)
run w2_nooverlap scripts/launch.sh --gpus 2 -- "${COMMON[@]}" --batch $B --no-overlap --log "$OUT/w2_nooverlap.jsonl"
out=$(compare "world2-no-overlap vs world1" "$OUT/w1.jsonl" "$OUT/w2_nooverlap.jsonl" "$TOL"); rc=$?
echo "$out" >> "$OUT/summary.txt"; echo "$out"; [ $rc -eq 0 ] || fails=$((fails + 1))
run w2_accum scripts/launch.sh --gpus 2 -- "${COMMON[@]}" --batch $((B / 2)) --total-batch $((2 * B * 256)) \
  --log "$OUT/w2_accum.jsonl"
out=$(compare "world2-accum2 vs world1" "$OUT/w1.jsonl" "$OUT/w2_accum.jsonl" "$TOL"); rc=$?
echo "$out" >> "$OUT/summary.txt"; echo "$out"; [ $rc -eq 0 ] || fails=$((fails + 1))

# resuming the world-2 checkpoint on one process: refused, clearly
$BIN train "${COMMON[@]}" --batch $B --out "$OUT/ck_dp" --resume --steps 12 >"$OUT/w1_resume_w2.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "world size 2 but this run has world size 1" "$OUT/w1_resume_w2.log"; then
  result "PASS world-size mismatch on resume: $(grep error "$OUT/w1_resume_w2.log")"
else
  result "FAIL world-size mismatch on resume (rc $rc)"; tail -n 3 "$OUT/w1_resume_w2.log"; fails=$((fails + 1))
fi

# 3: failure of rank 1 at step 3, two processes started by hand (no launcher to kill rank 0)
check_failed_rank "failed rank" fail_rank 120 "${COMMON[@]}" --batch $B
FLASHGPT_TEST_FAIL=1:3 timeout 120 scripts/launch.sh --gpus 2 -- "${COMMON[@]}" --batch $B >"$OUT/fail_launch.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "launch.sh: rank 1 exited" "$OUT/fail_launch.log"; then
  result "PASS launch.sh on a failed rank (rc $rc): $(grep -E 'launch.sh|error' "$OUT/fail_launch.log" | head -n 3 | tr '\n' ' ')"
else
  result "FAIL launch.sh on a failed rank (rc $rc)"; tail -n 5 "$OUT/fail_launch.log"; fails=$((fails + 1))
fi
fi  # dp

# ---- cp: context parallelism on 2 GPUs (4 for dp x cp) ----
if has cp; then
CP=(--data "$DATA" --model d12 --pos rope --seq-len "$CP_T" --batch "$CP_B" --attn "$CP_ATTN"
    --steps 10 --lr "$CP_LR" --warmup 2 --eval-every 0 --eval-steps 4 --sample-every 0 --seed 1337)
# (a) --cp 2 vs one GPU; the cp run writes checkpoints at 5 and 10 for (b)
run cp1 $BIN train "${CP[@]}" --log "$OUT/cp1.jsonl"
ck="$OUT/ck_cp2"; rm -rf "$ck"
if run cp2 scripts/launch.sh --gpus 2 -- "${CP[@]}" --cp 2 --log "$OUT/cp2.jsonl" --out "$ck" --checkpoint-every 5; then
  line=$(grep -m1 "^context parallel: cp=2 dp=1" "$OUT/cp2.log")
  if [ -n "$line" ]; then result "PASS cp start line: $line"; else result "FAIL cp start line missing in $OUT/cp2.log"; fails=$((fails + 1)); fi
fi
check "cp2 vs 1 GPU (rope, T=$CP_T, B=$CP_B)" "$OUT/cp1.jsonl" "$OUT/cp2.jsonl" "$TOL"
# (b) resume at cp 2 from step 5, then the same checkpoint at --cp 1 on 2 GPUs (dp 2): refused
rm -f "$ck"/model_00000010.bin "$ck"/state_00000010*.bin
run cp2_resume scripts/launch.sh --gpus 2 -- "${CP[@]}" --cp 2 --log "$OUT/cp2_resume.jsonl" --out "$ck" \
  --checkpoint-every 5 --resume
check "cp2 resumed@5 vs uninterrupted" "$OUT/cp2.jsonl" "$OUT/cp2_resume.jsonl" "$TOL_RESUME" 6
timeout 300 scripts/launch.sh --gpus 2 -- "${CP[@]}" --out "$ck" --resume --steps 12 >"$OUT/cp1_resume_cp2.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "written with --cp 2 but this run has --cp 1" "$OUT/cp1_resume_cp2.log"; then
  result "PASS cp mismatch on resume (rc $rc): $(grep -m1 error "$OUT/cp1_resume_cp2.log")"
else
  result "FAIL cp mismatch on resume (rc $rc), see $OUT/cp1_resume_cp2.log"; tail -n 3 "$OUT/cp1_resume_cp2.log"; fails=$((fails + 1))
fi
# (c) rank 1 fails at step 3 (two processes by hand): rank 0 stops with a message naming it
check_failed_rank "cp failed rank" cp_fail_rank 180 "${CP[@]}" --cp 2
# (d) learned positions: the wpe rows of each chunk's global positions
CPL=("${CP[@]}" --pos learned)
run cp1_learned $BIN train "${CPL[@]}" --log "$OUT/cp1_learned.jsonl"
run cp2_learned scripts/launch.sh --gpus 2 -- "${CPL[@]}" --cp 2 --log "$OUT/cp2_learned.jsonl"
check "cp2 vs 1 GPU (learned, T=$CP_T, B=$CP_B)" "$OUT/cp1_learned.jsonl" "$OUT/cp2_learned.jsonl" "$TOL"
# (e) dp 2 x cp 2 on 4 GPUs against one GPU with twice the batch (same global batch)
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${NGPU:-0}" -ge 4 ]; then
  run cp1_b2 $BIN train "${CP[@]}" --batch $((2 * CP_B)) --log "$OUT/cp1_b2.jsonl"
  run dp2cp2 scripts/launch.sh --gpus 4 -- "${CP[@]}" --cp 2 --log "$OUT/dp2cp2.jsonl"
  check "dp2 x cp2 vs 1 GPU (batch $((2 * CP_B)))" "$OUT/cp1_b2.jsonl" "$OUT/dp2cp2.jsonl" "$TOL"
else
  result "SKIP dp2 x cp2: $NGPU GPU(s), needs 4"
fi
fi  # cp

result "test_multigpu: $fails failure(s)"
exit $((fails > 0))
