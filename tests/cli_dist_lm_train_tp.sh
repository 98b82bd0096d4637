#!/bin/bash
# Tensor and pipeline parallel language-model training from the CLI
# (`mpirun -np N snn lm train --tensor-parallel-size TP --pipeline-parallel-size PP
# [--sequence-parallel]`), against the one-process run of the same global batch:
#   - after 5 FP32 AdamW steps, TP 2, PP 2 (2 ranks), TP 2 x PP 2 and TP 2 x PP 2 with
#     sequence parallel and DP 2 x TP 2 (4 ranks) equal one process: every logged lm_loss / grad_norm / lr,
#     the validation loss, and every tensor of the step-5 checkpoint (weights and the
#     canonical AdamW moments, gathered from the shards) within 1e-5 relative (max |a-b| /
#     max |a| per tensor; the key third of c_attn.bias within 1e-3, see compare); gpt
#     (fresh data each run) and spikelm TP 2 x PP 2 (fixed data: spike flips, docs/lm.md);
#   - with DP 2 x TP 2 the optimizer state is sharded over DP as well (the distributed
#     optimizer over each stage's buffer: half the TP 2 run's bytes per rank);
#   - a TP 2 x PP 2 checkpoint at step 3 resumed at TP 2 x PP 2, at TP 2, at one process and
#     at DP 2 x TP 2 reaches step 5 equal to the uninterrupted TP 2 x PP 2 run;
#   - `snn lm export` of a BF16 TP 2 x PP 2 checkpoint against the export of the same model
#     trained on one process, tensor for tensor: bit for bit after step 1 (learning rate 0
#     under the warm-up), within 8 BF16 ulps of each tensor's largest value after step 5
#     (BF16 rounding of TP's partial sums and of the messages between stages; the counts
#     are printed);
#   - the planner (no topology given): one process picks TP 1 x PP 1; on 2 ranks with
#     --objective memory --device-memory-gib 8 it picks TP 2 (sequence parallel), prints
#     its choice, and the run equals the one-process run;
#   - bad topologies are exit 2 with one line naming the rule's fields.
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
SNN="$B/snn"
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
echo "tmp $tmp"
fail=0
mpi() { timeout 120 mpirun -q --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$@"; }

mkdata() { SNN_TEST_SEED=$2 /usr/bin/python3 "$(dirname "$0")/lm_tokens.py" "$1" --vocab 48 || exit 1; } # dir seed
seed=${SNN_TEST_SEED:-$(date +%s%N | cut -c1-15)}
echo "test seed (gpt data): SNN_TEST_SEED=$seed"
mkdata "$tmp/data" "$seed"
mkdata "$tmp/data_fixed" 2

# compare A B WHAT [A.log B.log]: checkpoints (step dirs) and the stdout logs
compare() { /usr/bin/python3 "$(dirname "$0")/lm_ckpt_compare.py" --min-logged 5 --moments 2 "$@"; }
field() { /usr/bin/python3 -c "
import json, sys
for s in open(sys.argv[1]):
    if s.startswith('{'):
        l = json.loads(s)
        if sys.argv[2] in l: print(l[sys.argv[2]])" "$1" "$2" | tail -1; }

LR=3e-3
base="--layers 2 --hidden 32 --heads 4 --ffn 64 --vocab-size 48 --micro-batch-size 2 --global-batch-size 8
  --train-steps 5 --log-interval 1 --lr $LR --lr-warmup-steps 1 --clip-grad 0.5 --adam-eps 1e-4"
common="$base --eval-interval 5 --eval-steps 1"
gpt="--model gpt --data $tmp/data --query-groups 2 $common"
spk="--model spikelm --time-steps 2 --data $tmp/data_fixed $common"

train() { # name np args...
  local name=$1 np=$2; shift 2
  if ! mpi -np "$np" "$SNN" lm train "$@" --output "$tmp/$name" >"$tmp/$name.log" 2>"$tmp/$name.err"; then
    echo "FAIL: $name:" >&2; cat "$tmp/$name.err" >&2; fail=1; return 1
  fi
}

train gpt1 1 $gpt --tensor-parallel-size 1 --pipeline-parallel-size 1
train spk1 1 $spk
grep -q "planner (throughput.*tensor 1 x pipeline 1 x context 1 x data 1" "$tmp/spk1.err" ||
  { echo "FAIL: planner on one process:"; cat "$tmp/spk1.err"; fail=1; }
for c in "tp2 2 2 1" "pp2 2 1 2" "tp2pp2 4 2 2" "tp2pp2sp 4 2 2 sp" "dp2tp2 4 2 1"; do
  set -- $c
  name=$1 np=$2 tp=$3 pp=$4 sp=""
  [ "${5:-}" = sp ] && sp=--sequence-parallel
  train "gpt_$name" "$np" $gpt --tensor-parallel-size "$tp" --pipeline-parallel-size "$pp" $sp --checkpoint-interval 3 || continue
  [ "$(field "$tmp/gpt_$name.log" tensor_parallel_size)/$(field "$tmp/gpt_$name.log" pipeline_parallel_size)" = "$tp/$pp" ] ||
    { echo "FAIL: gpt $name reports another topology"; fail=1; }
  compare "$tmp/gpt1/step_0000005" "$tmp/gpt_$name/step_0000005" "gpt $name vs one process" "$tmp/gpt1.log" "$tmp/gpt_$name.log" || fail=1
done
# DP 2 x TP 2: the stage's optimizer state is sharded over DP too (half of the TP shard's)
/usr/bin/python3 - "$tmp/gpt_dp2tp2.log" "$tmp/gpt_tp2.log" <<'PY' || fail=1
import json, sys
st = [[json.loads(l) for l in open(p) if l.startswith('{"event":"start"')][0] for p in sys.argv[1:]]
a, b = st
ok = (a["distributed_optimizer"] == 1 and b["distributed_optimizer"] == 0 and a["data_parallel_size"] == 2
      and abs(a["optimizer_state_bytes_sum"] - b["optimizer_state_bytes_sum"]) <= 16
      and a["optimizer_state_bytes_max"] <= b["optimizer_state_bytes_max"] / 2 + 8)
print(f"optimizer state per rank: DP 2 x TP 2 {a['optimizer_state_bytes_max']:.0f} bytes, TP 2 {b['optimizer_state_bytes_max']:.0f} bytes")
if not ok: print("FAIL: DP 2 x TP 2 optimizer state", a, b)
sys.exit(0 if ok else 1)
PY
train spk_tp2pp2 4 $spk --tensor-parallel-size 2 --pipeline-parallel-size 2 &&
  { compare "$tmp/spk1/step_0000005" "$tmp/spk_tp2pp2/step_0000005" "spikelm tp2pp2 vs one process" "$tmp/spk1.log" "$tmp/spk_tp2pp2.log" || fail=1; }

# resume the TP 2 x PP 2 checkpoint of step 3 at TP 2 x PP 2, TP 2 and one process
if [ -d "$tmp/gpt_tp2pp2/step_0000003" ]; then
  for c in "r22 4 2 2" "r21 2 2 1" "r11 1 1 1" "r21dp2 4 2 1"; do
    set -- $c
    train "gpt_$1" "$2" $gpt --tensor-parallel-size "$3" --pipeline-parallel-size "$4" --resume "$tmp/gpt_tp2pp2/step_0000003" || continue
    first=$(grep -m1 '"lm_loss"' "$tmp/gpt_$1.log")
    case "$first" in *'"optimizer_step":4,"consumed_samples":32,'*) ;; *) echo "FAIL: resume $1 starts with $first"; fail=1 ;; esac
    compare "$tmp/gpt_tp2pp2/step_0000005" "$tmp/gpt_$1/step_0000005" "gpt tp2pp2 step 3 -> TP $3 x PP $4 (DP $(($2 / ($3 * $4)))) step 5" || fail=1
  done
fi

# export of a BF16 TP 2 x PP 2 checkpoint against the one-process BF16 export, after step 1
# (the learning rate of step 1 is 0 under the warm-up: the same weights, so the exports
# must be equal bit for bit) and after step 5 (the BF16 runs differ by BF16 rounding: TP's
# partial sums and the BF16 messages between stages; bound: 8 BF16 ulps of the tensor's
# largest magnitude, or half a learning rate where that is larger: an element whose gradient
# nearly cancels can take its AdamW steps a fraction of a step apart in the two runs, which on
# a small tensor (a bias grown from zero over four steps) is more than 8 of its ulps; measured
# 8.19 ulps on h.0.mlp.c_fc.bias at SNN_TEST_SEED=179630718447332, where no tensor differed
# by more than 0.083 lr (0.10 and 0.12 lr at two other seeds); the counts are printed)
exp="--model gpt --data $tmp/data --precision bf16 $base --checkpoint-interval 1"
if train bf1 1 $exp --tensor-parallel-size 1 && train bf22 4 $exp --tensor-parallel-size 2 --pipeline-parallel-size 2; then
  for s in 1 5; do
    if "$SNN" lm export "$tmp/bf1/step_000000$s" "$tmp/ex1_$s" >/dev/null 2>"$tmp/err" &&
       "$SNN" lm export "$tmp/bf22/step_000000$s" "$tmp/ex22_$s" >/dev/null 2>>"$tmp/err"; then
      /usr/bin/python3 - "$tmp/ex1_$s" "$tmp/ex22_$s" $s $LR <<'PY' || fail=1
import glob, json, os, struct, sys
import numpy as np
def tensors(d):
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n)); body = f.read()
        h.pop("__metadata__", None)
        for k, v in h.items():
            assert v["dtype"] == "BF16", (k, v["dtype"])
            a, b = v["data_offsets"]
            u = np.frombuffer(body[a:b], dtype=np.uint16)
            out[k] = (v["shape"], u, (u.astype(np.uint32) << 16).view(np.float32))
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
step, lr = int(sys.argv[3]), float(sys.argv[4])
bad = 0
if sorted(a) != sorted(b) or not a: print("FAIL export: tensor names differ", sorted(set(a) ^ set(b))); sys.exit(1)
total = diff = one = 0; worst = worst_lr = 0.0
for k in a:
    if a[k][0] != b[k][0]: print(f"FAIL export: {k}: shapes {a[k][0]} vs {b[k][0]}"); bad = 1; continue
    x, y = a[k][2], b[k][2]
    total += x.size; diff += int((a[k][1] != b[k][1]).sum())
    # adjacent BF16 values: the bit patterns (same sign) one apart
    one += int(((a[k][1].astype(np.int32) - b[k][1].astype(np.int32)) ** 2 == 1).sum())
    mx = float(np.abs(x).max())
    ulp = 2.0 ** (np.floor(np.log2(mx)) - 7) if mx > 0 else 0.0
    d = float(np.abs(x - y).max())
    r = d / ulp if ulp else float(d > 0)
    worst, worst_lr = max(worst, r), max(worst_lr, d / lr)
    if (step == 1 and diff) or (r > 8 and d > 0.5 * lr):
        print(f"FAIL export step {step}: {k}: {r:.3g} ulps of its largest value ({d / lr:.3g} lr)"); bad = 1
for f in ("config.json",):
    if json.load(open(os.path.join(sys.argv[1], f))) != json.load(open(os.path.join(sys.argv[2], f))):
        print(f"FAIL export: {f} differs"); bad = 1
print(f"export tp2pp2 vs one process, step {step}: {len(a)} tensors, {total} BF16 values, {diff} differ "
      f"({one} of them adjacent BF16 values), worst {worst:.3g} ulps of the tensor's largest value, "
      f"{worst_lr:.3g} lr")
sys.exit(bad)
PY
    else
      echo "FAIL: export:" >&2; cat "$tmp/err" >&2; fail=1
    fi
  done
fi

# the planner picks TP 2 for the memory objective on 2 ranks
if train plan2 2 $gpt --objective memory --device-memory-gib 8; then
  if grep -q "planner (memory, 8 GiB.*tensor 2 x pipeline 1 x context 1 x data 1 sequence parallel" "$tmp/plan2.err" &&
     [ "$(field "$tmp/plan2.log" tensor_parallel_size)" = 2 ]; then
    echo "planner: $(grep planner "$tmp/plan2.err")"
    compare "$tmp/gpt1/step_0000005" "$tmp/plan2/step_0000005" "gpt planner TP 2 vs one process" "$tmp/gpt1.log" "$tmp/plan2.log" || fail=1
  else
    echo "FAIL: planner on 2 ranks, memory objective:"; cat "$tmp/plan2.err"; fail=1
  fi
fi

# refusals: exit 2, one line, naming the fields
expect_refusal() {
  local what=$1 np=$2 pat=$3; shift 3
  mpi -np "$np" "$SNN" lm train "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(grep -c '^snn: error: ' "$tmp/err")
  if [ $rc -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pat" "$tmp/err"; then
    echo "FAIL: $what: rc=$rc, error lines=$lines, stderr:" >&2; cat "$tmp/err" >&2; fail=1
  else
    echo "refused: $what: $(cat "$tmp/err")"
  fi
}
expect_refusal "TP 3 over 4 heads" 3 "num_attention_heads (4) must be a multiple of tensor_model_parallel_size (3)" \
  $gpt --tensor-parallel-size 3 --output "$tmp/bad1"
expect_refusal "PP 3 over 2 layers" 3 "pipeline_model_parallel_size" $gpt --pipeline-parallel-size 3 --output "$tmp/bad2"
expect_refusal "TP 2 x PP 2 on 2 ranks" 2 "world size (2) must be divisible by tensor_model_parallel_size\*pipeline_model_parallel_size\*context_parallel_size (4)" $gpt --tensor-parallel-size 2 \
  --pipeline-parallel-size 2 --output "$tmp/bad3"
expect_refusal "one microbatch for PP 2" 2 "num_microbatches" $gpt --pipeline-parallel-size 2 --micro-batch-size 8 \
  --output "$tmp/bad4"
expect_refusal "fp16 with TP 2" 2 "fp32 or bf16 only (transformer.fp16 1" $gpt --tensor-parallel-size 2 --precision fp16 \
  --micro-batch-size 8 --output "$tmp/bad5"
expect_refusal "sequence parallel without TP" 1 "sequence_parallel needs tensor_model_parallel_size > 1" $gpt \
  --tensor-parallel-size 1 --sequence-parallel --output "$tmp/bad6"
expect_refusal "context parallel 2 with TP 2" 4 "context_parallel_size 2 with tensor_model_parallel_size 2 and pipeline_model_parallel_size 1: this trainer runs context parallel with TP = PP = 1 only" \
  $gpt --context-parallel-size 2 --tensor-parallel-size 2 --output "$tmp/bad7"

[ $fail = 0 ] && echo "cli_dist_lm_train_tp: ok"
exit $fail
