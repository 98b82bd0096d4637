#!/bin/bash
# examples/custom_loop (a model built through the public API, AdamW after prepare, loss =
# mean(y^2)) on the CPU in fp32, fp16, bf16 and fp8 with every recipe:
#  - one JSON line per step, and the loss falls (last < 0.5 * first over 8 steps);
#  - the last line is the preparation report: fp8 converts both Linear layers (the GELU is
#    skipped), the other modes convert nothing to FP8;
#  - --device cuda where there is no GPU (a build without CUDA, or a machine without one) and
#    bad options exit 2 with one "custom_loop: error: ..." line. (tests/cuda/test_cuda_engine.c
#    and scripts/gpu-check run it on a GPU.)
set -u
B=${1:?build dir}
EX="$B/examples/custom_loop"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

run() { # NAME ARGS...
  local name=$1; shift
  if ! "$EX" --in 128 --hidden 256 --out 64 --batch 16 --steps 8 --seed 3 --lr 1e-3 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
    echo "FAIL: $name: exit $?: $(cat "$tmp/$name.err")" >&2; fail=1; return
  fi
  "$PY" - "$tmp/$name.out" "$name" <<'PY' || fail=1
import json, sys
lines = open(sys.argv[1]).read().splitlines()
name = sys.argv[2]
steps = [json.loads(l) for l in lines[:-1]]
rep = json.loads(lines[-1])
ok = True
def bad(msg):
    global ok
    print(f"FAIL: {name}: {msg}", file=sys.stderr); ok = False
if [s["step"] for s in steps] != list(range(1, 9)): bad(f"steps {[s.get('step') for s in steps]}")
loss = [s["loss"] for s in steps]
if not all(l == l and l > 0 for l in loss): bad(f"loss not positive and finite: {loss}")
if not loss[-1] < 0.5 * loss[0]: bad(f"loss did not fall: {loss[0]} -> {loss[-1]}")
for k in ("config", "policy", "capability_report", "conversion_report"):
    if k not in rep: bad(f"report lacks {k}")
conv = rep.get("conversion_report", {})
mode = rep.get("config", {}).get("mode")
if mode == "fp8":
    if conv.get("converted_modules") != ["0", "2"] or conv.get("skipped_modules") != ["1"]:
        bad(f"fp8 conversion {conv}")
elif conv.get("converted_modules"):
    bad(f"{mode} converted {conv.get('converted_modules')}")
if not ok: sys.exit(1)
print(f"{name}: loss {loss[0]:.4g} -> {loss[-1]:.4g}")
PY
}

run fp32 --precision fp32
run fp16 --precision fp16
run bf16 --precision bf16
for r in delayed current block mxfp8 auto; do run "fp8-$r" --precision fp8 --fp8-recipe "$r"; done

expect_error() { # WHAT NEEDLE ARGS...
  local what=$1 needle=$2; shift 2
  "$EX" --in 16 --hidden 16 --out 8 --batch 2 --steps 1 "$@" >"$tmp/o" 2>"$tmp/e"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/e")" -ne 1 ] || ! grep -q '^custom_loop: error: ' "$tmp/e" ||
     ! grep -qF -- "$needle" "$tmp/e"; then
    echo "FAIL: $what: rc=$rc, expected exit 2 with '$needle'; stderr: $(cat "$tmp/e")" >&2; fail=1
  fi
}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  expect_error "cuda device without a GPU" "cuda" --device cuda
fi
expect_error "unknown device" "unknown device 'tpu'" --device tpu
expect_error "zero batch" "--batch expects an integer" --batch 0
expect_error "trailing garbage" "--hidden expects an integer" --hidden 12x
expect_error "recipe without fp8" "--fp8-recipe needs --precision fp8" --precision bf16 --fp8-recipe block
expect_error "unknown recipe" "fp8_recipe" --precision fp8 --fp8-recipe nope
expect_error "unknown option" "unknown option" --width 3
[ $fail = 0 ] && echo "cli_example: ok"
exit $fail
