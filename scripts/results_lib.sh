# shellcheck shell=bash
# results_lib.sh — sourced by bench/results/<claim>/run.sh: a fresh output folder, the machine's
# versions, the checks every run.sh makes before it spends GPU time, and the final table.
#
#   source "$(dirname "$0")/../../../scripts/results_lib.sh"
#   results_start <claim> "${1:-}" [GPUS]   # cd to the repo root; needs build/flashgpt (and GPUS
#                                           # GPUs); OUT = the folder given or runs/results/<claim>-<UTC
#                                           # time>, with env.txt (GPU, driver, CUDA, PyTorch, cuDNN,
#                                           # commit, date)
#   ... the drivers, writing into "$OUT" ...
#   results_table "<title>" "<command>" RAW...   # OUT/data.csv and OUT/table.md (scripts/results_table.py)
#
# A run.sh writes only into its own folder: results_out refuses a folder that already holds files,
# so a run never writes over anything it did not create.

# results_start CLAIM [DIR] [GPUS]: sets OUT and CLAIM; exits with one line when something is missing.
results_start() {
  local dir=${2:-} gpus=${3:-0}
  CLAIM=$1
  [ -z "$dir" ] || dir=$(realpath -m -- "$dir")
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  results_need_binary build/flashgpt || exit 1
  [ "$gpus" -eq 0 ] || results_need_gpus "$gpus" || exit 1
  OUT=$(results_out "$CLAIM" "$dir") || exit 1
  results_env > "$OUT/env.txt"
}

# results_table TITLE COMMAND RAW...: scripts/results_table.py over the drivers' output.
results_table() {
  local title=$1 command=$2
  shift 2
  python3 scripts/results_table.py "$CLAIM" --out "$OUT" --env "$OUT/env.txt" --title "$title" \
    --command "$command" "$@"
}

# results_out CLAIM [DIR]: prints the output folder after creating it; fails on a non-empty one.
results_out() {
  local claim=$1 dir=${2:-}
  [ -n "$dir" ] || dir="runs/results/$claim-$(date -u +%Y%m%d-%H%M%S)"
  if [ -e "$dir" ] && [ ! -d "$dir" ]; then
    echo "$claim/run.sh: '$dir' is a file; give a new or empty folder" >&2
    return 1
  fi
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    echo "$claim/run.sh: '$dir' is not empty; give a new or empty folder" >&2
    return 1
  fi
  mkdir -p "$dir" || return 1
  echo "$dir"
}

# results_env: KEY: VALUE lines that scripts/results_table.py puts at the top of table.md and
# into every row of data.csv (gpu, date, commit).
results_env() {
  local gpu driver count cuda torch_line dirty=""
  # Each probe may fail (no GPU, no nvcc, no torch): the line then says so.
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
  count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
  cuda=$(nvcc --version 2>/dev/null | sed -nE 's/.*release ([0-9.]+).*/\1/p' || true)
  torch_line=$(python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())' \
               2>/dev/null || echo "not installed -")
  [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty="+uncommitted changes"
  echo "gpu: ${gpu:-none}"
  echo "gpus: ${count:-0}"
  echo "driver: ${driver:-none}"
  echo "cuda: ${cuda:-nvcc not found} (nvcc of the build)"
  echo "torch: ${torch_line% *}"
  echo "cudnn: ${torch_line##* }"
  # RESULTS_COMMIT: the commit whose build and scripts run, where this checkout's git does not
  # know it (a copy of the tree beside an older .git); else git's HEAD and whether it is clean.
  if [ -n "${RESULTS_COMMIT:-}" ]; then
    echo "commit: $RESULTS_COMMIT"
  else
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty"
  fi
  echo "date: $(date -u +%Y-%m-%d)"
}

# results_need_binary [BINARY]: one line and a non-zero status when the build is missing.
results_need_binary() {
  local bin=${1:-build/flashgpt}
  [ -x "$bin" ] || { echo "run.sh: '$bin' not found; run make first" >&2; return 1; }
}

# results_need_gpus N: one line and a non-zero status when fewer than N GPUs are present.
results_need_gpus() {
  local have
  have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$have" -ge "$1" ] || { echo "run.sh: needs $1 GPU(s), found $have" >&2; return 1; }
}

# results_corpus OUT: prints a prepared corpus folder: $DATA when set, else the `fortunes`
# package's text prepared into OUT/data (vocabulary 4096, as scripts/quickstart.sh does).
results_corpus() {
  local out=$1 texts
  if [ -n "${DATA:-}" ]; then echo "$DATA"; return 0; fi
  mapfile -t texts < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' \
                         ! -name '*.u8' 2>/dev/null | sort)
  if [ ${#texts[@]} -eq 0 ]; then
    echo "run.sh: no corpus: install the fortunes package or set DATA to a prepared folder" >&2
    return 1
  fi
  build/flashgpt prepare --input "${texts[@]}" --out "$out/data" --vocab-size 4096 \
    >"$out/prepare.log" 2>&1 || { echo "run.sh: prepare failed, see $out/prepare.log" >&2; return 1; }
  echo "$out/data"
}
