#!/bin/bash
# CLI behaviour: bad input exits 2 with one "snn: error:" line; train -> eval -> predict
# round trip on scikit-learn's digits (or synthetic data when the CSV is absent);
# corrupt checkpoints are refused.
set -u
B=${1:?build dir}
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fail=1; fi; }

# expect_usage_error DESCRIPTION ARGS...: exit code 2, exactly one stderr line starting "snn: error: "
expect_usage_error() {
  local what=$1; shift
  "$SNN" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q '^snn: error: ' "$tmp/err"; then
    echo "FAIL: $what: rc=$rc, stderr:" >&2; cat "$tmp/err" >&2; fail=1
  fi
}

check "version" '"$SNN" --version | grep -q "^snn "'
for c in train eval predict; do
  check "$c --help" '"$SNN" $c --help | grep -q "^usage: snn $c"'
done
expect_usage_error "no such command" frobnicate
expect_usage_error "unknown option" train --model fcsnn --dataset synthetic --bogus 1
expect_usage_error "bad integer" train --model fcsnn --dataset synthetic --epochs two
expect_usage_error "negative batch" train --model fcsnn --dataset synthetic --batch-size -3
expect_usage_error "unknown model" train --model resnet --dataset synthetic
expect_usage_error "unknown dataset" train --model fcsnn --dataset imagenet
expect_usage_error "missing dataset" train --model fcsnn
expect_usage_error "missing value" train --model
expect_usage_error "bad optimizer" train --model fcsnn --dataset synthetic --optimizer rmsprop
expect_usage_error "bad spikformer size" train --model spikformer --dataset synthetic --image-size 30
expect_usage_error "tau <= 1" train --model fcsnn --dataset synthetic --tau 0.5
expect_usage_error "missing data dir" train --model fcsnn --dataset fashion-mnist --data-dir "$tmp/nowhere"
expect_usage_error "eval without checkpoint" eval --dataset synthetic
expect_usage_error "eval missing checkpoint file" eval --checkpoint "$tmp/none.safetensors" --dataset synthetic

ds=digits
python3 -c 'import sklearn' 2>/dev/null || ls /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz >/dev/null 2>&1 || ds=synthetic
if [ "$ds" = digits ] && [ ! -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ]; then ds=synthetic; fi
echo "cli test dataset: $ds" >&2
"$SNN" train --model fcsnn --dataset $ds --hidden 64 --epochs 6 --lr 0.01 --batch-size 32 --T 4 --out "$tmp/run" --json >"$tmp/train.out" 2>"$tmp/train.err"
rc=$?
check "train exit 0" '[ $rc -eq 0 ]'
check "train wrote checkpoint" '[ -s "$tmp/run/model.safetensors" ]'
check "train wrote metrics" '[ $(wc -l <"$tmp/run/metrics.jsonl") -eq 6 ]'
last=$(tail -n 1 "$tmp/train.out")
check "json summary" 'python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert all(k in d for k in (\"test_accuracy\",\"samples_per_s\",\"wall_s\",\"epochs\")), d; assert d[\"epochs\"]==6" "$last"'
if [ "$ds" = digits ]; then
  check "digits accuracy > 0.8" 'python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert d[\"test_accuracy\"]>0.8, d" "$last"'
fi
acc_train=$(python3 -c 'import json,sys; print("%.6f" % json.loads(sys.argv[1])["test_accuracy"])' "$last")
"$SNN" eval --checkpoint "$tmp/run/model.safetensors" --dataset $ds --json >"$tmp/eval.out" 2>"$tmp/eval.err"
check "eval exit 0" '[ $? -eq 0 ]'
acc_eval=$(python3 -c 'import json,sys; print("%.6f" % json.loads(sys.argv[1])["accuracy"])' "$(tail -n 1 "$tmp/eval.out")")
check "eval reproduces the training run's test accuracy ($acc_train vs $acc_eval)" '[ "$acc_train" = "$acc_eval" ]'

# corrupt checkpoints: truncated, random, wrong header
head -c 100 "$tmp/run/model.safetensors" >"$tmp/trunc.safetensors"
expect_usage_error "truncated checkpoint" eval --checkpoint "$tmp/trunc.safetensors" --dataset $ds
head -c 4096 /dev/urandom >"$tmp/random.safetensors"
expect_usage_error "random checkpoint" eval --checkpoint "$tmp/random.safetensors" --dataset $ds
printf '\xff\xff\xff\xff\xff\xff\xff\x7f{}' >"$tmp/huge.safetensors"
expect_usage_error "huge header length" eval --checkpoint "$tmp/huge.safetensors" --dataset $ds

# predict on an IDX file we write ourselves (8x8 images for digits, 28x28 otherwise)
python3 - "$tmp/img.idx" "$ds" <<'PY'
import struct, sys, random
side = 8 if sys.argv[2] == "digits" else 28
n = 5
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, side, side))
    f.write(bytes(random.randrange(256) for _ in range(n * side * side)))
PY
"$SNN" predict --checkpoint "$tmp/run/model.safetensors" --input "$tmp/img.idx" >"$tmp/pred.out" 2>"$tmp/pred.err"
check "predict exit 0" '[ $? -eq 0 ]'
check "predict one line per image" '[ $(wc -l <"$tmp/pred.out") -eq 5 ]'
check "predict classes in range" 'awk "{ if (\$2 < 0 || \$2 > 9) exit 1 }" "$tmp/pred.out"'
# --device cuda: without CUDA in this build one line naming the build and exit 2 (train,
# eval and predict place the model with snn_model_to, which refuses the device there); with
# CUDA, tests/cli_cuda.sh runs them on a GPU
if ! "$SNN" --version | grep -q cuda; then
  for dev in cuda cuda:0; do
    expect_usage_error "train --device $dev" train --model fcsnn --dataset synthetic --device $dev --out "$tmp/gpu"
    check "train --device $dev names the build" 'grep -q "built without CUDA" "$tmp/err"'
    expect_usage_error "eval --device $dev" eval --checkpoint "$tmp/run/model.safetensors" --dataset $ds --device $dev
    check "eval --device $dev names the build" 'grep -q "built without CUDA" "$tmp/err"'
    expect_usage_error "predict --device $dev" predict --checkpoint "$tmp/run/model.safetensors" --input "$tmp/img.idx" --device $dev
    check "predict --device $dev names the build" 'grep -q "built without CUDA" "$tmp/err"'
  done
  # the checkpoint's precision is checked first, with the CPU's refusal
  expect_usage_error "eval --device cuda --precision bf16 (fp32 checkpoint)" eval --checkpoint "$tmp/run/model.safetensors" --dataset $ds --device cuda --precision bf16
  check "eval --device cuda refuses another precision" 'grep -q "does not match the requested" "$tmp/err"'
fi
expect_usage_error "eval bad device" eval --checkpoint "$tmp/run/model.safetensors" --dataset $ds --device cuda:x
expect_usage_error "predict bad device" predict --checkpoint "$tmp/run/model.safetensors" --input "$tmp/img.idx" --device gpu
expect_usage_error "bad device" train --model fcsnn --dataset synthetic --device cuda:x --out "$tmp/gpu"
head -c 20 "$tmp/img.idx" >"$tmp/bad.idx"
expect_usage_error "truncated idx" predict --checkpoint "$tmp/run/model.safetensors" --input "$tmp/bad.idx"
exit $fail
