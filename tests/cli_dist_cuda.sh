#!/bin/bash
# Data-parallel training of a model placed on the GPU (the engine: snn_model_to, prepare,
# the library's loop; gradients averaged by snn_ddp) against one process on the same GPU:
#   - tests/driver_ddp.c on 2 ranks with DEVICE cuda: fcsnn fp32 / fp16 / fp8 delayed and
#     convsnn with SyncBatchNorm; replicas bit-identical after every step, FP8 amax MAX-reduced,
#     FP16 skips agreed, and the FP32 weights within 1e-5 of one process with batch 2B on
#     the GPU. With one GPU both ranks share it and the gradients go through the host
#     (MPI); with DDP_NCCL=1 and a GPU per rank they go through NCCL;
#   - the CLI: `mpirun -np 2 snn train --data-parallel ddp --device cuda --batch-size 16`
#     against one process with --batch-size 32 (losses and final weights within 1e-5), and a
#     step checkpoint resumed on the GPU ends where the uninterrupted run ends;
#   - language models: `mpirun -np 2 snn lm train --device cuda` (gpt and spikelm, FP32, the
#     distributed optimizer's reductions through the host) against one process on the GPU
#     with the same global batch: logged metrics, weights and AdamW state within 1e-5
#     (tests/lm_ckpt_compare.py), and the DP 2 checkpoint resumed by one CPU process.
# Exit 77 (skipped) without CUDA in this snn, without a usable GPU or without mpirun.
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
SNN="$B/snn"
"$SNN" --version | grep -q "(cuda)" || { echo "skip: this snn was built without CUDA"; exit 77; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skip: no usable GPU"; exit 77
fi
# a Python with numpy (tests/lm_tokens.py, tests/lm_ckpt_compare.py)
PY=
for p in python3 /usr/bin/python3; do
  command -v "$p" >/dev/null 2>&1 && "$p" -c "import numpy" 2>/dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || { echo "skip: no python3 with numpy"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run2() { timeout 300 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS -x OMP_WAIT_POLICY ${DDP_NCCL:+-x DDP_NCCL} "$@"; }

given_seed=${SNN_TEST_SEED:-}
for args in "fcsnn fp32" "fcsnn fp16" "fcsnn fp8" "convsnn-syncbn fp32"; do
  # a fixed data seed for SyncBatchNorm (tests/cli_dist_ddp.sh says why), fresh data otherwise
  if [ "$args" = "convsnn-syncbn fp32" ]; then export SNN_TEST_SEED=2
  elif [ -n "$given_seed" ]; then export SNN_TEST_SEED=$given_seed
  else unset SNN_TEST_SEED; fi
  if ! run2 ${SNN_TEST_SEED:+-x SNN_TEST_SEED} "$B/driver_ddp" $args 20 8 cuda >"$tmp/out" 2>&1; then
    echo "FAIL: driver_ddp $args cuda" >&2; cat "$tmp/out" >&2; fail=1
  else
    cat "$tmp/out"
  fi
done

common="train --data-parallel ddp --device cuda --model fcsnn --hidden 64 --dataset synthetic --synthetic-size 256
        --epochs 2 --optimizer sgd --lr 0.05 --schedule constant --quiet"
run2 "$SNN" $common --batch-size 16 --out "$tmp/dp2" >"$tmp/dp2.json" 2>"$tmp/dp2.err" ||
  { echo "FAIL: mpirun -np 2 snn train --device cuda" >&2; cat "$tmp/dp2.err" >&2; fail=1; }
env -u OMPI_COMM_WORLD_SIZE "$SNN" $common --batch-size 32 --out "$tmp/dp1" >"$tmp/dp1.json" 2>"$tmp/dp1.err" ||
  { echo "FAIL: one-process snn train --data-parallel ddp --device cuda" >&2; cat "$tmp/dp1.err" >&2; fail=1; }
# the same run in two halves: 8 steps with a checkpoint, then --resume for the other 8
run2 "$SNN" $common --batch-size 16 --max-steps 8 --checkpoint-dir "$tmp/ck" --out "$tmp/h1" >/dev/null 2>"$tmp/h1.err" ||
  { echo "FAIL: first half with --checkpoint-dir" >&2; cat "$tmp/h1.err" >&2; fail=1; }
step=$(ls -d "$tmp"/ck/step_* 2>/dev/null | tail -1)
if [ -n "$step" ]; then
  run2 "$SNN" $common --batch-size 16 --resume "$step" --checkpoint-dir "$tmp/ck" --out "$tmp/h2" \
    >"$tmp/h2.json" 2>"$tmp/h2.err" ||
    { echo "FAIL: --resume $step" >&2; cat "$tmp/h2.err" >&2; fail=1; }
else
  echo "FAIL: no step checkpoint in $tmp/ck" >&2; fail=1
fi
if [ $fail = 0 ]; then
  "$PY" - "$tmp" "$(dirname "$0")" <<'PY' || fail=1
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from st_f32 import worst_rel
def lines(p): return [json.loads(l) for l in open(p) if l.strip()]
a, b = lines(tmp + "/dp2.json"), lines(tmp + "/dp1.json")
assert len(a) == 3 and len(b) == 3, (a, b)
assert a[2]["data_parallel_size"] == 2 and b[2]["data_parallel_size"] == 1
assert a[2]["optimizer_step"] == b[2]["optimizer_step"] == 16
for x, y in zip(a, b):
    for k in ("train_loss", "validation_loss", "validation_accuracy"):
        assert abs(x[k] - y[k]) <= 1e-5 * max(1.0, abs(y[k])), (k, x[k], y[k])
w, _ = worst_rel(tmp + "/dp2/model.safetensors", tmp + "/dp1/model.safetensors")
print("cli --device cuda: DP 2 x batch 16 vs 1 x batch 32: max relative weight difference %.3g" % w)
assert w <= 1e-5, w
r, _ = worst_rel(tmp + "/h2/model.safetensors", tmp + "/dp2/model.safetensors")
print("cli --device cuda: checkpoint at step 8 + resume vs uninterrupted: max relative weight difference %.3g" % r)
assert r <= 1e-6, r
c = lines(tmp + "/h2.json")[-1]
assert c["optimizer_step"] == 16, c
PY
fi
# language models on the GPU, DP 2 against one process
seed=${given_seed:-$(date +%s%N | cut -c1-15)}
echo "lm test seed: SNN_TEST_SEED=$seed"
SNN_TEST_SEED=$seed "$PY" "$(dirname "$0")/lm_tokens.py" "$tmp/tok" || fail=1
lmc="--data $tmp/tok --layers 2 --hidden 32 --heads 4 --micro-batch-size 2 --global-batch-size 8 --train-steps 5
  --log-interval 1 --lr 3e-3 --lr-warmup-steps 1 --clip-grad 0.5 --eval-interval 5 --eval-steps 1"
for model in gpt spikelm; do
  extra=""
  [ $model = spikelm ] && extra="--time-steps 2"
  "$SNN" lm train --model $model $extra $lmc --device cuda --output "$tmp/$model.1" >"$tmp/$model.1.log" 2>"$tmp/err" ||
    { echo "FAIL: lm $model on one process, cuda:" >&2; cat "$tmp/err" >&2; fail=1; continue; }
  run2 "$SNN" lm train --model $model $extra $lmc --device cuda --output "$tmp/$model.2" --checkpoint-interval 3 \
    >"$tmp/$model.2.log" 2>"$tmp/err" ||
    { echo "FAIL: lm $model DP 2, cuda:" >&2; cat "$tmp/err" >&2; fail=1; continue; }
  "$PY" "$(dirname "$0")/lm_ckpt_compare.py" "$tmp/$model.1/step_0000005" "$tmp/$model.2/step_0000005" \
    "lm $model cuda DP2 vs DP1" "$tmp/$model.1.log" "$tmp/$model.2.log" || fail=1
  # the device DP 2 checkpoint at step 3, continued by one CPU process, ends at the same step 5
  "$SNN" lm train --model $model $extra $lmc --output "$tmp/$model.r" --resume "$tmp/$model.2/step_0000003" \
    >"$tmp/$model.r.log" 2>"$tmp/err" ||
    { echo "FAIL: lm $model resume on the CPU:" >&2; cat "$tmp/err" >&2; fail=1; continue; }
  "$PY" "$(dirname "$0")/lm_ckpt_compare.py" --min-logged 2 "$tmp/$model.r/step_0000005" \
    "$tmp/$model.2/step_0000005" "lm $model cuda DP2 step 3 resumed on the CPU" || fail=1
done
[ $fail = 0 ] && echo "cli_dist_cuda: ok"
exit $fail
