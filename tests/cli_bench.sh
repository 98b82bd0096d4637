#!/usr/bin/env bash
# CLI test of `snn bench`: the must-show linear run (timed) and its JSON fields, usage
# errors (exit 2, one line), the failure checks (exit 1), tiny fcsnn / neuron / crossover
# runs, and the crossover SVG. Usage: bash tests/cli_bench.sh <build_dir>
set -u
BUILD=${1:?usage: cli_bench.sh <build_dir>}
SNN="$BUILD/snn"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
passes=0
ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# ---- 1. the must-show command, timed ----
start=$(date +%s.%N)
"$SNN" bench linear --device cpu --batch-size 256 --width 256 --depth 3 --num-classes 256 --warmup 1 \
    --training-steps 3 --inference-steps 3 --trials 3 --precisions fp32 bf16 fp8 --baseline-precision bf16 \
    --output "$TMP/b.json" >"$TMP/b.out" 2>"$TMP/b.err"
rc=$?
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "must-show bench linear: rc=$rc in ${secs}s"
[ $rc -eq 0 ] && ok || { bad "bench linear exited $rc"; cat "$TMP/b.err"; }
awk -v s="$secs" 'BEGIN { exit !(s < 60) }' && ok || bad "bench linear took ${secs}s (must be well under a minute)"
grep -q "fp8 (delayed) vs bf16: training" "$TMP/b.out" && ok || bad "table has no fp8 comparison line"

if "$PY" - "$TMP/b.json" <<'EOF'; then ok; else bad "linear JSON fields"; fi
import json, math, sys
d = json.load(open(sys.argv[1]))
errs = []
def need(cond, msg):
    if not cond: errs.append(msg)
for k in ["metadata", "config", "results", "efficiency"]:
    need(k in d, "missing top-level " + k)
md = d["metadata"]
for k in ["host", "platform", "command", "commit", "commit_source", "snn_version", "device", "date_utc", "omp_max_threads"]:
    need(k in md, "metadata." + k)
need(md["device"] == "cpu", "metadata.device")
# the commit the build recorded (not a runtime lookup, not the environment's)
need(md["commit_source"] == "build" and isinstance(md["commit"], str) and len(md["commit"]) >= 7
     and isinstance(md.get("commit_dirty"), bool), "metadata.commit %r from %r" % (md["commit"], md["commit_source"]))
need("bench linear" in md["command"], "metadata.command")
c = d["config"]
for k, v in [("batch_size", 256), ("width", 256), ("depth", 3), ("num_classes", 256), ("warmup", 1),
             ("training_steps", 3), ("inference_steps", 3), ("trials", 3), ("trial_order", "rotated"),
             ("baseline_precision", "bf16"), ("precisions", ["fp32", "bf16", "fp8"]),
             ("timing_scope", "steady_state_excludes_precision_conversion"),
             # auto is what the library resolves it to in prepare (snn train's recipe)
             ("fp8_recipe", "auto"), ("fp8_recipe_resolved", "delayed")]:
    need(c.get(k) == v, "config.%s = %r" % (k, c.get(k)))
# (depth - 1) x [Linear(w, w), GELU] -> Linear(w, classes) with biases, counted by hand
need(c.get("parameters") == 2 * (256 * 256 + 256) + 256 * 256 + 256, "config.parameters = %r" % c.get("parameters"))
metrics = ["preparation_ms", "training_ms", "training_samples_per_sec", "training_peak_allocated_mb",
           "training_peak_rss_delta_mb", "inference_ms", "inference_samples_per_sec",
           "inference_peak_allocated_mb", "inference_peak_rss_delta_mb", "parameter_update_max_abs",
           "output_checksum", "forward_ms", "loss_ms", "backward_optimizer_ms", "optimizer_ms", "backward_ms",
           "training_cpu_ms", "inference_cpu_ms"]
names = [r["precision"] for r in d["results"]]
need(names == ["fp32", "bf16", "fp8"], "results order %r" % names)
for r in d["results"]:
    p = r["precision"]
    need(r["trial_count"] == 3 and len(r["trials"]) == 3, p + ": 3 trials")
    for m in metrics:
        for suf in ["", "_p25", "_p75"]:
            need(isinstance(r.get(m + suf), (int, float)), "%s: %s%s" % (p, m, suf))
        if all(isinstance(r.get(m + s), (int, float)) for s in ["", "_p25", "_p75"]):
            need(r[m + "_p25"] <= r[m] <= r[m + "_p75"], "%s: p25 <= median <= p75 for %s" % (p, m))
    need(r["parameter_update_max_abs"] > 0, p + ": parameters changed")
    need(math.isfinite(r["output_checksum"]), p + ": checksum finite")
    # one base state: same weights, input and precision in every trial -> same checksum
    need(abs(r["output_checksum_spread"]) <= 1e-4 * (1 + abs(r["output_checksum"])), p + ": checksum spread")
    for t in r["trials"]:
        need(t["loss_finite"] and t["output_finite"], p + ": finite flags")
        # samples/s and ms/step are two views of the same timing
        need(abs(t["training_samples_per_sec"] * t["training_ms"] / 1000 - 256) < 1e-6 * 256, p + ": train sps*ms")
        need(abs(t["inference_samples_per_sec"] * t["inference_ms"] / 1000 - 256) < 1e-6 * 256, p + ": infer sps*ms")
        need(t["training_peak_allocated_mb"] >= t["inference_peak_allocated_mb"] > 0, p + ": memory")
        # trial i starts at precision i mod P: position of p in trial i is (idx - i) mod P
        need(t["order_position"] == (names.index(p) - t["trial"]) % 3, p + ": rotated order")
    cr = r.get("conversion_report")
    need(isinstance(cr, dict), p + ": conversion_report")
    if p == "fp8":
        need(len(cr["converted_modules"]) == 3, "fp8 converts the 3 aligned Linear layers: %r" % cr)
    need(isinstance(r.get("policy"), dict) and r["policy"]["name"] == p, p + ": policy")
    if p == "fp8":
        need(r["policy"].get("fp8_recipe") == "auto" and r["policy"].get("resolved_fp8_recipe") == "delayed",
             "fp8 policy recipe auto -> delayed: %r" % r["policy"])
    # the MLP has no neurons: an empty list, per result and per trial
    need(r.get("spike_rates") == [], p + ": spike_rates %r" % r.get("spike_rates"))
    need(all(t.get("spike_rates_training") == [] and t.get("spike_rates_inference") == [] for t in r["trials"]),
         p + ": per-trial spike rates")
    need("reference_hand_built" not in r, p + ": no hand-built reference on the CPU")
e = d["efficiency"]
for k in ["baseline_precision", "comparisons", "failures", "passed", "min_training_speedup", "min_inference_speedup"]:
    need(k in e, "efficiency." + k)
need(e["baseline_precision"] == "bf16" and e["failures"] == [] and e["passed"] is True, "efficiency verdict")
need(len(e["comparisons"]) == 1, "one fp8 comparison")
for cmp in e["comparisons"]:
    need(cmp["precision"] == "fp8", "comparison precision")
    need(cmp["fp8_recipe"] == "delayed", "comparison names the resolved recipe: %r" % cmp["fp8_recipe"])
    for k in ["training_speedup", "inference_speedup", "training_memory_ratio", "inference_memory_ratio"]:
        need(cmp[k] > 0, "comparison " + k)
    res = {r["precision"]: r for r in d["results"]}
    exp = res["fp8"]["training_samples_per_sec"] / res["bf16"]["training_samples_per_sec"]
    need(abs(cmp["training_speedup"] - exp) < 1e-9 * exp, "training speed-up is the ratio of medians")
    need(cmp["training_verdict"] == ("win" if cmp["training_speedup"] >= 1.05 else "no win"), "training verdict")
    need(cmp["inference_verdict"] == ("win" if cmp["inference_speedup"] >= 1.05 else "no win"), "inference verdict")
for m in errs: print("  " + m)
sys.exit(1 if errs else 0)
EOF

# ---- 2. usage errors: exit 2, exactly one line on stderr, nothing on stdout ----
usage_case() {
    "$SNN" "$@" >"$TMP/u.out" 2>"$TMP/u.err"
    local rc=$? lines
    lines=$(wc -l <"$TMP/u.err")
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$TMP/u.out" ] && grep -q "^snn: error: " "$TMP/u.err"; then
        ok
    else
        bad "snn $* -> rc $rc, $lines stderr lines: $(head -c 300 "$TMP/u.err")"
    fi
}
usage_case bench
usage_case bench nope
usage_case bench linear --bogus
usage_case bench linear --width abc
usage_case bench linear --width 0
usage_case bench linear --precisions fp32 fp9
usage_case bench linear --precisions fp32 fp32
usage_case bench linear --precisions fp32 bf16 --baseline-precision fp16
usage_case bench linear --baseline-precision fp8
usage_case bench linear --width 100 --precisions bf16 fp8
usage_case bench linear --fp8-recipe nope
usage_case bench linear --precisions fp32 bf16 --fp8-recipe delayed
usage_case bench linear --trials 0
usage_case bench linear --converge mnist
usage_case bench linear --converge-steps 5
usage_case bench fcsnn --neuron-storage fp8
usage_case bench fcsnn --depth 1
usage_case bench fcsnn --input-dim 100
usage_case bench neuron --sizes 4y5
usage_case bench neuron --neuron relu
usage_case bench crossover --widths 100
usage_case bench crossover --precisions fp32
usage_case bench crossover --baseline-precision fp8
# --device cuda: a build without CUDA, or a CUDA build on a machine without a usable GPU,
# exits 2 with one line naming the problem; with a GPU it runs (then the JSON says cuda).
for wl in linear fcsnn crossover; do
    case $wl in
    linear) a="--batch-size 32 --width 32 --depth 2" ;;
    fcsnn) a="--time-steps 2 --batch-size 16 --input-dim 32 --hidden-dim 32" ;;
    crossover) a="--widths 32 --batch-sizes 32 --depth 2" ;;
    esac
    "$SNN" bench $wl --device cuda $a --trials 1 --warmup 0 --training-steps 1 --inference-steps 1 --quiet \
        --output "$TMP/cu.json" >/dev/null 2>"$TMP/u.err"
    rc=$?
    if [ $rc -eq 2 ]; then
        [ "$(wc -l <"$TMP/u.err")" -eq 1 ] &&
            grep -Eq "^snn: error: (this snn was built without CUDA \(configure with -DSNN_CUDA=ON\)|--device cuda:0: no usable GPU: .+)$" "$TMP/u.err" &&
            ok || bad "bench $wl --device cuda: rc 2 but not one line naming the problem: $(cat "$TMP/u.err")"
    elif [ $rc -eq 0 ]; then
        "$PY" - "$TMP/cu.json" "$wl" <<'EOF' && ok || bad "bench $wl --device cuda: JSON (device, commit, engine, reference)"
import json, sys
d = json.load(open(sys.argv[1])); wl = sys.argv[2]
errs = []
if d["config"]["device"] != "cuda:0" or d["metadata"]["device"] != "cuda:0": errs.append("device")
if d["metadata"].get("commit_source") != "build": errs.append("commit %r" % d["metadata"].get("commit"))
rs = d["results"] if wl != "crossover" else [r for p in d["points"] for r in p["results"]]
for r in rs:
    ref = r.get("reference_hand_built")
    if not isinstance(ref, dict) or "ran" not in ref: errs.append(r["precision"] + ": reference_hand_built")
    elif ref["ran"] and not (ref.get("engine_over_hand_built_training", 0) > 0): errs.append("engine/hand-built ratio")
    if r.get("policy", {}).get("device_type") != "cuda": errs.append(r["precision"] + ": engine policy on cuda")
    if wl == "fcsnn" and len(r.get("spike_rates", [])) != 2: errs.append("fcsnn spike rates")
for m in errs: print("  " + m)
sys.exit(1 if errs else 0)
EOF
    else
        bad "bench $wl --device cuda: rc $rc, $(cat "$TMP/u.err")"
    fi
done
SNN_COMMIT=0123456789abcdef "$SNN" bench linear --width 32 --batch-size 16 --depth 2 --precisions fp32 bf16 \
    --trials 1 --warmup 0 --training-steps 1 --inference-steps 1 --quiet --output "$TMP/e.json" >/dev/null 2>&1
"$PY" -c "
import json,sys; md=json.load(open('$TMP/e.json'))['metadata']
sys.exit(0 if md['commit_source'] == 'build' and md['commit'] != '0123456789abcdef' and
         md.get('commit_env') == '0123456789abcdef' and md.get('commit_env_source') == 'env:SNN_COMMIT' else 1)" &&
    ok || bad "SNN_COMMIT replaced the build's commit in metadata"
usage_case bench linear --device cuda:x
usage_case bench neuron --device cuda
"$SNN" bench linear --help >"$TMP/h.out" 2>&1 && grep -q -- "--precisions" "$TMP/h.out" && ok || bad "bench linear --help"

# ---- 3. the checks fail the run (exit 1, listed in efficiency.failures) ----
# lr 1e-30 cannot move FP32 weights of size ~0.1: the update check must catch it.
"$SNN" bench linear --width 32 --batch-size 16 --depth 2 --precisions fp32 bf16 --trials 1 --warmup 0 \
    --training-steps 1 --inference-steps 1 --lr 1e-30 --quiet --output "$TMP/z.json" >/dev/null 2>"$TMP/z.err"
rc=$?
[ $rc -eq 1 ] && ok || bad "zero update: rc $rc"
"$PY" -c "
import json,sys; e=json.load(open('$TMP/z.json'))['efficiency']
sys.exit(0 if not e['passed'] and any('did not change the parameters' in f for f in e['failures']) else 1)" && ok ||
    bad "zero update not listed in efficiency.failures"
# lr 1e30 blows the weights up: non-finite loss and output.
"$SNN" bench linear --width 32 --batch-size 16 --depth 2 --precisions fp32 bf16 --trials 1 --warmup 1 \
    --training-steps 2 --inference-steps 1 --lr 1e30 --quiet --output "$TMP/n.json" >/dev/null 2>&1
rc=$?
[ $rc -eq 1 ] && ok || bad "non-finite: rc $rc"
"$PY" -c "
import json,sys; f=json.load(open('$TMP/n.json'))['efficiency']['failures']
sys.exit(0 if any('non-finite training loss' in x for x in f) and any('non-finite inference output' in x for x in f) else 1)" &&
    ok || bad "non-finite loss/output not listed"
# --require-efficiency turns a speed miss into a failure.
"$SNN" bench linear --width 32 --batch-size 16 --depth 2 --precisions bf16 fp8 --trials 1 --warmup 1 \
    --training-steps 1 --inference-steps 1 --min-training-speedup 1000 --require-efficiency --quiet \
    --output "$TMP/r.json" >/dev/null 2>&1
rc=$?
[ $rc -eq 1 ] && ok || bad "require-efficiency: rc $rc"

# ---- 4. tiny fcsnn, every mode, neuron precision, forward/backward/optimizer split ----
"$SNN" bench fcsnn --time-steps 2 --batch-size 16 --input-dim 64 --hidden-dim 64 --num-classes 16 --depth 3 \
    --trials 2 --warmup 1 --training-steps 2 --inference-steps 2 --precisions fp32 fp16 bf16 fp8 \
    --fp8-recipe current --neuron-storage bf16 --neuron-fwd bf16 --quiet --output "$TMP/f.json" >"$TMP/f.out" 2>"$TMP/f.err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "bench fcsnn rc $rc"; cat "$TMP/f.err"; }
"$PY" - "$TMP/f.json" <<'EOF' && ok || bad "fcsnn JSON"
import json, sys
d = json.load(open(sys.argv[1]))
errs = []
c = d["config"]
# 64 -> 64 -> 64 -> 16 Linear layers (2 [Linear -> LIF] blocks + output), LIF has no parameters
for k, v in [("workload", "fcsnn"), ("time_steps", 2), ("hidden_dim", 64), ("trial_order", "rotated"),
             ("neuron_storage", "bf16"), ("fp8_recipe", "current"), ("parameters", 2 * (64 * 64 + 64) + 64 * 16 + 16)]:
    if c.get(k) != v: errs.append("config.%s = %r" % (k, c.get(k)))
for r in d["results"]:
    for k in ["forward_ms", "loss_ms", "backward_ms", "optimizer_ms", "backward_optimizer_ms"]:
        if not isinstance(r.get(k), (int, float)): errs.append(r["precision"] + ": " + k)
    if r["parameter_update_max_abs"] <= 0: errs.append(r["precision"] + ": update")
    n = r.get("neurons", {}).get("converted_modules", [])
    if len(n) != 2: errs.append(r["precision"] + ": 2 LIF modules with neuron precision, got %r" % n)
    for t in r["trials"]:
        parts = t["forward_ms"] + t["loss_ms"] + t["backward_optimizer_ms"]
        if parts > t["training_ms"] * 1.001 + 1e-3: errs.append("phase times exceed the step time")
        if abs(t["backward_ms"] + t["optimizer_ms"] - t["backward_optimizer_ms"]) > 1e-9: errs.append("split sum")
cmp = d["efficiency"]["comparisons"]
if len(cmp) != 1 or cmp[0]["fp8_recipe"] != "current": errs.append("comparison %r" % cmp)
if c.get("fp8_recipe_resolved") != "current": errs.append("config.fp8_recipe_resolved %r" % c.get("fp8_recipe_resolved"))
md = d["metadata"]
if md.get("commit_source") != "build" or not isinstance(md.get("commit"), str) or not isinstance(md.get("commit_dirty"), bool):
    errs.append("metadata commit %r" % {k: md.get(k) for k in ["commit", "commit_dirty", "commit_source"]})
# one entry per LIF layer (layers.1 and layers.3), medians of per-trial fractions of ones
for r in d["results"]:
    sr = r.get("spike_rates")
    if [e.get("module") for e in sr or []] != ["layers.1", "layers.3"] or any(e.get("kind") != "LIFNode" for e in sr):
        errs.append(r["precision"] + ": spike_rates %r" % sr)
        continue
    for e in sr:
        for k in ["training", "inference"]:
            if not (isinstance(e.get(k), (int, float)) and 0 <= e[k] <= 1): errs.append("rate %s %r" % (k, e))
    for t in r["trials"]:
        for k in ["spike_rates_training", "spike_rates_inference"]:
            v = t.get(k)
            if not (isinstance(v, list) and len(v) == 2 and all(0 <= x <= 1 for x in v)): errs.append("trial " + k)
    # a rate is a count of ones over T * N * hidden = 2 * 16 * 64 values
    for x in r["trials"][0]["spike_rates_training"]:
        if abs(x * 2048 - round(x * 2048)) > 1e-9: errs.append("rate %r is not a fraction of 2048 values" % x)
if not d["efficiency"]["passed"]: errs.append("failures %r" % d["efficiency"]["failures"])
for m in errs: print("  " + m)
sys.exit(1 if errs else 0)
EOF

# --converge on the real data when Debian's Fashion-MNIST is installed
if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
    "$SNN" bench linear --width 64 --batch-size 32 --depth 2 --precisions fp32 bf16 --trials 1 --warmup 0 \
        --training-steps 1 --inference-steps 1 --converge fashion-mnist --converge-steps 20 \
        --converge-test-samples 300 --quiet --output "$TMP/cv.json" >/dev/null 2>&1
    rc=$?
    [ $rc -eq 0 ] && ok || bad "converge rc $rc"
    "$PY" -c "
import json,sys; d=json.load(open('$TMP/cv.json'))
ok = all(r['converge']['steps'] == 20 and r['converge']['test_samples'] == 300 and
         0 <= r['converge']['test_accuracy'] <= 1 and r['converge']['dataset'] == 'fashion-mnist' for r in d['results'])
sys.exit(0 if ok else 1)" && ok || bad "converge JSON"
else
    echo "skip: --converge (no Fashion-MNIST in /usr/share/datasets)"
fi

# ---- 5. tiny neuron bench: bytes and bandwidth arithmetic ----
"$SNN" bench neuron --sizes 4x4096,8x8192 --repeats 3 --warmup 1 --copy-mib 8 --quiet --output "$TMP/nr.json" \
    >/dev/null 2>"$TMP/nr.err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "bench neuron rc $rc"; cat "$TMP/nr.err"; }
"$PY" - "$TMP/nr.json" <<'EOF' && ok || bad "neuron JSON"
import json, sys
d = json.load(open(sys.argv[1]))
errs = []
rows = d["rows"]
if [(r["T"], r["N"], r["process"]) for r in rows] != [(4, 4096, "forward"), (4, 4096, "backward"),
                                                      (8, 8192, "forward"), (8, 8192, "backward")]:
    errs.append("rows %r" % rows)
ref = d["memory_bandwidth"]["reference_gb_s"]
if not ref > 0: errs.append("copy bandwidth")
for r in rows:
    if r["bytes"] != 12 * r["T"] * r["N"]: errs.append("bytes != 12*T*N")
    gbps = r["bytes"] / (r["median_ms"] / 1e3) / 1e9
    if abs(r["bandwidth_gb_s"] - gbps) > 1e-9 * gbps: errs.append("bandwidth")
    if abs(r["fraction_of_copy_bandwidth"] - gbps / ref) > 1e-9 * gbps / ref: errs.append("fraction")
    if not (r["min_ms"] <= r["p25_ms"] <= r["median_ms"] <= r["p75_ms"] <= r["max_ms"]): errs.append("order stats")
    if not r["success"]: errs.append("kernel check")
if not d["passed"]: errs.append("passed")
for m in errs: print("  " + m)
sys.exit(1 if errs else 0)
EOF

# ---- 6. tiny crossover with the SVG ----
"$SNN" bench crossover --widths 32,64 --batch-sizes 16 --depth 2 --trials 2 --warmup 1 --training-steps 1 \
    --inference-steps 1 --fp8-recipe delayed --quiet --output "$TMP/c.json" --svg "$TMP/c.svg" >"$TMP/c.out" 2>"$TMP/c.err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "bench crossover rc $rc"; cat "$TMP/c.err"; }
grep -q "^batch 16: training: " "$TMP/c.out" && ok || bad "crossover summary line"
"$PY" - "$TMP/c.json" "$TMP/c.svg" <<'EOF' && ok || bad "crossover JSON/SVG"
import json, sys
import xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
errs = []
pts = d["points"]
if [(p["batch_size"], p["width"]) for p in pts] != [(16, 32), (16, 64)]: errs.append("points")
for p in pts:
    for k in ["training_speedup", "inference_speedup", "training_verdict", "inference_verdict", "recommendation"]:
        if k not in p: errs.append("point." + k)
    if p.get("fp8_recipe") != "delayed": errs.append("recipe")
    if len(p.get("results", [])) != 2: errs.append("results per point")
    tr, inf = p["training_speedup"], p["inference_speedup"]
    want = ("fp8" if tr >= 1.05 and inf >= 1.05 else "fp8 for inference, bf16 for training" if inf >= 1.05
            else "fp8 for training, bf16 for inference" if tr >= 1.05 else "bf16")
    if p["recommendation"] != want: errs.append("recommendation %r != %r" % (p["recommendation"], want))
cx = d["crossovers"]
if len(cx) != 1 or cx[0]["batch_size"] != 16: errs.append("crossovers")
for mode, key in [("training", "training_speedup"), ("inference", "inference_speedup")]:
    o = cx[0][mode]
    s = [p[key] >= 1.05 for p in pts]
    exp = ("no_crossover_in_range" if not s[1] else "wins_from_smallest_width" if s[0] else "crossover")
    if o["status"] != exp: errs.append("%s status %r != %r" % (mode, o["status"], exp))
root = ET.parse(sys.argv[2]).getroot()
ns = "{http://www.w3.org/2000/svg}"
if root.tag != ns + "svg": errs.append("svg root " + root.tag)
polys = root.findall(ns + "polyline")
if len(polys) != 2: errs.append("two lines (training, inference), got %d" % len(polys))
for pl in polys:
    if len(pl.get("points").split()) != 2: errs.append("two points per line")
texts = " ".join(t.text or "" for t in root.iter(ns + "text"))
for w in ["1.0x", "1.05x", "training", "inference", "32", "64"]:
    if w not in texts: errs.append("svg text " + w)
if d.get("passed") is not True: errs.append("passed")
if d["config"].get("fp8_recipe_resolved") != "delayed": errs.append("config.fp8_recipe_resolved")
if d["metadata"].get("commit_source") != "build": errs.append("metadata.commit")
for m in errs: print("  " + m)
sys.exit(1 if errs else 0)
EOF
# auto in crossover and neuron JSON: the library's recipe, the build's commit
"$SNN" bench crossover --widths 32 --batch-sizes 16 --depth 2 --trials 1 --warmup 0 --training-steps 1 \
    --inference-steps 1 --quiet --output "$TMP/ca.json" >/dev/null 2>&1 &&
    "$PY" -c "
import json,sys; d=json.load(open('$TMP/ca.json')); c=d['config']; p=d['points'][0]
sys.exit(0 if c['fp8_recipe'] == 'auto' and c['fp8_recipe_resolved'] == 'delayed' and p['fp8_recipe'] == 'delayed'
         and d['metadata']['commit_source'] == 'build' else 1)" && ok || bad "crossover auto recipe / commit"
"$PY" -c "
import json,sys; md=json.load(open('$TMP/nr.json'))['metadata']
sys.exit(0 if md['commit_source'] == 'build' and isinstance(md['commit'], str) and isinstance(md['commit_dirty'], bool) else 1)" &&
    ok || bad "neuron JSON commit"

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
