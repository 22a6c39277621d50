#!/bin/bash
# Final GPU check of the merged tree (issues 10, 11, 12 phase 1, 13): tests, benches, curves.
# Steps in priority order, each bounded; the whole script stays under DEADLINE seconds.
cd "$(dirname "$0")"
export OMP_NUM_THREADS=16 PYTHONUNBUFFERED=1
START=$(date +%s); DEADLINE=${DEADLINE:-490}
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }
step() { local t=$1; shift; local l=$(left); [ $l -lt 15 ] && { echo "SKIP (time): $*"; return 99; }
         [ $t -gt $l ] && t=$l; timeout -s KILL $t "$@"; }
S=()
mkdir -p /tmp/c
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader > $OUT/test_gpu.log
# 1. GPU tests (bf16)
step 220 ./test_gpu >> $OUT/test_gpu.log 2>&1; S+=("test_gpu rc=$?: $(tail -n 1 $OUT/test_gpu.log)")
grep -E "^\[  FAILED" $OUT/test_gpu.log | head -20
# 2. against PyTorch SDPA (FA2, cuDNN) in the same process; ours: flash, flash3 (default backward)
step 110 python3 ../../scripts/bench_attention.py --binary ./flashgpt --backends flash,flash3 \
  --torch-backends flash,cudnn --hs 64,128 --seq-lens 4096,16384 --iters 10 --warmup 3 \
  --budget-ms 1500 --out-dir /tmp/c --csv $OUT/attention.csv > $OUT/bench_torch.log 2>&1; S+=("bench_attention.py rc=$?")
# 3. the cost of --deterministic (ours only)
step 35 ./flashgpt bench-attention --backends flash,flash3 --hs 64,128 --seq-lens 4096,16384 \
  --iters 10 --warmup 3 --budget-ms 1500 --deterministic > $OUT/bench_det.log 2>&1; S+=("bench-attention --deterministic rc=$?")
# 4. d12 loss curves, flash3 vs flash, same seed, 200 steps
for a in flash3 flash; do
  step 40 ./flashgpt train --data ../data/fortunes --model d12 --seq-len 1024 --batch 16 --steps 200 \
    --lr 6e-4 --warmup 20 --eval-every 50 --sample-every 0 --attn $a --log /tmp/c/$a.jsonl > /tmp/c/$a.log 2>&1
  S+=("train d12 $a rc=$?: $(grep -E '^done' /tmp/c/$a.log)")
done
python3 - > $OUT/curves.txt 2>&1 <<'PY'
import json
f = [json.loads(l) for l in open("/tmp/c/flash3.jsonl")]
g = [json.loads(l) for l in open("/tmp/c/flash.jsonl")]
d = [abs(a["loss"] - b["loss"]) for a, b in zip(f, g)]
print(f"flash3 vs flash, {len(d)} steps: first {f[0]['loss']:.4f}/{g[0]['loss']:.4f}, last {f[-1]['loss']:.4f}/{g[-1]['loss']:.4f}, mean |diff| {sum(d)/len(d):.4f}, max |diff| {max(d):.4f}")
vf = [(a["step"], a["val_loss"]) for a in f if "val_loss" in a]; vg = [(a["step"], a["val_loss"]) for a in g if "val_loss" in a]
print("val loss flash3:", " ".join(f"{s}:{v:.4f}" for s, v in vf)); print("val loss flash: ", " ".join(f"{s}:{v:.4f}" for s, v in vg))
med = lambda xs: sorted(xs)[len(xs) // 2]
print("tokens/s median (steps 11+): flash3 %.0f flash %.0f" % (med([a["tokens_per_s"] for a in f[10:]]), med([a["tokens_per_s"] for a in g[10:]])))
PY
S+=("curves: $(head -n 1 $OUT/curves.txt)")
# 5. FP32 build's GPU tests
if [ -x ../fp32/test_gpu ]; then step 110 ../fp32/test_gpu > $OUT/test_fp32.log 2>&1; S+=("test_gpu FP32 rc=$?: $(tail -n 1 $OUT/test_fp32.log)"); fi
# 6. compute-sanitizer memcheck: TMA/wgmma (flash3), the one wgmma backward (+ --deterministic), PTX helpers
step 70 compute-sanitizer --tool memcheck --error-exitcode 9 ./test_gpu \
  --gtest_filter='*flash3_B3_T17_*:*flash_B3_T17_*:Hopper*:Flash3*' > $OUT/memcheck.log 2>&1
S+=("memcheck rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -n 1), $(grep -cE '^\[       OK' $OUT/memcheck.log) tests ok")
# 7. trainer speed d12 B32 T1024 (ours), flash3 vs flash
for a in flash3 flash; do
  step 25 ./flashgpt train --bench --model d12 --vocab-size 50257 --seq-len 1024 --batch 32 --bench-steps 20 --attn $a > /tmp/c/b_$a.log 2>&1
  S+=("$(grep -E '^bench' /tmp/c/b_$a.log)")
done
tar cf $OUT/extra.tar -C /tmp/c . 2>/dev/null
echo "== summary ($(( $(date +%s) - START )) s) =="; printf '%s\n' "${S[@]}"
grep -A12 "^TFLOP/s (0" $OUT/bench_torch.log | cut -c1-160
grep -E "^(flash|backend)" $OUT/bench_det.log | cut -c1-140
