#!/bin/bash
# The communicator's collectives, splits and (dp, pp, tp) mesh on 1 process (no MPI) and on
# 2 and 3 MPI ranks (tests/driver_comm.c checks every value against its own recomputation).
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
[ -x "$B/driver_comm" ] || { echo "SKIP: driver_comm not built"; exit 77; }
fail=0
env -u OMPI_COMM_WORLD_SIZE "$B/driver_comm" || { echo "FAIL: one process" >&2; fail=1; }
timeout 60 bash -c "$(declare -f mpirun_np); mpirun_np 2 '$B/driver_comm'" || { echo "FAIL: 2 ranks" >&2; fail=1; }
timeout 60 bash -c "$(declare -f mpirun_np); mpirun_np 3 '$B/driver_comm'" || { echo "FAIL: 3 ranks" >&2; fail=1; }
exit $fail
