#!/bin/bash
# Context parallel for gpt and spikelm (tests/driver_lm_cp.c): the load-balanced layout, the
# (dp, pp, cp, tp) mesh and the CP attention core against the dense one on 1, 2 and 4
# processes; then 5 AdamW steps under CP 2 (2 ranks) and CP 4 (4 ranks) for spikelm and gpt
# with learned positions and RoPE, and DP 2 x CP 2, against the single-process run of the
# same global batch (losses, gradients and every tensor within 1e-5 relative).
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
D="$B/driver_lm_cp"
[ -x "$D" ] || { echo "SKIP: driver_lm_cp not built"; exit 77; }
fail=0
run() { # np args...
  local np=$1; shift
  local out
  if [ "$np" = 1 ]; then out=$(env -u OMPI_COMM_WORLD_SIZE timeout 60 "$D" "$@" 2>&1)
  else out=$(timeout 120 bash -c "$(declare -f mpirun_np); mpirun_np $np '$D' $*" 2>&1); fi
  local rc=$?
  echo "$out" | grep -E '^(ok|FAIL|    )'
  if [ $rc != 0 ] || echo "$out" | grep -q '^FAIL'; then
    echo "FAIL: -np $np driver_lm_cp $*" >&2
    echo "$out" | grep -vE '^(ok|    )' | head -20 >&2
    fail=1
  fi
}
run 1 unit
run 2 unit
run 4 unit
for model in gpt spikelm; do
  for pos in learned rope; do
    run 2 train $model $pos 1
    run 4 train $model $pos 1
  done
  run 4 train $model rope 2
done
exit $fail
