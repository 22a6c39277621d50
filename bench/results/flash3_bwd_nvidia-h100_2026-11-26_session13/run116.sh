#!/bin/bash
# Device run 116 (1 GPU), session 13's final tree: the other compute-sanitizer tools (racecheck,
# synccheck, initcheck) on flash3's ragged cases, to say which run on TMA / wgmma / mbarrier code.
cd "$(dirname "$0")/.."
B=.carry/bin
START=$(date +%s)
t() { echo "[$(( $(date +%s) - START )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build; cp $B/flashgpt $B/test_gpu build/
S=()
F='*flash3_B3_T17_*:*flash3_B1_T1000_NH6*'
build/test_gpu --gtest_list_tests --gtest_filter="$F" | grep -c "^  " | sed 's/^/tests in filter: /'
for tool in racecheck synccheck initcheck; do
  extra=""; [ $tool = racecheck ] && extra="--racecheck-report hazard"
  timeout 170 compute-sanitizer --tool $tool $extra --error-exitcode 9 build/test_gpu --gtest_filter="$F" > $OUT/$tool.log 2>&1
  rc=$?
  S+=("$(t "$tool rc=$rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' $OUT/$tool.log | tail -n 2 | tr '\n' ' ') $(grep -cE '^\[       OK' $OUT/$tool.log) ok, $(grep -cE '^\[  FAILED  \] [A-Z]' $OUT/$tool.log) failed")")
  grep -E "^=========" $OUT/$tool.log | sort | uniq -c | sort -rn | head -5
done
echo "== summary =="; printf '%s\n' "${S[@]}"
