#!/bin/bash
# Device run 118 (1 GPU), session 13: does racecheck model mbarrier hand-offs? (.carry/probe)
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name --format=csv,noheader
P=.carry/probe/mbar_race
$P
for mode in 0 1 2 3; do
  compute-sanitizer --tool racecheck --racecheck-report all $P $mode > $OUT/probe_racecheck_$mode.log 2>&1
  echo "racecheck mode $mode rc=$?: $(grep -E 'RACECHECK SUMMARY' $OUT/probe_racecheck_$mode.log)"
  grep -E "Potential|Read Thread|Write Thread" $OUT/probe_racecheck_$mode.log | head -3
done
compute-sanitizer --tool synccheck $P 2>&1 | tail -1
