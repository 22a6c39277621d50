#!/usr/bin/env bash
# launch.sh — start one `flashgpt train` process per local GPU and wait for them.
#
#   scripts/launch.sh --gpus N [--dist-init URL] -- <flashgpt train args>
#
# Rank r gets RANK=r WORLD_SIZE=N LOCAL_RANK=r (so it runs on GPU r: cudaSetDevice(local rank))
# and, unless --dist-init is given, a file:// rendezvous in a fresh temporary directory. If one
# rank exits non-zero, the others are stopped (TERM, then KILL) and launch.sh exits with that
# rank's code, naming it. NVLink multicast (NVLS) is kept off: NCCL_NVLS_ENABLE=0.
# FLASHGPT=path overrides the binary (default build/flashgpt; a stand-in skips the GPU count
# check, which the CPU tests use).
set -u
usage() { echo "usage: $0 --gpus N [--dist-init URL] -- <flashgpt train args>" >&2; exit 2; }
GPUS=""
INIT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) GPUS="${2:-}"; shift 2 ;;
    --gpus=*) GPUS="${1#*=}"; shift ;;
    --dist-init) INIT="${2:-}"; shift 2 ;;
    --) shift; break ;;
    *) echo "launch.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$GPUS" =~ ^[1-9][0-9]*$ ]] || { echo "launch.sh: --gpus needs a positive number (got '$GPUS')" >&2; usage; }
BIN="${FLASHGPT:-build/flashgpt}"
[ -x "$BIN" ] || { echo "launch.sh: '$BIN' not found; run make first" >&2; exit 1; }
if [ -z "${FLASHGPT:-}" ] && command -v nvidia-smi >/dev/null 2>&1; then
  HAVE=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$HAVE" -ge "$GPUS" ] || { echo "launch.sh: --gpus $GPUS but only $HAVE GPU(s) here" >&2; exit 1; }
fi

export NCCL_NVLS_ENABLE=0
TMP=$(mktemp -d /tmp/flashgpt_launch.XXXXXX)
[ -n "$INIT" ] || INIT="file://$TMP/nccl_id"

declare -a PIDS
for ((r = 0; r < GPUS; r++)); do
  RANK=$r WORLD_SIZE=$GPUS LOCAL_RANK=$r FLASHGPT_DIST_INIT="$INIT" "$BIN" train "$@" &
  PIDS[$r]=$!
done

stop_all() {
  for pid in "${PIDS[@]}"; do [ "$pid" != done ] && kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 50); do
    alive=0
    for pid in "${PIDS[@]}"; do [ "$pid" != done ] && kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do [ "$pid" != done ] && kill -KILL "$pid" 2>/dev/null; done
}
trap 'echo "launch.sh: interrupted; stopping all ranks" >&2; stop_all; rm -rf "$TMP"; exit 130' INT TERM

RC=0
left=$GPUS
while [ $left -gt 0 ]; do
  for ((r = 0; r < GPUS; r++)); do
    pid=${PIDS[$r]}
    [ "$pid" = done ] && continue
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    rc=$?
    PIDS[$r]=done
    left=$((left - 1))
    if [ $rc -ne 0 ]; then
      echo "launch.sh: rank $r exited with code $rc; stopping the other ranks" >&2
      stop_all
      for ((q = 0; q < GPUS; q++)); do [ "${PIDS[$q]}" != done ] && wait "${PIDS[$q]}" 2>/dev/null; done
      rm -rf "$TMP"
      exit $rc
    fi
  done
  sleep 0.2
done
rm -rf "$TMP"
exit $RC
