#!/bin/bash
# DDP on 2 MPI ranks against one process (tests/driver_ddp.c: fcsnn and convsnn FP32 final
# weights within 1e-5 relative after 20 steps; replicas bit-identical after every step;
# FP8 delayed amax histories and scales bit-identical after every step; FP16 loss scale and
# skips identical), then the CLI: `mpirun -np 2 snn train --data-parallel ddp --batch-size B`
# against `snn train --data-parallel ddp --batch-size 2B` on one process.
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run2() { timeout 120 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$@"; }

given_seed=${SNN_TEST_SEED:-}
for args in "fcsnn fp32" "convsnn fp32" "convsnn-syncbn fp32" "fcsnn fp8" "fcsnn fp16"; do
  # SyncBatchNorm against one process: the two sum in different orders, and about one seed
  # in 15 flips an IF spike near its threshold within 20 steps (docs/distributed.md), so
  # this case runs a fixed data seed; every other case draws fresh data
  if [ "$args" = "convsnn-syncbn fp32" ]; then export SNN_TEST_SEED=2
  elif [ -n "$given_seed" ]; then export SNN_TEST_SEED=$given_seed
  else unset SNN_TEST_SEED; fi
  if ! run2 ${SNN_TEST_SEED:+-x SNN_TEST_SEED} "$B/driver_ddp" $args 20 8 >"$tmp/out" 2>&1; then
    echo "FAIL: driver_ddp $args" >&2; cat "$tmp/out" >&2; fail=1
  else
    cat "$tmp/out"
  fi
done

# the CLI: same samples per step (direct encoding, SGD, constant lr), 2 epochs
common="train --data-parallel ddp --model fcsnn --hidden 64 --dataset synthetic --synthetic-size 256 --epochs 2
        --optimizer sgd --lr 0.05 --schedule constant --quiet"
if ! run2 "$SNN" $common --batch-size 16 --out "$tmp/dp2" >"$tmp/dp2.json" 2>"$tmp/dp2.err"; then
  echo "FAIL: mpirun -np 2 snn train" >&2; cat "$tmp/dp2.err" >&2; fail=1
fi
if ! env -u OMPI_COMM_WORLD_SIZE "$SNN" $common --batch-size 32 --out "$tmp/dp1" >"$tmp/dp1.json" 2>"$tmp/dp1.err"; then
  echo "FAIL: one-process snn train --data-parallel ddp" >&2; cat "$tmp/dp1.err" >&2; fail=1
fi
if [ $fail = 0 ]; then
  /usr/bin/python3 - "$tmp" "$(dirname "$0")" <<'PY' || fail=1
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from st_f32 import worst_rel
def lines(p): return [json.loads(l) for l in open(p) if l.strip()]
a, b = lines(tmp + "/dp2.json"), lines(tmp + "/dp1.json")
assert len(a) == 3 and len(b) == 3, (a, b)
for e in a[:2]:
    assert sorted(e) == ["epoch", "optimizer_step", "train_loss", "validation_accuracy", "validation_loss"], e
keys = ["data_parallel_size", "global_batch_size", "images_per_second", "optimizer_step", "peak_memory_bytes",
        "pipeline_parallel_size", "tensor_parallel_size", "timed_steps", "total_peak_memory_bytes", "train_loss",
        "training_seconds", "validation_accuracy", "validation_loss"]
for k in keys: assert k in a[2], k
assert list(a[2]) == sorted(a[2]), "final metrics keys not sorted"
assert a[2]["data_parallel_size"] == 2 and b[2]["data_parallel_size"] == 1
assert a[2]["global_batch_size"] == 32 == b[2]["global_batch_size"]
assert a[2]["optimizer_step"] == b[2]["optimizer_step"] == 16
assert a[2]["total_peak_memory_bytes"] >= a[2]["peak_memory_bytes"] > 0
for x, y in zip(a, b):
    for k in ("train_loss", "validation_loss", "validation_accuracy"):
        assert abs(x[k] - y[k]) <= 1e-5 * max(1.0, abs(y[k])), (k, x[k], y[k])
worst, nt = worst_rel(tmp + "/dp2/model.safetensors", tmp + "/dp1/model.safetensors")
print("cli: DP 2 x batch 16 vs 1 x batch 32: max relative weight difference %.3g over %d tensors" % (worst, nt))
assert worst <= 1e-5, worst
PY
fi
# --sync-batchnorm on a model without BatchNorm: exit 2 with the reason
run2 "$SNN" train --data-parallel ddp --model fcsnn --sync-batchnorm --dataset synthetic --out "$tmp/sb" --quiet \
  >/dev/null 2>"$tmp/sb.err"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "^snn: error: .*has no BatchNorm" "$tmp/sb.err"; then
  echo "FAIL: --sync-batchnorm without BatchNorm: rc=$rc" >&2; cat "$tmp/sb.err" >&2; fail=1
fi
exit $fail
