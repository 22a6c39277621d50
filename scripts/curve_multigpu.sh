#!/usr/bin/env bash
# curve_multigpu.sh — d12 on the default corpus at N GPUs against 1 GPU at the same global
# batch (the same loss curve): world 1 --batch B*N vs world N --batch B, same seed,
# T=1024, STEPS steps; prints both curves' first/last losses, the largest per-step difference
# and the final val losses. Logs in $CURVE_OUT.
#   GPUS=4 B=4 STEPS=200 scripts/curve_multigpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${CURVE_OUT:-runs/curve_multigpu}  # not the generic OUT (a caller's own)
DATA=${DATA:-runs/data/fortunes}
GPUS=${GPUS:-4}
B=${B:-4}
STEPS=${STEPS:-200}
source scripts/log_folder.sh
log_folder curve_multigpu.sh "$OUT" CURVE_OUT || exit 2
export NCCL_NVLS_ENABLE=0
COMMON=(--data "$DATA" --model d12 --seq-len 1024 --steps "$STEPS" --lr 6e-4 --warmup 20
        --eval-every 50 --eval-steps 4 --sample-every 0 --seed 1337 --attn flash)
build/flashgpt train "${COMMON[@]}" --batch $((B * GPUS)) --log "$OUT/world1.jsonl" >"$OUT/world1.log" 2>&1
rc1=$?
scripts/launch.sh --gpus "$GPUS" -- "${COMMON[@]}" --batch "$B" --log "$OUT/world$GPUS.jsonl" \
  >"$OUT/world$GPUS.log" 2>&1
rcN=$?
echo "world 1 --batch $((B * GPUS)) (rc $rc1): $(grep -E '^done' "$OUT/world1.log")"
echo "world $GPUS --batch $B (rc $rcN): $(grep -E '^done' "$OUT/world$GPUS.log")"
python3 - "$OUT/world1.jsonl" "$OUT/world$GPUS.jsonl" "$GPUS" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
n = min(len(a), len(b))
d = max(abs(a[i]["loss"] - b[i]["loss"]) for i in range(n))
va = [r["val_loss"] for r in a if "val_loss" in r]
vb = [r["val_loss"] for r in b if "val_loss" in r]
print(f"d12 T=1024, {n} steps, same global batch: loss world1 {a[0]['loss']:.4f} -> {a[n-1]['loss']:.4f}, "
      f"world{sys.argv[3]} {b[0]['loss']:.4f} -> {b[n-1]['loss']:.4f}; max |per-step difference| {d:.4f}")
print("val loss world1: " + " ".join(f"{v:.4f}" for v in va))
print(f"val loss world{sys.argv[3]}: " + " ".join(f"{v:.4f}" for v in vb))
PY
