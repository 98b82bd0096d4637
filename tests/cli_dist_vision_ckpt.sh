#!/bin/bash
# Distributed checkpoints and the inference artifact (tests/driver_vision_ckpt.c): train at
# TP 2 and at PP 2, checkpoint, resume bit-identically, refusals agreed on every rank, export
# the artifact (library and `snn export-artifact`, byte-identical files), then evaluate it at
# 1 process, PP 2 and TP 2: the same logits, loss and accuracy as the trained model.
set -u
B=${1:?build dir}
. "$(dirname "$0")/dist_env.sh"
D="$B/driver_vision_ckpt"
[ -x "$D" ] || { echo "SKIP: driver_vision_ckpt not built"; exit 77; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
mp() { timeout 120 bash -c "$(declare -f mpirun_np); mpirun_np 2 $*"; }
for topo in "spikformer 1 2" "fcsnn 2 1" "fcsnn 1 2" "spikformer 2 1"; do
  set -- $topo
  d="$W/$1-pp$2-tp$3"
  mkdir -p "$d"
  mp "'$D' train $1 $2 $3 '$d'" || { echo "FAIL: train $topo" >&2; fail=1; continue; }
  env -u OMPI_COMM_WORLD_SIZE "$D" eval "$d/artifact.safetensors" 1 1 "$d" || { echo "FAIL: eval 1 process ($topo)" >&2; fail=1; }
  mp "'$D' eval '$d/artifact.safetensors' 2 1 '$d'" || { echo "FAIL: eval PP2 ($topo)" >&2; fail=1; }
  mp "'$D' eval '$d/artifact.safetensors' 1 2 '$d'" || { echo "FAIL: eval TP2 ($topo)" >&2; fail=1; }
  # the command-line export writes the same file
  "$B/snn" export-artifact "$d/ckpt/step_00000005" "$d/cli.safetensors" > "$d/cli.json" || { echo "FAIL: snn export-artifact" >&2; fail=1; }
  cmp -s "$d/artifact.safetensors" "$d/cli.safetensors" || { echo "FAIL: CLI artifact differs ($topo)" >&2; fail=1; }
  grep -q "\"source_tensor_parallel_size\": $3" "$d/cli.json" || { echo "FAIL: CLI summary: $(cat "$d/cli.json")" >&2; fail=1; }
done
# Fashion-MNIST's test set: an fcsnn (784-64-64-10) trained at TP 2 (300 steps on the training
# set), exported, evaluated by `snn eval` (one process, the plain checkpoint path) and by the
# library at 1 process, DP 2, TP 2 and PP 2: identical accuracy, the same loss up to the
# order of the double sums.
if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  d="$W/fm"
  mkdir -p "$d"
  if mp "'$D' train fcsnn784 1 2 '$d'" > /dev/null; then
    "$B/snn" eval --checkpoint "$d/artifact.safetensors" --dataset fashion-mnist --json | tail -1 > "$d/ref.json"
    env -u OMPI_COMM_WORLD_SIZE "$D" fmnist "$d/artifact.safetensors" 1 1 "$d" > "$d/r0.json"
    mp "'$D' fmnist '$d/artifact.safetensors' 1 1 '$d'" > "$d/r1.json"
    mp "'$D' fmnist '$d/artifact.safetensors' 1 2 '$d'" > "$d/r2.json"
    mp "'$D' fmnist '$d/artifact.safetensors' 2 1 '$d'" > "$d/r3.json"
    python3 - "$d" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
ref = json.load(open(f"{d}/ref.json"))
assert ref["samples"] == 10000 and ref["accuracy"] > 0.11, ref
for k in range(4):
    r = json.loads(open(f"{d}/r{k}.json").read().strip().splitlines()[-1])
    ok = r["samples"] == 10000 and r["accuracy"] == ref["accuracy"] and abs(r["loss"] - ref["loss"]) <= 1e-12 * ref["loss"]
    print(f"fashion-mnist test set, pp {r['pp']} tp {r['tp']} dp {r['dp']}: loss {r['loss']:.15f} accuracy {r['accuracy']} "
          f"(snn eval: {ref['loss']:.15f} {ref['accuracy']}): {'ok' if ok else 'FAIL'}")
    if not ok: sys.exit(1)
PY
  else
    echo "FAIL: train fcsnn784" >&2; fail=1
  fi
else
  echo "fashion-mnist not installed: its part skipped"
fi
# bad input: exit 2 and one line "snn: error: ..."
d="$W/spikformer-pp1-tp2"
check_err() { # expected-substring command...
  local want=$1; shift
  "$@" > "$W/out" 2> "$W/err"; local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l < "$W/err")" -ne 1 ] || ! grep -q "^snn: error: .*$want" "$W/err"; then
    echo "FAIL: $* -> rc $rc, stderr: $(cat "$W/err")" >&2; fail=1
  fi
}
check_err "already exists" "$B/snn" export-artifact "$d/ckpt/step_00000005" "$d/cli.safetensors"
check_err "does not exist" "$B/snn" export-artifact "$d/ckpt/step_00000099" "$d/x.safetensors"
check_err "exactly" "$B/snn" export-artifact "$d/ckpt/step_00000005"
rm -f "$d/ckpt/step_00000005/pp_0000_tp_0001.safetensors"
check_err "pp_0000_tp_0001" "$B/snn" export-artifact "$d/ckpt/step_00000005" "$d/y.safetensors"
[ -e "$d/y.safetensors" ] && { echo "FAIL: a failed export left its output" >&2; fail=1; }
exit $fail
