# shellcheck shell=bash
# log_folder.sh — sourced by the scripts that keep their logs in a folder of their own
# (gpu_stress.sh, gpu_check.sh, test_multigpu.sh, bench_cp.sh, curve_multigpu.sh,
# bench_scaling.sh). They write fixed names there (summary.txt, runs.csv, one log per run), so
# each takes only a folder that is new, empty, or one it made before (its marker file
# .flashgpt-<script> says so): a folder someone else filled is refused, not written into.
#
#   log_folder SCRIPT DIR VAR   # makes DIR with the marker, or takes it; else one line that
#                               # names VAR (the variable that chose DIR) and status 1

log_folder() {
  local script=$1 dir=$2 var=$3
  local marker="$dir/.flashgpt-${script%.sh}"
  if [ -e "$dir" ] && [ ! -d "$dir" ]; then
    echo "$script: $var=$dir is a file; name a new folder" >&2
    return 1
  fi
  if [ -d "$dir" ] && [ ! -f "$marker" ] && [ -n "$(ls -A "$dir")" ]; then
    echo "$script: $var=$dir holds files that $script did not make; name a new or empty folder" >&2
    return 1
  fi
  mkdir -p "$dir" && touch "$marker"
}
