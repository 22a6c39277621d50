#!/bin/bash
# Device run 59 (1 GPU), session 9, the final tree (same binary as run 57): flash3 and flash
# against SDPA FA2 and cuDNN three more times in a row (one run's noise: the median of the
# same-run ratios), d12 B 32 x T 1024 against PyTorch, d12 at 128K (flash3, flash).
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt build/flashgpt
S=()
for r in 1 2 3; do
  timeout 90 python3 scripts/bench_attention.py --binary build/flashgpt --backends flash,flash3 \
    --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384,65536 --causal 1 --iters 10 --warmup 3 \
    --budget-ms 1500 --out-dir $OUT --csv $OUT/flash3_attention_$r.csv > $OUT/flash3_attention_$r.log 2>&1
  S+=("$(t "bench_attention.py round $r rc=$?")")
done
timeout 150 python3 scripts/bench_train.py --ours flash3,flash --torch compile-cudnn,cudnn --out $OUT > $OUT/bench_train.log 2>&1
S+=("$(t "bench_train rc=$?")")
for attn in flash3 flash; do
  timeout 50 build/flashgpt train --bench --model d12 --vocab-size 50257 --pos rope --seq-len 131072 \
    --batch 1 --attn $attn --recompute layer-but-attn --bench-steps 2 > $OUT/128k_$attn.log 2>&1
  S+=("$(t "128K $attn rc=$?: $(grep -E '^ *bench' $OUT/128k_$attn.log | cut -c1-200)")")
done
python3 - $OUT <<'PY'
import sys, statistics as st
rows = {}
for r in (1, 2, 3):
    for line in open("%s/flash3_attention_%d.log" % (sys.argv[1], r)):
        x = line.split()
        if len(x) > 14 and x[0] in ("64", "128") and x[5] in ("fwd", "bwd", "fwdbwd"):
            rows.setdefault((int(x[0]), int(x[3]), x[5]), []).append((float(x[7]), float(x[9]), float(x[-1].rstrip("x"))))
print("flash3 / cuDNN per round, median; flash3 TF/s median, cuDNN TF/s median")
for k in sorted(rows):
    v = rows[k]
    print("%3d %6d %-6s | %s | median %.2f | flash3 %.1f cudnn %.1f" % (k + ("/".join("%.2f" % e[2] for e in v), st.median(e[2] for e in v), st.median(e[0] for e in v), st.median(e[1] for e in v))))
PY
tail -n 7 $OUT/bench_train.log | cut -c1-150
echo "== summary =="; printf '%s\n' "${S[@]}"
