#!/bin/bash
# Data-parallel language-model evaluation and generation (`mpirun -np N snn lm eval|generate`)
# against one process, on a small spikelm trained here on fresh token data:
#   - eval at DP 2 and DP 3 (uneven slices): valid_tokens equal one process and lm_loss within
#     1e-6 relative (other batch compositions round the float32 GEMMs differently),
#     data_parallel_size reported;
#   - generate, greedy and sampled (temperature 0.8, top-k 5), 5 prompt rows at DP 2 and DP 3:
#     the tokens of every row equal one process (each row has its own sampling stream);
#   - eval with TP 2 (with and without sequence parallel), PP 2 (K 2) and TP 2 x PP 2 on 16
#     samples equals one process within 1e-6; a sample count the layout cannot split is exit 2;
#   - generation at TP 2, PP 2, TP 2 x PP 2 and DP 2 x TP 2, greedy and sampled: the same tokens
#     as one process (the KV cache sharded with the heads and layers);
#   - a missing checkpoint is exit 2 with one line on every layout.
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
mpi() { timeout 60 mpirun -q --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$@"; }
seed=${SNN_TEST_SEED:-$(date +%s%N | cut -c1-15)}
echo "test seed: SNN_TEST_SEED=$seed"
SNN_TEST_SEED=$seed /usr/bin/python3 "$(dirname "$0")/lm_tokens.py" "$tmp/data" --rows 48,21,16 --noise 0 || exit 1
if ! "$SNN" lm train --model spikelm --time-steps 2 --data "$tmp/data" --layers 2 --hidden 32 --heads 4 \
    --micro-batch-size 2 --global-batch-size 8 --train-steps 6 --log-interval 3 --lr 3e-3 --output "$tmp/run" \
    >"$tmp/train.log" 2>"$tmp/err"; then
  echo "FAIL: training the model:" >&2; cat "$tmp/err" >&2; exit 1
fi
ck=$(ls -d "$tmp"/run/step_* | tail -1)
"$SNN" lm eval "$ck" --micro-batch-size 4 >"$tmp/e1.json" 2>"$tmp/err" || { echo "FAIL: eval (1)" >&2; cat "$tmp/err" >&2; fail=1; }
for np_ in 2 3; do
  if ! mpi -np $np_ "$SNN" lm eval "$ck" --micro-batch-size 4 >"$tmp/e$np_.json" 2>"$tmp/err"; then
    echo "FAIL: eval at DP $np_" >&2; cat "$tmp/err" >&2; fail=1; continue
  fi
  /usr/bin/python3 - "$tmp/e1.json" "$tmp/e$np_.json" $np_ <<'PY' || fail=1
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert b["data_parallel_size"] == int(sys.argv[3]) and a["data_parallel_size"] == 1, (a, b)
assert a["valid_tokens"] == b["valid_tokens"] == 21 * 16, (a["valid_tokens"], b["valid_tokens"])
# a rank's batches hold other samples than one process's (its slice starts elsewhere), and the
# float32 GEMMs of a different batch round differently: 1e-6, the bound of the TP/PP checks
assert abs(a["lm_loss"] - b["lm_loss"]) <= 1e-6 * abs(a["lm_loss"]), (a["lm_loss"], b["lm_loss"])
print("lm eval DP %s: lm_loss %.9g = one process, %d tokens" % (sys.argv[3], b["lm_loss"], b["valid_tokens"]))
PY
done
# tensor / pipeline parallel evaluation of the same checkpoint: 16 samples
"$SNN" lm eval "$ck" --micro-batch-size 4 --max-samples 16 >"$tmp/e16.json" 2>"$tmp/err" ||
  { echo "FAIL: eval 16 (1)" >&2; cat "$tmp/err" >&2; fail=1; }
for layout in "2 --tensor-parallel-size 2" "2 --tensor-parallel-size 2 --sequence-parallel" \
              "2 --pipeline-parallel-size 2 --pipeline-microbatches 2" \
              "4 --tensor-parallel-size 2 --pipeline-parallel-size 2 --pipeline-microbatches 2"; do
  set -- $layout
  np_=$1; shift
  if ! mpi -np $np_ "$SNN" lm eval "$ck" --micro-batch-size 4 --max-samples 16 "$@" >"$tmp/ep.json" 2>"$tmp/err"; then
    echo "FAIL: eval $layout" >&2; cat "$tmp/err" >&2; fail=1; continue
  fi
  /usr/bin/python3 - "$tmp/e16.json" "$tmp/ep.json" "$layout" <<'PY' || fail=1
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["valid_tokens"] == b["valid_tokens"] == 16 * 16, (a, b)
assert abs(a["lm_loss"] - b["lm_loss"]) <= 1e-6 * abs(a["lm_loss"]), (a["lm_loss"], b["lm_loss"])
print("lm eval -np %s: lm_loss %.9g vs one process %.9g" % (sys.argv[3], b["lm_loss"], a["lm_loss"]))
PY
done
mpi -np 2 "$SNN" lm eval "$ck" --micro-batch-size 4 --tensor-parallel-size 2 >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "^snn: error: .*not a multiple of data_parallel_size" "$tmp/err"; then
  echo "FAIL: 21 samples at TP 2 x micro 4: rc=$rc" >&2; cat "$tmp/err" >&2; fail=1
fi
ids="1,2,3;4,5,6;7,8,9;10,11,12;13,14,15"
for mode in "--temperature 0" "--temperature 0.8 --top-k 5 --seed 7"; do
  "$SNN" lm generate "$ck" --prompt-ids "$ids" --max-new-tokens 6 $mode >"$tmp/g1" 2>"$tmp/err" ||
    { echo "FAIL: generate (1) $mode" >&2; cat "$tmp/err" >&2; fail=1; continue; }
  for np_ in 2 3; do
    if ! mpi -np $np_ "$SNN" lm generate "$ck" --prompt-ids "$ids" --max-new-tokens 6 $mode >"$tmp/g$np_" 2>"$tmp/err"; then
      echo "FAIL: generate DP $np_ $mode" >&2; cat "$tmp/err" >&2; fail=1; continue
    fi
    if ! cmp -s "$tmp/g1" "$tmp/g$np_" || [ "$(grep -c '"row"' "$tmp/g$np_")" != 5 ]; then
      echo "FAIL: generate DP $np_ ($mode) differs from one process" >&2; diff "$tmp/g1" "$tmp/g$np_" >&2; fail=1
    else
      echo "lm generate DP $np_ ($mode): 5 rows equal one process"
    fi
  done
done
# generation with TP 2, PP 2 and TP 2 x PP 2 (4 ranks), and DP 2 x TP 2: the same tokens
for layout in "2 --tensor-parallel-size 2" "2 --pipeline-parallel-size 2" \
              "4 --tensor-parallel-size 2 --pipeline-parallel-size 2" "4 --tensor-parallel-size 2"; do
  for mode in "--temperature 0" "--temperature 0.8 --top-k 5 --seed 7"; do
    set -- $layout
    np_=$1; shift
    "$SNN" lm generate "$ck" --prompt-ids "$ids" --max-new-tokens 6 $mode >"$tmp/g1" 2>/dev/null
    if ! mpi -np $np_ "$SNN" lm generate "$ck" --prompt-ids "$ids" --max-new-tokens 6 $mode "$@" >"$tmp/gp" 2>"$tmp/err"; then
      echo "FAIL: generate -np $layout $mode" >&2; cat "$tmp/err" >&2; fail=1; continue
    fi
    if ! cmp -s "$tmp/g1" "$tmp/gp"; then
      echo "FAIL: generate -np $layout ($mode) differs from one process" >&2; diff "$tmp/g1" "$tmp/gp" >&2; fail=1
    else
      echo "lm generate -np $layout ($mode): 5 rows equal one process"
    fi
  done
done
for np_ in 1 2; do
  mpi -np $np_ "$SNN" lm eval "$tmp/missing" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 2 ] || [ "$(grep -c '^snn: error' "$tmp/err")" != 1 ]; then
    echo "FAIL: missing checkpoint at $np_ ranks: rc=$rc" >&2; cat "$tmp/err" >&2; fail=1
  fi
done
exit $fail
