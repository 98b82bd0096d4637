#!/bin/bash
# snn train / eval / predict --device cuda on a GPU machine: all three run on the engine (the
# model placed with snn_model_to, then prepared), so they must agree with the CPU.
#   - a checkpoint trained on the CPU (fp32, bf16, fp8 delayed; digits where scikit-learn's
#     CSV is installed, else synthetic data) evaluates on cuda and cuda:0
#     to the CPU's accuracy (within 1% of the test samples: GPU sums round differently),
#     and predict prints one line per image with nearly the same classes;
#   - precision flags that disagree with the checkpoint are refused with the CPU's message;
#   - a run trained with --device cuda evaluates on the CPU and on the GPU to the accuracy
#     the training run printed.
# Exit 77 (skipped) on a build without CUDA or a machine without a usable GPU; there
# tests/cli_train.sh checks that --device cuda is refused with one line.
set -u
B=${1:?build dir}
SNN="$B/snn"
"$SNN" --version | grep -q "(cuda)" || { echo "skip: this snn was built without CUDA"; exit 77; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skip: no usable GPU"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
bad() { echo "FAIL: $*" >&2; fail=1; }

# value KEY: KEY of the last (JSON) line of stdin
value() { "$PY" -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
# close A B N: |A - B| <= 1% of N samples (at least one sample)
close() { "$PY" -c "import sys; a,b,n=float(sys.argv[1]),float(sys.argv[2]),int(sys.argv[3]); sys.exit(0 if abs(a-b)*n <= max(1, 0.01*n) else 1)" "$@"; }

# scikit-learn's digits where Debian's CSV is there (a model that learns, so the classes
# mean something), else synthetic data (random labels: the comparison still holds)
ds=synthetic side=28
[ -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ] && ds=digits side=8
echo "cli_cuda dataset: $ds"
"$PY" - "$tmp/img.idx" $side <<'PY'
import struct, sys, random
random.seed(7)
n, side = 40, int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, side, side))
    f.write(bytes(random.randrange(256) for _ in range(n * side * side)))
PY

common="--model fcsnn --dataset $ds --synthetic-size 512 --hidden 64 --epochs 4 --lr 0.01 --batch-size 32 --T 4 --quiet"
for p in fp32 bf16 fp8; do
  pa="--precision $p"
  [ $p = fp8 ] && pa="$pa --fp8-recipe delayed"
  if ! "$SNN" train $common $pa --out "$tmp/$p" >"$tmp/train.out" 2>"$tmp/err"; then
    bad "train $p on the CPU: $(cat "$tmp/err")"; continue
  fi
  ck="$tmp/$p/model.safetensors"
  if ! "$SNN" eval --checkpoint "$ck" --dataset $ds --json >"$tmp/eval.out" 2>"$tmp/err"; then
    bad "eval $p on the CPU: $(cat "$tmp/err")"; continue
  fi
  acpu=$(value accuracy <"$tmp/eval.out") N=$(value samples <"$tmp/eval.out")
  for dev in cuda cuda:0; do
    agpu=$("$SNN" eval --checkpoint "$ck" --dataset $ds --device $dev --json 2>"$tmp/err" | value accuracy)
    if [ -z "$agpu" ]; then bad "eval $p --device $dev: $(cat "$tmp/err")"
    elif close "$acpu" "$agpu" $N; then echo "ok: eval $p --device $dev ($agpu, cpu $acpu)"
    else bad "eval $p --device $dev: accuracy $agpu, the CPU's $acpu"; fi
  done
  # the checkpoint's precision flags are accepted, other ones refused as on the CPU
  if ! "$SNN" eval --checkpoint "$ck" --dataset $ds --device cuda $pa >/dev/null 2>"$tmp/err"; then
    bad "eval $p --device cuda with the checkpoint's own precision flags: $(cat "$tmp/err")"
  fi
  other="--precision fp16"
  "$SNN" eval --checkpoint "$ck" --dataset $ds $other >/dev/null 2>"$tmp/cpu.err"; rc_cpu=$?
  "$SNN" eval --checkpoint "$ck" --dataset $ds $other --device cuda >/dev/null 2>"$tmp/gpu.err"; rc_gpu=$?
  if [ $rc_cpu -eq 2 ] && [ $rc_gpu -eq 2 ] && [ "$(wc -l <"$tmp/gpu.err")" -eq 1 ] && cmp -s "$tmp/cpu.err" "$tmp/gpu.err"; then
    echo "ok: eval $p --device cuda refuses $other as the CPU does"
  else
    bad "eval $p $other: cpu rc $rc_cpu '$(cat "$tmp/cpu.err")', cuda rc $rc_gpu '$(cat "$tmp/gpu.err")'"
  fi
  "$SNN" predict --checkpoint "$ck" --input "$tmp/img.idx" >"$tmp/pred.cpu" 2>"$tmp/err" || bad "predict $p on the CPU: $(cat "$tmp/err")"
  for dev in cuda cuda:0; do
    if ! "$SNN" predict --checkpoint "$ck" --input "$tmp/img.idx" --device $dev >"$tmp/pred.gpu" 2>"$tmp/err"; then
      bad "predict $p --device $dev: $(cat "$tmp/err")"; continue
    fi
    # same indices in order; a class may differ where two classes' outputs are within rounding
    if "$PY" - "$tmp/pred.cpu" "$tmp/pred.gpu" <<'PY'; then echo "ok: predict $p --device $dev"; else bad "predict $p --device $dev differs from the CPU"; fi
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
ok = len(a) == len(b) == 40 and all(x[0] == y[0] == str(i) for i, (x, y) in enumerate(zip(a, b)))
diff = sum(x[1] != y[1] for x, y in zip(a, b))
print(f"  predict: {len(b)} lines, {diff} classes differ from the CPU")
sys.exit(0 if ok and diff <= 2 else 1)
PY
  done
  "$SNN" predict --checkpoint "$ck" --input "$tmp/img.idx" --device cuda --json >"$tmp/pred.json" 2>"$tmp/err" &&
    "$PY" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(0 if len(r)==40 and all({'index','class','score'} <= set(x) for x in r) else 1)" "$tmp/pred.json" ||
    bad "predict $p --device cuda --json: $(cat "$tmp/err")"
done

# trained on the GPU: eval on either device reproduces the accuracy the run printed
if "$SNN" train $common --device cuda --json --out "$tmp/g" >"$tmp/train.out" 2>"$tmp/err"; then
  atrain=$(value test_accuracy <"$tmp/train.out")
  "$SNN" eval --checkpoint "$tmp/g/model.safetensors" --dataset $ds --json >"$tmp/eval.out" 2>/dev/null &&
    N=$(value samples <"$tmp/eval.out")
  for dev in cuda cpu; do
    a=$("$SNN" eval --checkpoint "$tmp/g/model.safetensors" --dataset $ds --device $dev --json 2>"$tmp/err" | value accuracy)
    if [ -n "$a" ] && close "$atrain" "$a" $N; then echo "ok: a cuda run evaluates on $dev ($a, trained $atrain)"
    else bad "cuda run, eval --device $dev: '$a' vs the run's $atrain: $(cat "$tmp/err")"; fi
  done
else
  bad "train --device cuda: $(cat "$tmp/err")"
fi
exit $fail
