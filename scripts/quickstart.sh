#!/usr/bin/env bash
# quickstart.sh — from a fresh Debian/Ubuntu machine to a trained tiny GPT and a sample:
# installs the packages, builds, prepares the default corpus (the `fortunes` package's text
# files, about 2.5 MB of English), trains (GPU when present, else CPU) and prints a sample.
# Any text files given as arguments replace the default corpus.
#   scripts/quickstart.sh                 # default corpus
#   scripts/quickstart.sh my.txt more.txt # your own text
# Environment: STEPS (default 500 on the CPU, 2000 on a GPU), QUICKSTART_OUT (default
# runs/quickstart; the checkpoints of an earlier quick start there are removed first, and a folder
# with checkpoints that no quick start wrote is refused, before anything is installed or built).
# Each phase (install, build, prepare, train, sample) starts with a "== phase" line and the time
# since the start; the last line gives each phase's time.
# Build: with a GPU, `make build/flashgpt` (CUDA). Without one (no nvidia-smi, or it lists no
# GPU) only the CPU binary is built, into build-cpu/, even where nvcc is installed: the CUDA
# code would take most of the time and could not run here. An up-to-date build/flashgpt (after
# `make`) is used as it is on either path.
set -euo pipefail
cd "$(dirname "$0")/.."

# The output folder, checked first: only an earlier quick start's checkpoints are ever removed.
OUT=${QUICKSTART_OUT:-runs/quickstart}
marker=.flashgpt-quickstart
if compgen -G "$OUT/model_*.bin" >/dev/null && [ ! -f "$OUT/$marker" ]; then
  echo "quickstart.sh: $OUT holds checkpoints that no quick start wrote; set QUICKSTART_OUT to a new folder" >&2
  exit 1
fi

start=$SECONDS
phase_name=""
phase_start=$SECONDS
phase_times=""
# Ends the running phase (its time goes into the summary) and starts the next: "== $2".
phase() {
  if [ -n "$phase_name" ]; then phase_times="$phase_times, $phase_name $((SECONDS - phase_start)) s"; fi
  phase_name=$1
  phase_start=$SECONDS
  if [ -n "$1" ]; then echo "== $2 (at $((SECONDS - start)) s) =="; fi
}

phase install "install: packages"
# python3-matplotlib: `flashgpt profile` draws its plots with it.
packages="build-essential libcxxopts-dev libgtest-dev fortunes python3-matplotlib"
missing=""
for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing:$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
else
  echo "all there:$packages"
fi

gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi
if make -q build/flashgpt >/dev/null 2>&1; then
  phase build "build: build/flashgpt is up to date"
  flashgpt=build/flashgpt
elif [ "$gpu" = 1 ]; then
  phase build "build: make build/flashgpt (CUDA and CPU)"
  make -j"$(nproc)" build/flashgpt
  flashgpt=build/flashgpt
else
  phase build "build: no GPU here, the CPU binary only (make NO_CUDA=1 BUILD=build-cpu)"
  make NO_CUDA=1 BUILD=build-cpu -j"$(nproc)" build-cpu/flashgpt
  flashgpt=build-cpu/flashgpt
fi

if [ $# -gt 0 ]; then
  inputs=("$@")
  data=$OUT/data
else
  # The fortune text files; the .dat indexes and .u8 links are not text.
  mapfile -t inputs < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
  data=runs/data/fortunes
fi
if [ ! -f "$data/tokenizer.bin" ] || [ $# -gt 0 ]; then
  phase prepare "prepare: ${#inputs[@]} text files -> $data"
  "$flashgpt" prepare --input "${inputs[@]}" --out "$data" --vocab-size 4096
else
  phase prepare "prepare: $data is there already"
fi

if [ "$gpu" = 1 ]; then
  device_args=(--device auto --model d6 --seq-len 256 --batch 32 --steps "${STEPS:-2000}" --lr 1e-3)
else
  # CPU: the tiny preset (L=4, C=128) at T=128.
  device_args=(--device cpu --model tiny --seq-len 128 --batch 8 --steps "${STEPS:-500}" --lr 2e-3)
fi
# A fresh run each time: train refuses an --out that holds another run's checkpoints, so those
# of an earlier quick start (its marker file says so) go first.
rm -f "$OUT"/model_*.bin "$OUT"/state_*.bin
mkdir -p "$OUT" && touch "$OUT/$marker"
phase train "train: ${device_args[*]}"
"$flashgpt" train --data "$data" "${device_args[@]}" --warmup 20 --eval-every 100 \
  --sample-every 0 --out "$OUT" --log "$OUT/log.jsonl"
last=$(ls "$OUT"/model_*.bin | sort | tail -n 1)
phase sample "sample from $last"
"$flashgpt" sample --checkpoint "$last" --tokens 200 --top-k 40 --temperature 0.9 --prompt "The"
phase "" ""
echo "== quick start done in $((SECONDS - start)) s: ${phase_times#, } =="
