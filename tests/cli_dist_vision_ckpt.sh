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
