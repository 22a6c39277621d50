#!/usr/bin/env bash
# attention-ceilings/run.sh — what bounds the flash3 kernels on this GPU: the rate of each wgmma
# shape they issue and of MUFU.EX2, alone (`flashgpt bench-kernels --only tensor`, 3 rounds), and
# how busy ncu finds the tensor pipe, MUFU and the issue slots in flash3's forward and backward
# kernels at HS 64 and 128, T 16K, B 1, and where their warps wait (stall reasons). Builds
# build/flashgpt first (nothing to do when it is current). Needs a Hopper GPU, nvcc and ncu
# (Nsight Compute) on PATH; ~1 min after the build.
#   bench/results/attention-ceilings/run.sh [OUT_DIR]   (default: a new runs/results/attention-ceilings-<time>)
set -euo pipefail
source "$(dirname "$0")/../../../scripts/results_lib.sh"
command -v ncu > /dev/null || { echo "attention-ceilings/run.sh: ncu (Nsight Compute) not found on PATH" >&2; exit 1; }
(cd "$(dirname "$0")/../../.." && make -j"$(nproc)" build/flashgpt > /dev/null)
results_start attention-ceilings "${1:-}"
raws=()
for r in 1 2 3; do
  build/flashgpt bench-kernels --only tensor > "$OUT/tensor_$r.log"
  raws+=("tensor=$OUT/tensor_$r.log")
done
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__warps_eligible.avg.per_cycle_active
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
for stall in wait long_scoreboard barrier dispatch_stall mio_throttle short_scoreboard gmma not_selected; do
  metrics+=,smsp__average_warps_issue_stalled_${stall}_per_issue_active.ratio
done
for hs in 64 128; do
  for pass in fwd bwd; do  # the third launch: one of the timed runs
    ncu --csv --print-units base --kernel-name "regex:flash3_${pass}_kernel" --launch-skip 2 \
      --launch-count 1 --metrics "$metrics" build/flashgpt bench-attention --backends flash3 \
      --hs "$hs" --seq-lens 16384 --tokens 16384 --warmup 2 --iters 1 --warmup-ms 0 \
      > "$OUT/ncu_${pass}_$hs.csv" 2> "$OUT/ncu_${pass}_$hs.err"
    raws+=("ncu=$OUT/ncu_${pass}_$hs.csv")
  done
done
results_table "What bounds the flash3 kernels: each unit alone, how busy the kernels keep it, and where their warps wait" \
  "build/flashgpt bench-kernels --only tensor (3 rounds); ncu --csv --print-units base --kernel-name regex:flash3_{fwd,bwd}_kernel --launch-skip 2 --launch-count 1 --metrics $metrics build/flashgpt bench-attention --backends flash3 --hs {64,128} --seq-lens 16384 --tokens 16384 --warmup 2 --iters 1 --warmup-ms 0" \
  "${raws[@]}"
