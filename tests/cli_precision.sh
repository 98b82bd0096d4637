#!/bin/bash
# CLI precision behaviour (spikingjelly-core.md §6.10-6.11, our CLI):
#  - snn inspect --json on a tiny Spikformer under fp8 lists exactly the converted modules;
#  - invalid precision combinations exit 2 with the validation message;
#  - the --triton-* aliases of the neuron flags are accepted;
#  - training on scikit-learn's digits in fp16 and fp8 (delayed) works, eval under a
#    different --precision is refused ("does not match"), under the same one it agrees;
#  - resume is bit-identical: 2 epochs in one run == 1 epoch + --resume --epochs 2 (every
#    tensor of model.safetensors, optimizer and FP8/scaler state included), fp32 and fp8.
set -u
B=${1:?build dir}
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# OpenMP threads sleep instead of spinning: CI shares 2 cores between tests.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fail=1; fi; }

# expect_error DESCRIPTION NEEDLE ARGS...: exit 2, one stderr line "snn: error: ..." containing NEEDLE
expect_error() {
  local what=$1 needle=$2; shift 2
  "$SNN" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^snn: error: ' "$tmp/err" ||
     ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL: $what: rc=$rc, expected exit 2 with '$needle'; stderr:" >&2; cat "$tmp/err" >&2; fail=1
  fi
}

# ---- inspect: tiny Spikformer under fp8 ----
"$SNN" inspect --model spikformer --image-size 64 --embed-dim 64 --heads 4 --depth 2 --num-classes 16 \
  --precision fp8 --json >"$tmp/inspect.json" 2>"$tmp/err"
check "inspect exit 0" '[ $? -eq 0 ]'
check "inspect converted list" '$PY - "$tmp/inspect.json" <<EOF
import json, sys
d = json.load(open(sys.argv[1]))
r = d["conversion_report"]
want = ["blocks.%d.%s" % (b, m) for b in (0, 1) for m in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")] + ["head"]
assert r["converted_modules"] == want, r["converted_modules"]
assert r["converted_patterns"] == [], r["converted_patterns"]
assert all("patch_embed.proj_conv%d" % i in r["unsupported_modules"] for i in range(4)), r["unsupported_modules"]
assert "patch_embed.proj_lif0" in r["high_precision_modules"] and "patch_embed.proj_bn3" in r["high_precision_modules"]
assert list(d) == ["config", "policy", "capability_report", "conversion_report", "neurons"], list(d)
assert d["config"]["mode"] == "fp8" and d["policy"]["resolved_fp8_recipe"] == "delayed", d["policy"]
assert d["capability_report"]["can_execute"] is True
EOF'

# ---- invalid combinations: exit 2 with the validation message ----
expect_error "bf16 with an fp8 recipe" "fp8_recipe is only valid when mode='fp8'" inspect --model fcsnn --precision bf16 --fp8-recipe delayed
expect_error "neuron fwd without storage" "requires neuron_storage" inspect --model fcsnn --neuron-fwd bf16
expect_error "triton fwd without storage" "requires neuron_storage" inspect --model fcsnn --triton-fwd bf16
expect_error "ambiguous fp8 storage" "ambiguous" inspect --model fcsnn --neuron-storage fp8
expect_error "removed mode fp8-te" "fp8-te" inspect --model fcsnn --precision fp8-te
expect_error "removed mode fp8-torchao" "fp8-torchao" train --model fcsnn --dataset synthetic --precision fp8-torchao
expect_error "fp8 compute needs fp8 storage" "FP8" inspect --model fcsnn --neuron-storage bf16 --neuron-bwd fp8
expect_error "unknown recipe" "fp8_recipe" inspect --model fcsnn --precision fp8 --fp8-recipe fastest
expect_error "cuda device" "cuda" inspect --model fcsnn --device cuda
expect_error "fp8 converting nothing" "did not convert" inspect --model fcsnn --in-features 20 --hidden 20 --depth 1 --precision fp8

# ---- the --triton-* aliases ----
"$SNN" inspect --model fcsnn --in-features 64 --hidden 64 --triton-storage bf16 --triton-fwd bf16 --triton-bwd fp32 \
  --json >"$tmp/alias.json" 2>"$tmp/err"
check "--triton-storage accepted" '[ $? -eq 0 ]'
check "--triton-storage configures the neurons" '$PY - "$tmp/alias.json" <<EOF
import json, sys
d = json.load(open(sys.argv[1]))
assert d["neurons"]["converted_modules"] == ["layers.1", "layers.3"], d["neurons"]
c = d["config"]
assert (c["neuron_storage"], c["neuron_fwd"], c["neuron_bwd"]) == ("bf16", "bf16", "fp32"), c
EOF'

# ---- training on digits ----
ds=digits
[ -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ] || ds=synthetic
echo "cli_precision dataset: $ds" >&2
common=(--model fcsnn --dataset "$ds" --synthetic-size 512 --hidden 32 --T 2 --batch-size 32 --lr 0.01 --schedule constant --quiet)

train() { # train DIR ARGS...: run snn train into DIR, JSON summary to DIR.json
  local dir=$1; shift
  "$SNN" train "${common[@]}" --out "$dir" --json "$@" >"$dir.out" 2>"$dir.err"
  local rc=$?
  tail -n 1 "$dir.out" >"$dir.json"
  [ $rc -eq 0 ] || { echo "train $* failed (rc $rc):" >&2; cat "$dir.err" >&2; }
  return $rc
}

# expect_json FILE PYTHON-EXPR over d
expect_json() { $PY -c 'import json,math,sys; d=json.load(open(sys.argv[1])); assert eval(sys.argv[2]), d' "$1" "$2"; }

check "train fp16" 'train "$tmp/fp16" --epochs 2 --precision fp16'
check "fp16 summary" 'expect_json "$tmp/fp16.json" "d[\"precision\"]==\"fp16\" and d[\"epochs\"]==2 and math.isfinite(d[\"test_loss\"])"'
check "train fp8 delayed" 'train "$tmp/fp8" --epochs 2 --precision fp8 --fp8-recipe delayed'
check "fp8 summary" 'expect_json "$tmp/fp8.json" "d[\"precision\"]==\"fp8\" and d[\"fp8_recipe\"]==\"delayed\" and math.isfinite(d[\"test_loss\"])"'
if [ "$ds" = digits ]; then
  check "fp16 learns digits" 'expect_json "$tmp/fp16.json" "d[\"test_accuracy\"] > 0.6"'
  check "fp8 learns digits" 'expect_json "$tmp/fp8.json" "d[\"test_accuracy\"] > 0.6"'
fi

# eval: a different precision is refused, the checkpoint's own one is used by default.
# Under fp8 delayed scaling, eval must also restore the FP8 scales and amax histories the
# checkpoint holds (§6.9: a reloaded model infers like the source), so its accuracy equals
# the one training measured on the same test split with the same weights.
expect_error "eval fp8 checkpoint as bf16" "does not match" eval --checkpoint "$tmp/fp8/model.safetensors" --dataset "$ds" --precision bf16
expect_error "eval fp8 checkpoint as fp8 current" "does not match" eval --checkpoint "$tmp/fp8/model.safetensors" --dataset "$ds" --precision fp8 --fp8-recipe current
expect_error "eval fp16 checkpoint as fp32" "does not match" eval --checkpoint "$tmp/fp16/model.safetensors" --dataset "$ds" --precision fp32
for args in "" "--precision fp8 --fp8-recipe delayed"; do
  "$SNN" eval --checkpoint "$tmp/fp8/model.safetensors" --dataset "$ds" --json $args >"$tmp/eval.out" 2>"$tmp/eval.err"
  check "eval fp8 ($args) exit 0" '[ $? -eq 0 ]'
  tail -n 1 "$tmp/eval.out" >"$tmp/eval.json"
  check "eval fp8 ($args) reproduces the training accuracy" \
    '$PY -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert abs(a[\"accuracy\"]-b[\"test_accuracy\"])<1e-6, (a, b)" "$tmp/eval.json" "$tmp/fp8.json"'
done
expect_error "resume under another precision" "does not match" train "${common[@]}" --out "$tmp/bad" --resume "$tmp/fp8/model.safetensors" --epochs 3 --precision bf16

# ---- resume bit-identity ----
same_tensors() { # every tensor (name, dtype, shape, bytes) equal; metadata ignored
  $PY - "$1" "$2" <<'EOF'
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    hdr.pop("__metadata__", None)
    body = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in hdr.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
bad = [k for k in a if a[k] != b[k]]
assert not bad, "tensors differ: %s" % bad[:8]
assert any(k.startswith("__optim__.") for k in a), "no optimizer state saved"
print("%d tensors identical" % len(a), file=sys.stderr)
EOF
}
for prec in "fp32" "fp8 --fp8-recipe delayed"; do
  tag=${prec%% *}
  if [ "$tag" = fp8 ]; then full="$tmp/fp8"; else
    full="$tmp/full_$tag"
    check "resume $tag: 2 epochs" 'train "$full" --epochs 2 --precision $prec'
  fi
  check "resume $tag: 1 epoch" 'train "$tmp/half_$tag" --epochs 1 --precision $prec'
  check "resume $tag: resumed to 2 epochs" 'train "$tmp/resumed_$tag" --epochs 2 --resume "$tmp/half_$tag/model.safetensors"'
  check "resume $tag: resumed run reports 2 epochs" 'expect_json "$tmp/resumed_$tag.json" "d[\"epochs\"]==2 and d[\"precision\"]==\"$tag\""'
  check "resume $tag: bit-identical tensors" 'same_tensors "$full/model.safetensors" "$tmp/resumed_$tag/model.safetensors"'
  if [ "$tag" = fp8 ]; then
    check "resume fp8: FP8 recipe state saved" '$PY -c "import json,struct,sys; r=open(sys.argv[1],\"rb\").read(); h=json.loads(r[8:8+struct.unpack(\"<Q\",r[:8])[0]]); assert any(k.startswith(\"__precision__.\") and k.endswith(\".amax_history\") for k in h), list(h)" "$full/model.safetensors"'
  fi
done
# and a resume that differs (1 epoch + 1 epoch at another seed) is caught by the comparison
check "resume: a different run differs" 'train "$tmp/other" --epochs 2 --precision fp32 --seed 7'
check "resume: comparison can fail" '! same_tensors "$tmp/full_fp32/model.safetensors" "$tmp/other/model.safetensors" 2>/dev/null'

exit $fail
