#!/bin/bash
# Distributed training's refusals and failures, on 2 MPI ranks:
#   - the precision rules per topology and the config checks: exit 2, ONE "snn: error:"
#     line (printed by rank 0) naming the rule;
#   - bad input on one rank only (MPMD launch, rank 1 given a missing data directory):
#     every rank exits 2 with rank 1's message, within 60 s;
#   - a rank killed during training: the job ends non-zero within 60 s (no hang).
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# -q: no Open MPI banners, so stderr holds what the ranks print
mpi() { timeout 60 mpirun -q --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$@"; }

# expect_refusal DESCRIPTION NP PATTERN ARGS...
expect_refusal() {
  local what=$1 np=$2 pat=$3; shift 3
  local t0=$SECONDS
  mpi -np "$np" "$SNN" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  [ $((SECONDS - t0)) -gt 10 ] && echo "note: $what took $((SECONDS - t0)) s"
  lines=$(grep -c '^snn: error: ' "$tmp/err")
  if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pat" "$tmp/err"; then
    echo "FAIL: $what: rc=$rc, error lines=$lines, stderr:" >&2; cat "$tmp/err" >&2; fail=1
  fi
}
base="train --data-parallel ddp --model fcsnn --hidden 32 --dataset synthetic --synthetic-size 64 --epochs 1 --quiet"
expect_refusal "fp8 with TP 2" 2 "FP8 model precision requires DDP with tensor_parallel_size = pipeline_parallel_size = 1" \
  $base --precision fp8 --tensor-parallel-size 2
expect_refusal "fp8 with PP 2" 2 "FP8 model precision requires DDP" $base --precision fp8 --pipeline-parallel-size 2
expect_refusal "fp8 with fsdp2" 2 "requires DDP.*data_parallel='fsdp2'" $base --precision fp8 --data-parallel fsdp2
expect_refusal "neuron precision with TP 2" 2 "neuron mixed precision requires DDP" \
  $base --neuron-storage bf16 --tensor-parallel-size 2
expect_refusal "fp16 with PP 2" 2 "Vision PP currently supports fp32 and bf16 (got precision 'fp16'" \
  $base --precision fp16 --pipeline-parallel-size 2
expect_refusal "fp8 with PP 2 names PP too" 2 "requires DDP" $base --precision fp8 --pipeline-parallel-size 2
expect_refusal "microbatches" 2 "batch_size=10 must be divisible by pipeline_microbatches=4" \
  $base --batch-size 10 --pipeline-microbatches 4
expect_refusal "world 3 with PP 2" 3 "world_size=3 is not divisible" $base --pipeline-parallel-size 2
expect_refusal "TP not built" 2 "tensor and pipeline parallelism are not built" $base --tensor-parallel-size 2
expect_refusal "bad data-parallel" 2 "must be ddp or fsdp2" $base --data-parallel zero
expect_refusal "TP 0" 2 "--tensor-parallel-size must be a positive integer" $base --tensor-parallel-size 0
expect_refusal "unknown option" 2 "unknown option '--bogus'" $base --bogus 1
# the allowed combinations still run: bf16 and fp8 (delayed) with DDP on 2 ranks
for p in bf16 fp8; do
  if ! mpi -np 2 "$SNN" $base --precision $p --out "$tmp/ok_$p" >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL: $p with DDP was refused:" >&2; cat "$tmp/err" >&2; fail=1
  fi
done

# bad input on rank 1 only
start=$(date +%s)
mpi -np 1 "$SNN" $base --out "$tmp/o" : -np 1 "$SNN" $base --dataset fashion-mnist --data-dir "$tmp/nowhere" \
  --out "$tmp/o" >"$tmp/out" 2>"$tmp/err"
rc=$?
dt=$(( $(date +%s) - start ))
if [ $rc -ne 2 ] || [ "$(grep -c '^snn: error: ' "$tmp/err")" -ne 1 ] || ! grep -q "^snn: error: rank 1: loading the data: .*$tmp/nowhere" "$tmp/err" || [ $dt -ge 60 ]; then
  echo "FAIL: bad input on rank 1: rc=$rc after ${dt}s, stderr:" >&2; cat "$tmp/err" >&2; fail=1
fi

# a rank that aborts (snn_comm_abort) while the other waits in an all-reduce
start=$(date +%s)
mpi -np 2 "$B/driver_comm" --abort-last >"$tmp/out" 2>"$tmp/err"
rc=$?
dt=$(( $(date +%s) - start ))
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $dt -ge 60 ] || grep -q "returned although" "$tmp/err"; then
  echo "FAIL: abort on one rank: rc=$rc after ${dt}s" >&2; cat "$tmp/err" >&2; fail=1
else
  echo "aborting rank: the job ended with rc=$rc after ${dt}s"
fi

# a rank killed with SIGKILL in the middle of training
mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$SNN" train --data-parallel ddp --model fcsnn \
  --hidden 64 --dataset synthetic --synthetic-size 4096 --epochs 1000 --batch-size 16 --quiet --out "$tmp/k" \
  >"$tmp/kout" 2>"$tmp/kerr" &
mp=$!
victim=""
for _ in $(seq 1 100); do
  # training has started once rank 0 printed its first epoch line
  if [ -s "$tmp/kout" ]; then victim=$(pgrep -P $mp | tail -1); break; fi
  sleep 0.2
done
start=$(date +%s)
if [ -z "$victim" ]; then
  echo "FAIL: killed rank: training did not start" >&2; cat "$tmp/kerr" >&2; kill $mp 2>/dev/null; fail=1
else
  kill -9 "$victim"
  # wait for mpirun at most 60 s (no background sleeper left holding the test's output)
  if timeout 60 tail --pid=$mp -f /dev/null; then
    wait $mp; rc=$?
  else
    kill -9 $mp 2>/dev/null; wait $mp; rc=0
  fi
  dt=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ] || [ $dt -ge 60 ]; then
    echo "FAIL: killed rank: mpirun rc=$rc after ${dt}s" >&2; fail=1
  else
    echo "killed rank $victim: the job ended with rc=$rc after ${dt}s"
  fi
fi
exit $fail
