#!/bin/bash
# Exact resume through the CLI: a run stopped with --max-steps (at an epoch's end and inside
# an epoch) and continued with `snn train --resume FILE` alone writes the same
# model.safetensors, byte for byte, as the run never stopped, in fp32, bf16, fp16 and fp8
# with the default cosine schedule; periodic checkpoints; after a simulated crash
# (metrics lines past the checkpoint, a temporary of a dead writer) the resume trims
# metrics.jsonl to the checkpoint and removes the temporary. Given the build directory.
set -u
B=${1:?build dir}
SNN="$B/snn"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 checks=0
bad() { echo "FAIL: $*" >&2; fail=1; }
ok() { checks=$((checks + 1)); }

ds=synthetic
[ -f /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz ] && ds=digits
# digits: 1438 training samples, batch 64: 22 steps an epoch, 66 in all
for p in fp32 bf16 fp16 fp8; do
  A="--model fcsnn --dataset $ds --synthetic-size 256 --hidden 32 --epochs 3 --batch-size 64 --lr 0.01 --precision $p --quiet"
  "$SNN" train $A --out "$tmp/full_$p" >/dev/null 2>"$tmp/err" || { bad "$p straight run"; cat "$tmp/err" >&2; }
  spe=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["step"])' "$tmp/full_$p/metrics.jsonl")
  for stop in $spe $((spe + spe / 2)); do
    d=$tmp/part_${p}_$stop
    "$SNN" train $A --out "$d" --max-steps $stop >/dev/null 2>"$tmp/err" || { bad "$p stop at $stop"; cat "$tmp/err" >&2; }
    ok
    cmp -s "$d/model.safetensors" "$tmp/full_$p/model.safetensors" && bad "$p: the stopped run's checkpoint already equals the full run's"
    "$SNN" train --resume "$d/model.safetensors" --quiet >/dev/null 2>"$tmp/err" || { bad "$p resume from $stop"; cat "$tmp/err" >&2; }
    ok
    cmp "$d/model.safetensors" "$tmp/full_$p/model.safetensors" >&2 || bad "$p: stop at step $stop + resume differs from the straight run"
    ok
    # metrics: one line per epoch, the same steps as the straight run, no partial line left
    python3 - "$d/metrics.jsonl" "$tmp/full_$p/metrics.jsonl" <<'PY' || bad "$p: metrics.jsonl after the resume from $stop"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [(x["epoch"], x["step"]) for x in a] == [(x["epoch"], x["step"]) for x in b], (a, b)
assert not any(x.get("partial") for x in a)
assert a[-1]["test_accuracy"] == b[-1]["test_accuracy"]
PY
  done
done

# periodic checkpoints, then a crash: lines after the checkpoint, a dead writer's temporary
A="--model fcsnn --dataset $ds --synthetic-size 256 --hidden 32 --epochs 2 --batch-size 64 --lr 0.01 --checkpoint-every 5"
"$SNN" train $A --out "$tmp/pf" --quiet >/dev/null 2>&1 || bad "periodic straight run"
"$SNN" train $A --out "$tmp/pc" --max-steps 12 >/dev/null 2>"$tmp/err" || bad "periodic run"
ok
[ "$(grep -c '^checkpoint at step' "$tmp/err")" -eq 3 ] || { bad "expected checkpoints at steps 5, 10 and 12"; cat "$tmp/err" >&2; }
echo '{"epoch":9,"step":999,"train_loss":1}' >>"$tmp/pc/metrics.jsonl"
printf '{"epoch":9,"st' >>"$tmp/pc/metrics.jsonl"
/bin/true & dead=$!; wait $dead
head -c 1000 "$tmp/pc/model.safetensors" >"$tmp/pc/model.safetensors.tmp.$dead"
"$SNN" train --resume "$tmp/pc/model.safetensors" --quiet >/dev/null 2>"$tmp/err" || { bad "resume after the crash"; cat "$tmp/err" >&2; }
ok
[ ! -e "$tmp/pc/model.safetensors.tmp.$dead" ] || bad "the dead writer's temporary is still there"
cmp "$tmp/pc/model.safetensors" "$tmp/pf/model.safetensors" >&2 || bad "periodic + crash + resume differs from the straight run"
ok
python3 - "$tmp/pc/metrics.jsonl" "$tmp/pf/metrics.jsonl" <<'PY' || bad "metrics.jsonl after the crash"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [(x["epoch"], x["step"]) for x in a] == [(x["epoch"], x["step"]) for x in b], (a, b)
PY
# a larger --epochs continues a finished run
"$SNN" train --resume "$tmp/pf/model.safetensors" --epochs 3 --quiet --json >"$tmp/j" 2>"$tmp/err" || { bad "extend a finished run"; cat "$tmp/err" >&2; }
ok
python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert d["epochs"]==3, d' "$tmp/j" || bad "extended run summary"
echo "cli_resume: $checks checks"
exit $fail
