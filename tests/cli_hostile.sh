#!/bin/bash
# Hostile and careless input to the CLI: numbers out of range, empty and too-long paths,
# checkpoints whose trainer metadata is text / negative / huge, NaN weights, contradicting
# resume flags, tiny datasets, unwritable outputs. Every case must exit 2 with exactly one
# line "snn: error: ..." naming the problem (or exit 0 where noted). Given the build
# directory; scripts/test also runs it against the sanitizer build.
set -u
B=${1:?build dir}
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 checks=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# expect2 NEEDLE ARGS...: exit 2, one stderr line "snn: error: ..." containing NEEDLE
expect2() {
  local needle=$1; shift
  checks=$((checks + 1))
  "$SNN" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^snn: error: ' "$tmp/err" ||
     ! grep -qF -- "$needle" "$tmp/err"; then
    bad "$* : rc=$rc, expected 2 and one line with '$needle'; stderr:"; cat "$tmp/err" >&2
  fi
}

T="train --model fcsnn --dataset synthetic --synthetic-size 64 --hidden 16 --quiet --out $tmp/o"
# ---- numbers on the command line ----
expect2 "--batch-size must be between 1 and 1048576, got '0'" $T --batch-size 0
expect2 "--epochs must be between 1 and" $T --epochs 0
expect2 "--lr must be between" $T --lr 0
expect2 "--hidden must be between 1 and 65536, got '0'" $T --hidden 0
expect2 "--max-steps must be between 1 and 1099511627776, got '-5'" $T --max-steps -5
expect2 "--clip must be between 0 and" $T --clip -1
expect2 "--embed-dim must be between 1 and 16384, got '0'" train --model spikformer --dataset synthetic --embed-dim 0 --heads 0
expect2 "--channels must be between 1 and 4096, got '2147483647'" train --model convsnn --dataset synthetic --channels 2147483647
expect2 "--image-size must be between 16 and 4096, got '2147483632'" inspect --model spikformer --image-size 2147483632
expect2 "--T must be between 1 and 100000" $T --T 0
expect2 "expects an integer, got ' 3'" $T --epochs " 3"
expect2 "expects an integer, got '3x'" $T --epochs 3x
expect2 "expects an integer, got '1e3'" $T --batch-size 1e3
expect2 "expects a finite number, got 'nan'" $T --lr nan
expect2 "expects a finite number, got '1e39'" $T --lr 1e39
expect2 "expects a non-negative integer, got '-1'" $T --seed -1
expect2 "below 2^64" $T --seed 18446744073709551616
expect2 "--synthetic-size must be" $T --synthetic-size 0
expect2 "--warmup must be between 0" $T --warmup -1
expect2 "--checkpoint-every must be between 1 and" $T --checkpoint-every 0
expect2 "--batch-size must be between 1 and" eval --checkpoint x --dataset synthetic --batch-size 0
expect2 "--T must be between 1 and 100000, got '-1'" predict --checkpoint x --input y --T -1
expect2 "--width must be between 1 and" bench linear --width 0
expect2 "--warmup must be between 0" bench neuron --warmup -2
# sizes too large to allocate: the size asked is in the message, and nothing is allocated
expect2 "the model needs about" $T --hidden 65536 --depth 1000
expect2 "GiB" train --model spikformer --dataset synthetic --image-size 16 --embed-dim 16384 --depth 1000 --heads 16
# (the sanitizer build aborts on an allocation it cannot serve unless told to return NULL,
# which is what the C library does and what the code handles)
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1
expect2 "the synthetic data needs about" train --model spikformer --dataset synthetic --image-size 4096 --synthetic-size 1000000 \
  --embed-dim 16 --heads 2 --depth 1 --quiet --out "$tmp/o"
expect2 "activation memory" $T --T 100000
# ---- paths ----
expect2 "--out needs a non-empty value" $T --out ""
long=$tmp/$(printf 'd%.0s' $(seq 1 4070))
expect2 "--out is 4" $T --out "$long"
expect2 "needs a non-empty value" eval --checkpoint "" --dataset synthetic

# ---- a real run to corrupt ----
"$SNN" $T --epochs 2 --out "$tmp/run" >/dev/null 2>"$tmp/train.err" || { bad "base run failed"; cat "$tmp/train.err" >&2; }
ck=$tmp/run/model.safetensors
# remeta SRC DST KEY VALUE [trainer]: rewrite one metadata value (or, with "trainer", one field
# of the snn_trainer JSON, VALUE as JSON text); tensor offsets are relative to the header's
# end, so only the length prefix changes
remeta() {
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key, val = sys.argv[1:5]
trainer = len(sys.argv) > 5
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
md = h["__metadata__"]
if trainer:
    t = json.loads(md["snn_trainer"])
    t[key] = json.loads(val)
    md["snn_trainer"] = json.dumps(t)
else:
    md[key] = val
hb = json.dumps(h).encode()
open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
}
for v in abc -3 999999999999 4x ""; do
  remeta "$ck" "$tmp/ts.safetensors" time_steps "$v"
  expect2 'metadata "time_steps"' eval --checkpoint "$tmp/ts.safetensors" --dataset synthetic
done
for v in '"abc"' -1 1e300 2.5 1000000000; do
  mkdir -p "$tmp/ep"; remeta "$ck" "$tmp/ep/model.safetensors" epochs "$v" trainer
  expect2 'trainer metadata: "epochs"' train --resume "$tmp/ep/model.safetensors" --quiet
done
for v in '"abc"' -1 1e300 3.5; do
  mkdir -p "$tmp/st"; remeta "$ck" "$tmp/st/model.safetensors" time_steps "$v" trainer
  expect2 'trainer metadata: "time_steps"' train --resume "$tmp/st/model.safetensors" --quiet --epochs 3
done
for v in abc -1 99999999999999999999 1000000; do
  mkdir -p "$tmp/os"; remeta "$ck" "$tmp/os/model.safetensors" optimizer_steps "$v"
  expect2 'optimizer_steps' train --resume "$tmp/os/model.safetensors" --quiet --epochs 3
done
mkdir -p "$tmp/nt"
python3 - "$ck" "$tmp/nt/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
del h["__metadata__"]["snn_trainer"]
hb = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
expect2 "has no trainer metadata" train --resume "$tmp/nt/model.safetensors" --quiet --epochs 3
# NaN weights: eval, predict and resume refuse the model
python3 - "$ck" "$tmp/nan.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
off = 8 + n + h["layers.0.weight"]["data_offsets"][0] if "layers.0.weight" in h else None
name = next(k for k in h if k != "__metadata__" and h[k]["dtype"] == "F32" and not k.startswith("__"))
off = 8 + n + h[name]["data_offsets"][0] + 12
b[off:off + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(b)
PY
expect2 "NaN" eval --checkpoint "$tmp/nan.safetensors" --dataset synthetic
mkdir -p "$tmp/nanrun"; cp "$tmp/nan.safetensors" "$tmp/nanrun/model.safetensors"
expect2 "NaN" train --resume "$tmp/nanrun/model.safetensors" --quiet --epochs 3
python3 -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack(">IIII",0x803,2,28,28)+bytes(range(256))*6+bytes(1568-1536))' "$tmp/img.idx"
expect2 "NaN" predict --checkpoint "$tmp/nan.safetensors" --input "$tmp/img.idx"
# ---- resume flags that contradict the checkpoint ----
mkdir -p "$tmp/res"; cp "$ck" "$tmp/res/model.safetensors"
R="train --resume $tmp/res/model.safetensors --quiet --epochs 3"
expect2 "--model convsnn contradicts the checkpoint (model fcsnn)" $R --model convsnn
expect2 "--hidden 128 contradicts the checkpoint (hidden 16)" $R --hidden 128
expect2 "--T 8 contradicts the checkpoint (time steps 4)" $R --T 8
expect2 "--lr 0.5 contradicts" $R --lr 0.5
expect2 "--batch-size 7 contradicts" $R --batch-size 7
expect2 "--optimizer sgd contradicts" $R --optimizer sgd
expect2 "--channels 4 contradicts the checkpoint (a fcsnn has no channels)" $R --channels 4
expect2 "--dataset digits contradicts" $R --dataset digits
expect2 "--seed 5 contradicts" $R --seed 5
expect2 "already holds 2 of 2 epochs" train --resume "$tmp/res/model.safetensors" --quiet
expect2 "does not match" $R --precision bf16
# agreeing flags are fine
checks=$((checks + 1))
"$SNN" $R --T 4 --hidden 16 --model fcsnn >/dev/null 2>"$tmp/err" || { bad "resume with agreeing flags"; cat "$tmp/err" >&2; }

# ---- tiny datasets: a real message, not a bare "evaluating" ----
mkdir -p "$tmp/d1"
printf '0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,0,1,2,3,4,5,6,7,8,9,10,11,12,3\n' | gzip >"$tmp/d1/digits.csv.gz"
expect2 "training needs at least one of each" train --model fcsnn --dataset digits --data-dir "$tmp/d1" --quiet --out "$tmp/o1"
expect2 "test split has no samples" eval --checkpoint "$ck" --dataset digits --data-dir "$tmp/d1"
# ---- spikformer on images whose side is not a multiple of 16 / another --image-size ----
if [ -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ]; then
  expect2 "--image-size 64 does not match the data's 8x8 images" train --model spikformer --dataset digits --image-size 64 --quiet --out "$tmp/o2"
  expect2 "multiple of 16; the data's images are 8x8" train --model spikformer --dataset digits --quiet --out "$tmp/o2"
fi
# ---- outputs that cannot be written ----
mkdir -p "$tmp/full"; ln -s /dev/full "$tmp/full/metrics.jsonl"
expect2 "cannot write '$tmp/full/metrics.jsonl': No space left on device" $T --epochs 1 --out "$tmp/full"
expect2 "cannot write '/dev/full'" bench linear --width 16 --batch-size 8 --depth 2 --precisions fp32 bf16 --trials 1 \
  --warmup 0 --training-steps 1 --inference-steps 1 --quiet --output /dev/full
checks=$((checks + 1))
"$SNN" eval --checkpoint "$ck" --dataset synthetic --json >/dev/full 2>"$tmp/err"
rc=$?
{ [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^snn: error: cannot write to stdout: No space left" "$tmp/err"; } ||
  { bad "eval --json >/dev/full: rc=$rc"; cat "$tmp/err" >&2; }
touch "$tmp/afile"
expect2 "Not a directory" $T --out "$tmp/afile"
# ---- warnings, JSON escaping, stale temporaries ----
checks=$((checks + 1))
"$SNN" train --model fcsnn --dataset synthetic --synthetic-size 64 --hidden 16 --epochs 1 --out "$tmp/w" \
  --neuron-storage float8_e5m2 --neuron-fwd fp8 --neuron-bwd fp8 >/dev/null 2>"$tmp/err" || bad "fp8 neuron run failed"
grep -q "^snn: warning: --neuron-bwd fp8 without loss scaling" "$tmp/err" || { bad "no loss-scaling warning"; cat "$tmp/err" >&2; }
q=$tmp/'we"ird\dir'
mkdir -p "$q"
/bin/true & dead=$!; wait $dead
echo x >"$q/model.safetensors.tmp.$dead"
echo x >"$q/model.safetensors.tmp.$$"
checks=$((checks + 1))
"$SNN" $T --epochs 1 --out "$q" --json >"$tmp/j.out" 2>"$tmp/err" || { bad "run into a quoted path"; cat "$tmp/err" >&2; }
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert d["checkpoint"]==sys.argv[2]+"/model.safetensors", d' "$tmp/j.out" "$q" || bad "train --json with a quote in the path"
"$SNN" eval --checkpoint "$q/model.safetensors" --dataset synthetic --json >"$tmp/j.out" 2>"$tmp/err"
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert d["checkpoint"].endswith("model.safetensors") and "\"" in d["checkpoint"], d' "$tmp/j.out" || bad "eval --json with a quote in the path"
[ ! -e "$q/model.safetensors.tmp.$dead" ] || bad "stale temporary of dead pid $dead not removed"
[ -e "$q/model.safetensors.tmp.$$" ] || bad "temporary of a live writer removed"
echo "cli_hostile: $checks checks"
exit $fail
