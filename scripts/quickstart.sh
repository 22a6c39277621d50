#!/usr/bin/env bash
# quickstart.sh — from a fresh Debian/Ubuntu machine to a trained tiny GPT and a sample:
# installs the packages, builds, prepares the default corpus (the `fortunes` package's text
# files, about 2.5 MB of English), trains for a few minutes (GPU when present, else CPU) and
# prints a sample. Any text files given as arguments replace the default corpus.
#   scripts/quickstart.sh                 # default corpus
#   scripts/quickstart.sh my.txt more.txt # your own text
# Environment: STEPS (default 500 on the CPU, 2000 on a GPU), OUT (default runs/quickstart).
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-matplotlib: `flashgpt profile` draws its plots with it.
packages="build-essential libcxxopts-dev libgtest-dev fortunes python3-matplotlib"
missing=""
for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing:$missing"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi

make -j"$(nproc)"

OUT=${OUT:-runs/quickstart}
if [ $# -gt 0 ]; then
  inputs=("$@")
  data=$OUT/data
else
  # The fortune text files; the .dat indexes and .u8 links are not text.
  mapfile -t inputs < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
  data=runs/data/fortunes
fi
if [ ! -f "$data/tokenizer.bin" ] || [ $# -gt 0 ]; then
  build/flashgpt prepare --input "${inputs[@]}" --out "$data" --vocab-size 4096
fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ -x build/flashgpt ]; then
  device_args=(--device auto --model d6 --seq-len 256 --batch 32 --steps "${STEPS:-2000}" --lr 1e-3)
else
  # CPU: the tiny preset (L=4, C=128) at T=128 trains to a readable loss in a few minutes.
  device_args=(--device cpu --model tiny --seq-len 128 --batch 8 --steps "${STEPS:-500}" --lr 2e-3)
fi
# A fresh run each time: train refuses an --out that holds another run's checkpoints.
rm -f "$OUT"/model_*.bin "$OUT"/state_*.bin
build/flashgpt train --data "$data" "${device_args[@]}" --warmup 20 --eval-every 100 \
  --sample-every 0 --out "$OUT" --log "$OUT/log.jsonl"
last=$(ls "$OUT"/model_*.bin | sort | tail -n 1)
echo "== sample from $last =="
build/flashgpt sample --checkpoint "$last" --tokens 200 --top-k 40 --temperature 0.9 --prompt "The"
