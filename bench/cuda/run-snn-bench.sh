#!/usr/bin/env bash
# bench/cuda/run-snn-bench.sh OUTDIR SNN_BINARY
#
# The GPU must-show runs of `snn bench` (issue 5), about 2-3 minutes on one H200:
#   linear-W.json     snn bench linear --device cuda, batch 4096, depth 8, W in 2304 2560 3072
#                     3200, fp32 bf16 fp8 (baseline bf16), 3 trials
#   fcsnn-W4096.json  snn bench fcsnn --device cuda, T 16, batch 256, width 4096, depth 20
#   fcsnn-W8192.json  the same at width 8192, depth 10 (bf16 and fp8)
#   fcsnn-W*-delayed.json  both FC-SNN runs again with --fp8-recipe delayed
#   fcsnn-W8192-delayed-codes.json, -emulate.json  W 8192 delayed with SNN_FP8_GEMM=codes / emulate
#   fcsnn-W*-block.json, linear-W*-block.json  --fp8-recipe block (1x128 / 128x128 scaling)
#   fcsnn-W4096-nprec-bf16.json, fcsnn-W4096-nprec-fp8.json  the W 4096 FC-SNN in bf16 with its
#                     LIF layers on the mixed-precision GPU neurons: --neuron-storage bf16
#                     --neuron-fwd bf16 --neuron-bwd fp32, and float8_e4m3fn / fp8 / bf16 (1 trial)
#   crossover.json, crossover.svg
#                     snn bench crossover --device cuda over the same widths (fp8 vs bf16)
#   summary.md        the table printed at the end: our FP8/BF16 ratios next to the guide's
#                     (RTX 5090, "When FP8 is faster"), plus each command's log (*.log)
# --depth counts Linear layers, as in SpikingJelly's scripts (FC-SNN depth 20 = 19
# [Linear -> LIF] blocks and the output Linear). Exit status: 0 when every command exited 0.
set -u
OUTD=${1:?usage: bench/cuda/run-snn-bench.sh OUTDIR SNN_BINARY}
SNN=${2:?usage: bench/cuda/run-snn-bench.sh OUTDIR SNN_BINARY}
mkdir -p "$OUTD"
OUTD=$(cd "$OUTD" && pwd)
[ -x "$SNN" ] || { echo "not executable: $SNN" >&2; exit 2; }
WIDTHS="2304 2560 3072 3200"
# The guide's dense runs used --warmup 8 --training-steps 20 --inference-steps 40 --trials 3.
STEPS="--warmup 8 --training-steps 20 --inference-steps 40 --trials 3"
status=0
t0=$(date +%s)

run() { # name, then the snn arguments
  local name=$1
  shift
  local ts=$(date +%s)
  echo "== $name: $SNN $*" | tee "$OUTD/$name.log"
  "$SNN" "$@" >>"$OUTD/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc ($(( $(date +%s) - ts )) s)" | tee -a "$OUTD/$name.log"
  [ $rc = 0 ] || status=1
}

for W in $WIDTHS; do
  run "linear-W$W" bench linear --device cuda --batch-size 4096 --width "$W" --depth 8 --num-classes "$W" \
      --precisions fp32 bf16 fp8 --baseline-precision bf16 $STEPS --output "$OUTD/linear-W$W.json"
done
run fcsnn-W4096 bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 4096 --hidden-dim 4096 \
    --depth 20 --num-classes 10 --precisions bf16 fp8 --baseline-precision bf16 \
    --warmup 3 --training-steps 10 --inference-steps 20 --trials 3 --output "$OUTD/fcsnn-W4096.json"
run fcsnn-W8192 bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 8192 --hidden-dim 8192 \
    --depth 10 --num-classes 10 --precisions bf16 fp8 --baseline-precision bf16 \
    --warmup 3 --training-steps 10 --inference-steps 20 --trials 3 --output "$OUTD/fcsnn-W8192.json"
# delayed FP8 scaling (amax histories on the device) next to the current-scaling rows above
run fcsnn-W4096-delayed bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 4096 --hidden-dim 4096 \
    --depth 20 --num-classes 10 --precisions bf16 fp8 --fp8-recipe delayed --baseline-precision bf16 \
    --warmup 3 --training-steps 10 --inference-steps 20 --trials 3 --output "$OUTD/fcsnn-W4096-delayed.json"
run fcsnn-W8192-delayed bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 8192 --hidden-dim 8192 \
    --depth 10 --num-classes 10 --precisions bf16 fp8 --fp8-recipe delayed --baseline-precision bf16 \
    --warmup 3 --training-steps 10 --inference-steps 20 --trials 3 --output "$OUTD/fcsnn-W8192-delayed.json"
# the W 8192 delayed run with the FP8 Linears on FP8 codes (SNN_FP8_GEMM=codes, the default) and on
# the emulation (SNN_FP8_GEMM=emulate), for the A/B of the two paths
for fg in codes emulate; do
  export SNN_FP8_GEMM=$fg
  run "fcsnn-W8192-delayed-$fg" bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 8192 \
      --hidden-dim 8192 --depth 10 --num-classes 10 --precisions bf16 fp8 --fp8-recipe delayed --baseline-precision bf16 \
      --warmup 3 --training-steps 10 --inference-steps 20 --trials 3 --output "$OUTD/fcsnn-W8192-delayed-$fg.json"
done
unset SNN_FP8_GEMM
# block scaling (Float8BlockScaling through cuBLASLt's block-scale modes)
for W in 3072 3200; do
  run "linear-W$W-block" bench linear --device cuda --batch-size 4096 --width "$W" --depth 8 --num-classes "$W" \
      --precisions bf16 fp8 --fp8-recipe block --baseline-precision bf16 $STEPS --output "$OUTD/linear-W$W-block.json"
done
run fcsnn-W4096-block bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 4096 --hidden-dim 4096 \
    --depth 20 --num-classes 10 --precisions bf16 fp8 --fp8-recipe block --baseline-precision bf16 \
    --warmup 3 --training-steps 10 --inference-steps 20 --trials 3 --output "$OUTD/fcsnn-W4096-block.json"
run fcsnn-W8192-block bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 8192 --hidden-dim 8192 \
    --depth 10 --num-classes 10 --precisions bf16 fp8 --fp8-recipe block --baseline-precision bf16 \
    --warmup 3 --training-steps 10 --inference-steps 20 --trials 3 --output "$OUTD/fcsnn-W8192-block.json"
# the FC-SNN's LIF layers on the mixed-precision neurons (--neuron-storage/-fwd/-bwd)
run fcsnn-W4096-nprec-bf16 bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 4096 \
    --hidden-dim 4096 --depth 20 --num-classes 10 --precisions bf16 --neuron-storage bf16 --neuron-fwd bf16 \
    --neuron-bwd fp32 --warmup 3 --training-steps 10 --inference-steps 20 --trials 1 \
    --output "$OUTD/fcsnn-W4096-nprec-bf16.json"
run fcsnn-W4096-nprec-fp8 bench fcsnn --device cuda --time-steps 16 --batch-size 256 --input-dim 4096 \
    --hidden-dim 4096 --depth 20 --num-classes 10 --precisions bf16 --neuron-storage float8_e4m3fn \
    --neuron-fwd fp8 --neuron-bwd bf16 --warmup 3 --training-steps 10 --inference-steps 20 --trials 1 \
    --output "$OUTD/fcsnn-W4096-nprec-fp8.json"
# mixed-precision neurons (storage / forward / backward dtypes, bit-identical to the CPU emulation)
run neuron-mp bench neuron --device cuda --sizes 16x1048576 --neuron-storage float8_e4m3fn --neuron-fwd fp8 \
    --neuron-bwd bf16 --output "$OUTD/neuron-mp.json"
run neuron-mp-bf16 bench neuron --device cuda --sizes 16x1048576 --neuron-storage bf16 --neuron-fwd bf16 \
    --neuron-bwd fp32 --output "$OUTD/neuron-mp-bf16.json"
run crossover bench crossover --device cuda --widths "${WIDTHS// /,}" --batch-sizes 4096 --depth 8 \
    --baseline-precision bf16 $STEPS --output "$OUTD/crossover.json" --svg "$OUTD/crossover.svg"

python3 - "$OUTD" <<'PY' || status=1
import json, os, sys
outd = sys.argv[1]
def load(name):
    p = os.path.join(outd, name)
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
def res(doc, prec):
    for r in doc['results']:
        if r['precision'] == prec:
            return r
def cmp(doc):
    c = doc['efficiency']['comparisons']
    return c[0] if c else None
# The guide's FP8 / BF16 ratios (RTX 5090, PyTorch 2.11 + Transformer Engine 2.18)
guide_lin = {2304: (0.527, 0.966), 2560: (0.705, 1.100), 3072: (1.026, 1.629), 3200: (1.067, 1.614)}
guide_fc = {4096: (0.942, 0.896), 8192: (0.887, 1.299)}
L = ['# snn bench --device cuda', '']
md = None
for n in sorted(os.listdir(outd)):
    if n.endswith('.json'):
        d = load(n)
        if d:
            md = d['metadata']
            break
if md:
    L += [f"GPU {md.get('gpu')} (cc {md.get('gpu_compute_capability')}, {md.get('gpu_sm_count')} SMs), "
          f"driver {md.get('cuda_driver_version')}, runtime {md.get('cuda_runtime_version')}, "
          f"commit {md.get('commit')}, {md.get('date_utc')}", '']
L += ['## Linear (batch 4096, depth 8, classes = width; medians of 3 trials, samples/s)', '',
      '| width | fp32 train | bf16 train | fp8 train | fp32 infer | bf16 infer | fp8 infer '
      '| train FP8/BF16 | guide | infer FP8/BF16 | guide | verdict (train / infer) | checks |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|']
for w, tag in [(w, '') for w in sorted(guide_lin)] + [(3072, '-block'), (3200, '-block')]:
    d = load(f'linear-W{w}{tag}.json')
    if not d:
        L.append(f'| {w}{tag} | (no result) |||||||||||')
        continue
    g = guide_lin[w]
    c = cmp(d)
    sp = lambda p, k: f"{res(d, p)[k]:.0f}" if res(d, p) else '-'
    L.append(f"| {w}{' block' if tag else ''} | {sp('fp32','training_samples_per_sec')} | {sp('bf16','training_samples_per_sec')} | "
             f"{sp('fp8','training_samples_per_sec')} | {sp('fp32','inference_samples_per_sec')} | "
             f"{sp('bf16','inference_samples_per_sec')} | {sp('fp8','inference_samples_per_sec')} | "
             f"{c['training_speedup']:.3f}x | {g[0]:.3f}x | {c['inference_speedup']:.3f}x | {g[1]:.3f}x | "
             f"{c['training_verdict']} / {c['inference_verdict']} | "
             f"{'passed' if d['efficiency']['passed'] else 'FAILED'} |")
L += ['', '## FC-SNN (T 16, batch 256, classes 10, SGD momentum 0.9; medians of 3 trials, samples/s)', '',
      '| width | depth | bf16 train | fp8 train | bf16 infer | fp8 infer | train FP8/BF16 | guide '
      '| infer FP8/BF16 | guide | train / infer MiB fp8 vs bf16 | checks |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|']
for w, dep, tag in ((4096, 20, ''), (8192, 10, ''), (4096, 20, '-delayed'), (8192, 10, '-delayed'),
                    (4096, 20, '-block'), (8192, 10, '-block')):
    d = load(f'fcsnn-W{w}{tag}.json')
    if not d:
        L.append(f'| {w}{tag} | {dep} | (no result) ||||||||||')
        continue
    g = guide_fc[w]
    c = cmp(d)
    b, f = res(d, 'bf16'), res(d, 'fp8')
    L.append(f"| {w} {c['fp8_recipe']} | {dep} | {b['training_samples_per_sec']:.0f} | {f['training_samples_per_sec']:.0f} | "
             f"{b['inference_samples_per_sec']:.0f} | {f['inference_samples_per_sec']:.0f} | "
             f"{c['training_speedup']:.3f}x | {g[0]:.3f}x | {c['inference_speedup']:.3f}x | {g[1]:.3f}x | "
             f"{c['training_memory_ratio']:.2f}x / {c['inference_memory_ratio']:.2f}x "
             f"({f['training_peak_allocated_mb']:.1f} vs {b['training_peak_allocated_mb']:.1f} MiB) | "
             f"{'passed' if d['efficiency']['passed'] else 'FAILED'} |")
L += ['', '## FC-SNN W 4096 bf16 with mixed-precision neurons (1 trial, samples/s)', '',
      '| neuron storage / fwd / bwd | train | infer | train MiB | checks |', '|---|---|---|---|---|']
for tag, lab in (('', 'none (fused FP32 neurons, row above)'), ('-nprec-bf16', 'bf16 / bf16 / fp32'),
                 ('-nprec-fp8', 'float8_e4m3fn / fp8 / bf16')):
    d = load(f'fcsnn-W4096{tag}.json')
    b = res(d, 'bf16') if d else None
    if not b:
        L.append(f'| {lab} | (no result) ||||')
        continue
    L.append(f"| {lab} | {b['training_samples_per_sec']:.0f} | {b['inference_samples_per_sec']:.0f} | "
             f"{b['training_peak_allocated_mb']:.1f} | {'passed' if d['efficiency']['passed'] else 'FAILED'} |")
d = load('crossover.json')
L += ['', '## Crossover (fp8 vs bf16, batch 4096, depth 8)', '']
if d:
    L += ['| width | training x | inference x | recommendation |', '|---|---|---|---|']
    for p in d['points']:
        L.append(f"| {p['width']} | {p.get('training_speedup', float('nan')):.3f} | "
                 f"{p.get('inference_speedup', float('nan')):.3f} | {p['recommendation']} |")
    for c in d['crossovers']:
        L += ['', f"- {c['training']['summary']}", f"- {c['inference']['summary']}"]
    L += ['', "Guide (RTX 5090): inference crossover between widths 2304 and 2560, training between 3072 and 3200."]
else:
    L.append('(no result)')
text = '\n'.join(L) + '\n'
open(os.path.join(outd, 'summary.md'), 'w').write(text)
print(text)
PY
echo "run-snn-bench: status $status, $(( $(date +%s) - t0 )) s"
exit $status
