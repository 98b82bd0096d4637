# Sourced by the tests/cli_dist_*.sh tests: finds mpirun, skips (exit 77) without it or
# without the MPI build, and defines MPIRUN (2 ranks by default, oversubscribed: CI has
# 2 cores; root only when running as root).
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Open MPI's shared-memory transport picks a vader/cma mechanism that containers may forbid;
# tcp/self always works on one host.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun_np() { local n=$1; shift; mpirun --oversubscribe -np "$n" -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$@"; }
if [ -x "$B/driver_comm" ] && ! "$B/driver_comm" --have-mpi; then echo "SKIP: snn was built without MPI"; exit 77; fi
