#!/bin/bash
# `mpirun -np 2 snn train --tensor-parallel-size 2` and `--pipeline-parallel-size 2` against
# the same run on one process: per-epoch losses and the final dense weights (rank 0 merges
# the shards into model.safetensors) within 1e-5 relative, for fcsnn, convsnn and a small
# spikformer (SGD, constant lr, direct encoding). Microbatches: 2 for fcsnn (no BatchNorm);
# 1 for convsnn and spikformer, whose BatchNorm sees a microbatch's statistics under K > 1
# (GPipe's semantics, not the one-process batch's). Then --checkpoint-dir / --resume: 2 + 2
# resumed steps under TP 2 equal 4 uninterrupted steps bit for bit.
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run2() { timeout 120 mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS -x OMP_WAIT_POLICY "$@"; }
compare() { # dirA dirB label
  /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, sys, struct
a_dir, b_dir, label = sys.argv[1:]
def lines(p): return [json.loads(l) for l in open(p) if l.strip()]
a, b = lines(a_dir + "/metrics.jsonl"), lines(b_dir + "/metrics.jsonl")
assert len(a) == len(b) and a, (a, b)
for x, y in zip(a, b):
    for k in ("train_loss", "validation_loss", "validation_accuracy"):
        assert abs(x[k] - y[k]) <= 1e-5 * max(1.0, abs(y[k])), (label, k, x[k], y[k])
def tensors(p):
    d = open(p, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    out = {}
    for k, v in h.items():
        if k.startswith("__") or v["dtype"] != "F32" or k.startswith("optim"): continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), d[8 + n + s:8 + n + e])
    return out
ta, tb = tensors(a_dir + "/model.safetensors"), tensors(b_dir + "/model.safetensors")
common = [k for k in ta if k in tb]
assert ta and len(common) == len(ta), (label, sorted(ta), sorted(tb))
worst = 0.0
for k in common:
    assert len(ta[k]) == len(tb[k]), (label, k)
    top = max(abs(v) for v in tb[k]) or 1.0
    worst = max(worst, max(abs(p - q) for p, q in zip(ta[k], tb[k])) / top)
print("%s: max relative weight difference %.3g over %d tensors, final train_loss %.6g vs %.6g" %
      (label, worst, len(common), a[-1]["train_loss"], b[-1]["train_loss"]))
assert worst <= 1e-5, worst
PY
}
check() { # label model-args parallel-args
  local label=$1 margs=$2 pargs=$3
  local common="train --data-parallel ddp $margs --dataset synthetic --optimizer sgd --lr 0.05 --schedule constant --quiet"
  env -u OMPI_COMM_WORLD_SIZE "$SNN" $common --out "$tmp/$label.1" >/dev/null 2>"$tmp/err" ||
    { echo "FAIL: $label on one process" >&2; cat "$tmp/err" >&2; fail=1; return; }
  run2 "$SNN" $common $pargs --out "$tmp/$label.2" >"$tmp/out" 2>"$tmp/err" ||
    { echo "FAIL: $label: mpirun -np 2 snn train $pargs" >&2; cat "$tmp/err" >&2; fail=1; return; }
  compare "$tmp/$label.2" "$tmp/$label.1" "$label $pargs" || fail=1
}
fc="--model fcsnn --hidden 32 --depth 3 --synthetic-size 128 --epochs 2 --batch-size 16"
cv="--model convsnn --synthetic-size 32 --epochs 1 --batch-size 8 --max-steps 2"
sp="--model spikformer --embed-dim 32 --heads 2 --depth 2 --synthetic-size 16 --epochs 1 --batch-size 4 --max-steps 2 --seed 1234"
check fcsnn_tp "$fc" "--tensor-parallel-size 2"
check fcsnn_pp "$fc" "--pipeline-parallel-size 2 --pipeline-microbatches 2"
check convsnn_tp "$cv" "--tensor-parallel-size 2"
check convsnn_pp "$cv" "--pipeline-parallel-size 2 --pipeline-microbatches 1"
check spikformer_tp "$sp" "--tensor-parallel-size 2"
check spikformer_pp "$sp" "--pipeline-parallel-size 2 --pipeline-microbatches 1"

# checkpoints and resume under TP 2: steps 1-2, then 3-4 from step_00000002
c="train --data-parallel ddp $fc --dataset synthetic --optimizer sgd --lr 0.05 --schedule constant --quiet --tensor-parallel-size 2 --max-steps 4"
if run2 "$SNN" $c --checkpoint-dir "$tmp/ck" --checkpoint-interval 2 --out "$tmp/full" >/dev/null 2>"$tmp/err" &&
   [ -d "$tmp/ck/step_00000002" ] && [ -d "$tmp/ck/step_00000004" ] &&
   run2 "$SNN" $c --checkpoint-dir "$tmp/ck2" --resume "$tmp/ck/step_00000002" --out "$tmp/res" >/dev/null 2>>"$tmp/err"; then
  /usr/bin/python3 - "$tmp" <<'PY' || fail=1
import sys
t = sys.argv[1]
def body(p):  # the tensors after the JSON header (header metadata names the source checkpoint)
    import struct
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]; return d[8 + n:]
assert body(t + "/full/model.safetensors") == body(t + "/res/model.safetensors"), "resumed weights differ"
print("resume: 2 + 2 steps under TP 2 equal 4 steps bit for bit")
PY
else
  echo "FAIL: checkpoint / resume" >&2; cat "$tmp/err" >&2; fail=1
fi
# a resume with another recipe is refused with exit 2
run2 "$SNN" ${c/--lr 0.05/--lr 0.01} --resume "$tmp/ck/step_00000002" --out "$tmp/bad" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && grep -q "does not match" "$tmp/err" || { echo "FAIL: mismatched resume rc=$rc" >&2; cat "$tmp/err" >&2; fail=1; }
# snn eval --artifact under mpirun (DP 2, TP 2, PP 2) against snn eval --checkpoint on one
# process, on the TP-trained fcsnn's merged model
art="$tmp/fcsnn_tp.2/model.safetensors"
if [ -f "$art" ] && env -u OMPI_COMM_WORLD_SIZE "$SNN" eval --checkpoint "$art" --dataset synthetic --json \
     --batch-size 64 >"$tmp/e1" 2>"$tmp/err"; then
  for par in "" "--tensor-parallel-size 2" "--pipeline-parallel-size 2 --pipeline-microbatches 2"; do
    if ! run2 "$SNN" eval --artifact "$art" --dataset synthetic --json --batch-size 64 $par >"$tmp/e2" 2>"$tmp/err"; then
      echo "FAIL: mpirun -np 2 snn eval --artifact $par" >&2; cat "$tmp/err" >&2; fail=1; continue
    fi
    /usr/bin/python3 - "$tmp/e1" "$tmp/e2" "$par" <<'PY' || fail=1
import json, sys
a = json.loads(open(sys.argv[1]).read().splitlines()[-1]); b = json.loads(open(sys.argv[2]).read().splitlines()[-1])
assert b["samples"] == a["samples"] == 512, (a, b)
assert abs(a["accuracy"] - b["accuracy"]) <= 1e-9 and abs(a["loss"] - b["loss"]) <= 1e-6 * abs(a["loss"]), (a, b)
print("eval --artifact %s: loss %.9g accuracy %.6g (one process: %.9g %.6g)" % (sys.argv[3] or "DP 2", b["loss"],
      b["accuracy"], a["loss"], a["accuracy"]))
PY
  done
else
  echo "FAIL: one-process eval of the merged model" >&2; cat "$tmp/err" >&2; fail=1
fi
run2 "$SNN" eval --artifact "$tmp/missing.safetensors" --dataset synthetic >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && [ "$(grep -c 'snn: error' "$tmp/err")" = 1 ] || { echo "FAIL: missing artifact rc=$rc" >&2; cat "$tmp/err" >&2; fail=1; }
# snn predict --artifact under PP 2 (K 2, a ragged last batch) against snn predict --checkpoint
/usr/bin/python3 -c "
import struct, random, sys
n = 37
sys.stdout.buffer.write(struct.pack('>IIII', 0x803, n, 28, 28) + bytes(random.randrange(256) for _ in range(n * 784)))
" > "$tmp/img.idx"
if env -u OMPI_COMM_WORLD_SIZE "$SNN" predict --checkpoint "$art" --input "$tmp/img.idx" --json >"$tmp/p1" 2>"$tmp/err" &&
   run2 "$SNN" predict --artifact "$art" --input "$tmp/img.idx" --json --pipeline-parallel-size 2 \
     --pipeline-microbatches 2 --batch-size 8 >"$tmp/p2" 2>>"$tmp/err"; then
  /usr/bin/python3 - "$tmp/p1" "$tmp/p2" <<'PY' || fail=1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 37, (len(a), len(b))
for x, y in zip(a, b):
    assert x["index"] == y["index"] and x["class"] == y["class"], (x, y)
    assert abs(x["score"] - y["score"]) <= 1e-6 * max(1e-3, abs(x["score"])), (x, y)
print("predict --artifact PP 2: 37 images, classes and scores equal one-process predict")
PY
else
  echo "FAIL: predict --artifact" >&2; cat "$tmp/err" >&2; fail=1
fi
# predict --artifact over DP 2 (37 images: slices of 19 and 18) with --output, against one process
if env -u OMPI_COMM_WORLD_SIZE "$SNN" predict --artifact "$art" --input "$tmp/img.idx" --batch-size 8 \
     --output "$tmp/l1.safetensors" >"$tmp/q1" 2>"$tmp/err" &&
   run2 "$SNN" predict --artifact "$art" --input "$tmp/img.idx" --batch-size 8 --output "$tmp/l2.safetensors" \
     >"$tmp/q2" 2>>"$tmp/err"; then
  /usr/bin/python3 - "$tmp" <<'PY' || fail=1
import json, struct, sys, numpy as np
d = sys.argv[1]
def load(path):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype={"F32": np.float32, "I64": np.int64}[v["dtype"]]).reshape(v["shape"])
    return out
a, b = load(d + "/l1.safetensors"), load(d + "/l2.safetensors")
assert a["logits"].shape == (37, 10) and list(a["index"]) == list(range(37)) == list(b["index"])
assert np.abs(a["logits"] - b["logits"]).max() <= 1e-6 * max(1e-3, np.abs(a["logits"]).max())
p1 = [json.loads(l) for l in open(d + "/p1")]
q2 = [l.split() for l in open(d + "/q2")]
assert [int(c) for _, c in q2] == [x["class"] for x in p1] == list(a["logits"].argmax(1))
print("predict --artifact DP 2 --output: 37 rows of logits equal one process; classes equal predict --checkpoint")
PY
else
  echo "FAIL: predict --artifact --output" >&2; cat "$tmp/err" >&2; fail=1
fi
exit $fail
