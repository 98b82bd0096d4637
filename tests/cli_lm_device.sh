#!/bin/bash
# `snn lm train / eval / generate --device`, the parts that run without a GPU:
#   - --device cpu is the default: a gpt and a spikelm run with and without it write the
#     same checkpoint bytes and the same metrics (timings aside), and eval prints the same
#     loss;
#   - a bad device name is exit 2 with one `snn: error:` line naming the flag;
#   - a build without CUDA refuses --device cuda / cuda:N on train, eval and generate with
#     exit 2 and one `snn: error:` line naming the build, before any file is read;
#   - a CUDA build refuses generate and train --device cuda with tensor / pipeline / context
#     parallel sizes other than 1 (exit 2).
# On a GPU machine, tests/cuda/test_cuda_lm_train compares cuda with cpu runs.
set -u
B=${1:?build dir}
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
cuda_build=0
grep -q "^SNN_CUDA:BOOL=ON" "$B/CMakeCache.txt" 2>/dev/null && cuda_build=1

seed=${SNN_TEST_SEED:-$(date +%s%N | cut -c1-15)}
echo "test seed: SNN_TEST_SEED=$seed"
SNN_TEST_SEED=$seed /usr/bin/python3 "$(dirname "$0")/lm_tokens.py" "$tmp/data" || exit 1

# expect_error WHAT NEEDLE ARGS...: exit 2, one stderr line "snn: error: ..." holding NEEDLE
expect_error() {
  local what=$1 needle=$2; shift 2
  "$SNN" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^snn: error: ' "$tmp/err" ||
     ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL: $what: rc=$rc, expected exit 2 with one line holding '$needle'; stderr:" >&2; cat "$tmp/err" >&2; fail=1
  else
    echo "ok: $what ($(cat "$tmp/err"))"
  fi
}

# the metrics lines without their timings and memory (which vary run to run)
strip() { /usr/bin/python3 -c "
import json, sys
for s in open(sys.argv[1]):
    if s.startswith('{'):
        l = json.loads(s)
        for k in list(l):
            if 'seconds' in k or 'per_second' in k or 'memory' in k or k == 'checkpoint': del l[k]
        print(json.dumps(l, sort_keys=True))" "$1"; }

common="--data $tmp/data --layers 2 --hidden 32 --heads 4 --micro-batch-size 4 --global-batch-size 8 --train-steps 3
  --log-interval 1 --lr 3e-3 --clip-grad 0.5 --eval-interval 3 --eval-steps 1"
for model in gpt spikelm; do
  extra=""
  [ $model = spikelm ] && extra="--time-steps 2"
  # one output path for both (the checkpoint records the training config, output included)
  if ! "$SNN" lm train --model $model $extra $common --output "$tmp/run" >"$tmp/$model.a.log" 2>"$tmp/err" ||
     ! mv "$tmp/run" "$tmp/$model.a" ||
     ! "$SNN" lm train --model $model $extra $common --device cpu --output "$tmp/run" >"$tmp/$model.b.log" 2>"$tmp/err" ||
     ! mv "$tmp/run" "$tmp/$model.b"; then
    echo "FAIL: $model training:" >&2; cat "$tmp/err" >&2; fail=1; continue
  fi
  if cmp -s "$tmp/$model.a/step_0000003/checkpoint.safetensors" "$tmp/$model.b/step_0000003/checkpoint.safetensors" &&
     [ "$(strip "$tmp/$model.a.log")" = "$(strip "$tmp/$model.b.log")" ]; then
    echo "ok: $model --device cpu is the default (same checkpoint bytes and metrics)"
  else
    echo "FAIL: $model: --device cpu differs from the default run" >&2; fail=1
  fi
  ea=$("$SNN" lm eval "$tmp/$model.a/step_0000003" --max-samples 8 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['lm_loss'])")
  eb=$("$SNN" lm eval "$tmp/$model.a/step_0000003" --max-samples 8 --device cpu 2>/dev/null | /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['lm_loss'])")
  if [ -n "$ea" ] && [ "$ea" = "$eb" ]; then echo "ok: $model eval --device cpu ($ea)"
  else echo "FAIL: $model eval: '$ea' vs '$eb' with --device cpu" >&2; fail=1; fi
done

ck="$tmp/gpt.a/step_0000003"
expect_error "train --device gpu" "--device must be cpu, cuda or cuda:N" lm train $common --output "$tmp/x" --device gpu
expect_error "eval --device tpu" "--device must be cpu, cuda or cuda:N" lm eval "$ck" --device tpu
expect_error "generate --device tpu" "--device must be cpu, cuda or cuda:N" lm generate "$ck" --prompt-ids 1,2 --device tpu
if [ $cuda_build = 0 ]; then
  for dev in cuda cuda:0; do
    expect_error "train --device $dev (no CUDA)" "built without CUDA" lm train $common --output "$tmp/x" --device $dev
    expect_error "eval --device $dev (no CUDA)" "built without CUDA" lm eval "$ck" --device $dev
    expect_error "generate --device $dev (no CUDA)" "built without CUDA" lm generate "$ck" --prompt-ids 1,2,3 --device $dev
  done
  # refused before any file is read: a missing data directory does not matter
  expect_error "train --device cuda, no data (no CUDA)" "built without CUDA" lm train --data "$tmp/none" --output "$tmp/x" --device cuda
  [ -e "$tmp/x" ] && { echo "FAIL: a refused run created its output directory" >&2; fail=1; }
else
  expect_error "generate --device cuda with TP 2" "parallel sizes 1" lm generate "$ck" --prompt-ids 1,2,3 --device cuda \
    --tensor-parallel-size 2
  expect_error "train --device cuda with TP 2" "parallel sizes 1" lm train $common --output "$tmp/x" --device cuda \
    --tensor-parallel-size 2
fi
exit $fail
