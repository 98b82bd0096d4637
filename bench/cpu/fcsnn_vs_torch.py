#!/usr/bin/env python3
"""CPU throughput of snn's fcsnn against the same network in PyTorch, on the same machine.

Workload (defaults): 784-1024-1024-10 (two [Linear -> LIF] blocks and an output Linear),
T 4, batch 128, FP32, cross-entropy on the mean over T, SGD lr 0.05 momentum 0.9.
  snn side:   `snn bench fcsnn --precisions fp32 --trials 1 ...` (one process per trial)
  torch side: bench/cpu/torch_fcsnn.py (SpikingJelly's torch-backend LIF in plain torch)
  GEMM rate:  bench/cpu/sgemm_rate (large cblas_sgemm, the OpenBLAS libsnn links)

Each round runs every side once, in an order rotated per round, so that load from other
work on the machine falls on all sides alike. The same thread count is given to all (OMP,
OpenBLAS and torch.set_num_threads). PyTorch runs with two BLAS builds: Debian's default
libblas.so.3 alternative (OpenBLAS pthread) and the OpenMP OpenBLAS (the one libsnn links),
picked through LD_LIBRARY_PATH; the faster of the two by median is the baseline.

Writes a JSON report (medians, p25, p75, ratios, GEMM floor) and prints a table.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ARCH_LIB = "/usr/lib/x86_64-linux-gnu"
TORCH_BLAS = {
    "pthread": None,  # Debian's libblas.so.3 alternative as installed
    "openmp": os.path.join(ARCH_LIB, "openblas-openmp"),
}


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--snn", default=os.path.join(ROOT, "build-cpubench", "snn"))
    p.add_argument("--sgemm", default=os.path.join(ROOT, "build-cpubench", "cpu", "sgemm_rate"))
    p.add_argument("--python", default=None, help="interpreter with torch (default: this one, else /usr/bin/python3)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--time-steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--input-dim", type=int, default=784)
    p.add_argument("--hidden-dim", type=int, default=1024)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--depth", type=int, default=3, help="Linear layers: depth-1 [Linear->LIF] blocks + output")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--training-steps", type=int, default=10)
    p.add_argument("--inference-steps", type=int, default=20)
    p.add_argument("--torch-blas", default="pthread,openmp", help="comma list of: pthread, openmp")
    p.add_argument("--sgemm-size", type=int, default=2048)
    p.add_argument("--wait-idle", type=float, default=0.0,
                   help="before each round, wait until this fraction of the CPUs was idle over 2 s (0: no wait)")
    p.add_argument("--wait-max", type=float, default=300.0, help="longest wait for --wait-idle, seconds")
    p.add_argument("--output", default=os.path.join(ROOT, "build-cpubench", "fcsnn_vs_torch.json"))
    return p.parse_args()


def torch_python(a):
    if a.python:
        return a.python
    for py in (sys.executable, "/usr/bin/python3"):
        if py and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    sys.exit("fcsnn_vs_torch: no python3 with torch found (Debian: apt-get install python3-torch)")


def pct(v, q):
    """Linear-interpolated percentile, position (n - 1) q (as snn bench)."""
    s = sorted(v)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summary(v):
    return {"median": pct(v, 0.5), "p25": pct(v, 0.25), "p75": pct(v, 0.75), "min": min(v), "max": max(v),
            "n": len(v), "values": v}


def gemm_flops(a):
    """FP32 GEMM FLOPs per sample: forward, and training = forward + dW + dX (no dX for the input)."""
    dims = [a.input_dim] + [a.hidden_dim] * (a.depth - 1) + [a.num_classes]
    macs = [dims[i] * dims[i + 1] for i in range(a.depth)]
    fwd = 2 * a.time_steps * sum(macs)
    train = fwd + fwd + 2 * a.time_steps * sum(macs[1:])
    return {"inference": fwd, "training": train, "layers": dims}


def env_for(a, blas=None):
    e = dict(os.environ)
    t = str(a.threads)
    e.update(OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, MKL_NUM_THREADS=t)
    e.pop("LD_LIBRARY_PATH", None)
    if blas:
        e["LD_LIBRARY_PATH"] = blas
    return e


def run_snn(a, tmp):
    out = os.path.join(tmp, "snn.json")
    cmd = [a.snn, "bench", "fcsnn", "--device", "cpu", "--precisions", "fp32", "--baseline-precision", "fp32",
           "--time-steps", str(a.time_steps), "--batch-size", str(a.batch_size), "--input-dim", str(a.input_dim),
           "--hidden-dim", str(a.hidden_dim), "--num-classes", str(a.num_classes), "--depth", str(a.depth),
           "--trials", "1", "--warmup", str(a.warmup), "--training-steps", str(a.training_steps),
           "--inference-steps", str(a.inference_steps), "--output", out, "--quiet"]
    r = subprocess.run(cmd, env=env_for(a), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("fcsnn_vs_torch: snn bench failed (%d):\n%s%s" % (r.returncode, r.stdout, r.stderr))
    d = json.load(open(out))
    res = d["results"][0]
    keep = ["training_ms", "training_samples_per_sec", "inference_ms", "inference_samples_per_sec", "forward_ms",
            "loss_ms", "backward_ms", "optimizer_ms", "final_loss", "training_cpu_ms", "inference_cpu_ms"]
    row = {k: res[k] for k in keep}
    row["metadata"] = d["metadata"]
    return row


def run_torch(a, py, blas):
    cmd = [py, os.path.join(HERE, "torch_fcsnn.py"), "--threads", str(a.threads), "--time-steps", str(a.time_steps),
           "--batch-size", str(a.batch_size), "--input-dim", str(a.input_dim), "--hidden-dim", str(a.hidden_dim),
           "--num-classes", str(a.num_classes), "--depth", str(a.depth), "--warmup", str(a.warmup),
           "--training-steps", str(a.training_steps), "--inference-steps", str(a.inference_steps),
           "--mm-size", str(a.sgemm_size)]
    r = subprocess.run(cmd, env=env_for(a, TORCH_BLAS[blas]), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("fcsnn_vs_torch: torch trial failed (%d):\n%s" % (r.returncode, r.stderr))
    row = json.loads(r.stdout.strip().splitlines()[-1])
    want = TORCH_BLAS[blas] or "openblas-pthread"
    if not any(want in lib for lib in row["blas_libraries"]):
        sys.exit("fcsnn_vs_torch: torch (%s) did not load %s: %s" % (blas, want, row["blas_libraries"]))
    if any(os.path.basename(lib).startswith("libblas.so") and "/blas/" in lib for lib in row["blas_libraries"]):
        sys.exit("fcsnn_vs_torch: torch loaded the reference BLAS; install libopenblas0-pthread")
    return row


def run_sgemm(a):
    dims = gemm_flops(a)["layers"]
    cmd = [a.sgemm, str(a.sgemm_size), "7", str(a.time_steps * a.batch_size)] + [str(d) for d in dims]
    r = subprocess.run(cmd, env=env_for(a), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("fcsnn_vs_torch: sgemm_rate failed (%d): %s%s" % (r.returncode, r.stdout, r.stderr))
    return json.loads(r.stdout)


def cpu_idle_fraction(seconds=2.0):
    """Idle share of all CPUs over a short window, from /proc/stat (idle + iowait)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v[:8])
    i0, t0 = snap()
    time.sleep(seconds)
    i1, t1 = snap()
    return (i1 - i0) / max(1, t1 - t0)


def wait_idle(a):
    """Returns (idle fraction seen last, seconds waited)."""
    if a.wait_idle <= 0:
        return None, 0.0
    t0 = time.monotonic()
    while True:
        idle = cpu_idle_fraction()
        if idle >= a.wait_idle or time.monotonic() - t0 >= a.wait_max:
            return idle, time.monotonic() - t0


def loadavg():
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except (OSError, ValueError):
        return None


def cpu_model():
    info = {}
    if shutil.which("lscpu"):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "CPU family", "Model", "CPU(s)", "Thread(s) per core", "Flags"):
                info[k.strip()] = v.strip()
    flags = info.pop("Flags", "").split()
    info["avx512f"] = "avx512f" in flags
    info["avx2"] = "avx2" in flags
    return info


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def main():
    a = parse()
    py = torch_python(a)
    blases = [b.strip() for b in a.torch_blas.split(",") if b.strip()]
    for b in blases:
        if b not in TORCH_BLAS:
            sys.exit("fcsnn_vs_torch: --torch-blas: unknown '%s' (pthread, openmp)" % b)
    for path in (a.snn, a.sgemm):
        if not os.access(path, os.X_OK):
            sys.exit("fcsnn_vs_torch: %s not built (bench/cpu/run.sh builds it)" % path)
    sides = ["snn"] + ["torch-" + b for b in blases] + ["sgemm"]
    rows = {s: [] for s in sides}
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load0 = loadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            idle, waited = wait_idle(a)
            for s in order:
                if s == "snn":
                    row = run_snn(a, tmp)
                elif s == "sgemm":
                    row = run_sgemm(a)
                else:
                    row = run_torch(a, py, s[len("torch-"):])
                row["round"], row["loadavg_1min"] = r, loadavg()
                row["idle_before_round"], row["waited_s"] = idle, waited
                rows[s].append(row)
            sn, parts = rows["snn"][-1], []
            for b in blases:
                t = rows["torch-" + b][-1]
                parts.append("torch-%s %.0f/%.0f" % (b, t["training_samples_per_sec"], t["inference_samples_per_sec"]))
            print("round %d/%d: snn %.0f/%.0f  %s  sgemm %.1f GFLOP/s  (train/infer samples/s, load %.2f, idle %s)"
                  % (r + 1, a.rounds, sn["training_samples_per_sec"], sn["inference_samples_per_sec"],
                     "  ".join(parts), rows["sgemm"][-1]["gflops_median"], loadavg() or -1,
                     "-" if idle is None else "%.2f after %.0f s" % (idle, waited)), file=sys.stderr)

    # With --wait-idle, rounds that started without the idle share asked for (the wait ran
    # out) were disturbed by other work; the statistics use the others (all if none passed).
    all_rows = rows
    idle = [x["idle_before_round"] for x in rows["snn"]]
    used = [r for r in range(a.rounds) if a.wait_idle <= 0 or idle[r] >= a.wait_idle]
    if not used:
        used = list(range(a.rounds))
    rows = {s: [v[r] for r in used] for s, v in all_rows.items()}

    flops = gemm_flops(a)
    gemm_rate = summary([x["gflops_median"] * 1e9 for x in rows["sgemm"]])
    rate = gemm_rate["median"]
    report = {
        "metadata": {
            "date_utc": started,
            "host": platform.node(),
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "threads": a.threads,
            "commit": git_commit(),
            "loadavg_1min_start": load0,
            "loadavg_1min_end": loadavg(),
            "env_OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "openblas_core_snn": rows["sgemm"][0]["openblas_core"],
            "openblas_config_snn": rows["sgemm"][0]["openblas_config"],
            "torch_version": rows["torch-" + blases[0]][0]["torch_version"] if blases else None,
            "torch_blas_libraries": {b: rows["torch-" + b][0]["blas_libraries"] for b in blases},
            "python": py,
        },
        "config": {"time_steps": a.time_steps, "batch_size": a.batch_size, "input_dim": a.input_dim,
                   "hidden_dim": a.hidden_dim, "num_classes": a.num_classes, "depth": a.depth,
                   "neuron": "LIF tau 2, v_th 1, hard reset to 0, decay_input, Sigmoid(4) surrogate",
                   "optimizer": "SGD lr 0.05 momentum 0.9", "rounds": a.rounds, "warmup": a.warmup,
                   "training_steps": a.training_steps, "inference_steps": a.inference_steps,
                   "wait_idle": a.wait_idle, "wait_max_s": a.wait_max,
                   "idle_before_rounds": idle,
                   "loadavg_per_round": [x["loadavg_1min"] for x in all_rows["snn"]],
                   "rounds_used": used,
                   "order": "rotated per round: " + ", ".join(sides)},
        "gemm_flops_per_sample": flops,
        "sgemm_rate_flops": gemm_rate,
        # GEMM time of one step at the network's exact shapes (src/nn/linear.c's calls)
        "step_gemm_ms": {k: summary([x["step_%s_gemm_ms" % k] for x in rows["sgemm"]])
                         for k in ("training", "inference")},
        "sides": {},
        "ratios": {},
        "rounds_raw": all_rows,
    }
    metrics = ["training_samples_per_sec", "inference_samples_per_sec", "training_ms", "inference_ms",
               "forward_ms", "loss_ms", "backward_ms", "optimizer_ms", "training_cpu_ms", "inference_cpu_ms"]
    for s in sides[:-1]:
        side = {m: summary([x[m] for x in rows[s]]) for m in metrics}
        for kind in ("training", "inference"):
            sps = side[kind + "_samples_per_sec"]["median"]
            side[kind + "_gemm_fraction_of_sgemm_rate"] = sps * flops[kind] / rate
            side[kind + "_floor_samples_per_sec"] = rate / flops[kind]
            step_ms = report["step_gemm_ms"][kind]["median"]
            side[kind + "_exact_shape_floor_samples_per_sec"] = a.batch_size / (step_ms * 1e-3)
            side[kind + "_fraction_of_exact_shape_floor"] = sps * step_ms * 1e-3 / a.batch_size
        side["final_loss"] = [x["final_loss"] for x in rows[s]]
        report["sides"][s] = side
    if blases:
        # per kind, the faster torch build by median is the baseline (the harder one to beat)
        base = {k: max(blases, key=lambda b: report["sides"]["torch-" + b][k + "_samples_per_sec"]["median"])
                for k in ("training", "inference")}
        report["ratios"]["torch_baseline"] = {k: "torch-" + b for k, b in base.items()}
        for b in blases:
            for kind in ("training", "inference"):
                m = kind + "_samples_per_sec"
                snn_v = [x[m] for x in rows["snn"]]
                t_v = [x[m] for x in rows["torch-" + b]]
                paired = [s_ / t_ for s_, t_ in zip(snn_v, t_v)]
                report["ratios"]["%s_vs_torch-%s" % (kind, b)] = {
                    "ratio_of_medians": statistics.median(snn_v) / statistics.median(t_v),
                    "paired_per_round": summary(paired)}
        for k in ("training", "inference"):
            report["ratios"][k] = report["ratios"]["%s_vs_torch-%s" % (k, base[k])]["ratio_of_medians"]
        report["ratios"]["targets"] = {"training": 3.0, "inference": 2.0}
        report["ratios"]["meets_targets"] = (report["ratios"]["training"] >= 3.0
                                             and report["ratios"]["inference"] >= 2.0)
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    with open(a.output, "w") as f:
        json.dump(report, f, indent=1)

    print("fcsnn %s, T %d, batch %d, %d threads, %d rounds, %d used (%s)" % (
        "-".join(map(str, flops["layers"])), a.time_steps, a.batch_size, a.threads, a.rounds, len(used), started))
    print("sgemm %d^3: %.1f GFLOP/s median [%.1f, %.1f]; GEMM MFLOP/sample: train %.2f, infer %.2f" % (
        a.sgemm_size, rate * 1e-9, gemm_rate["p25"] * 1e-9, gemm_rate["p75"] * 1e-9,
        flops["training"] * 1e-6, flops["inference"] * 1e-6))
    print("GEMM time of a step at the exact shapes: train %.2f ms, infer %.2f ms (medians)" % (
        report["step_gemm_ms"]["training"]["median"], report["step_gemm_ms"]["inference"]["median"]))
    print("%-15s %24s %24s %7s %7s %7s %7s" % ("side", "train samples/s", "infer samples/s", "tr/sq", "in/sq",
                                               "tr/ex", "in/ex"))
    print("%-15s %24s %24s %15s %15s" % ("", "median [p25, p75]", "median [p25, p75]", "square floor",
                                         "shape floor"))
    for s in sides[:-1]:
        d = report["sides"][s]
        tr, inf = d["training_samples_per_sec"], d["inference_samples_per_sec"]
        print("%-15s %8.0f [%6.0f, %6.0f] %8.0f [%6.0f, %6.0f] %6.0f%% %6.0f%% %6.0f%% %6.0f%%" % (
            s, tr["median"], tr["p25"], tr["p75"], inf["median"], inf["p25"], inf["p75"],
            100 * d["training_gemm_fraction_of_sgemm_rate"], 100 * d["inference_gemm_fraction_of_sgemm_rate"],
            100 * d["training_fraction_of_exact_shape_floor"], 100 * d["inference_fraction_of_exact_shape_floor"]))
    sn = report["sides"]["snn"]
    print("%-15s %8.0f %24.0f   (square sgemm rate)" % ("floor (GEMM)", sn["training_floor_samples_per_sec"],
                                                         sn["inference_floor_samples_per_sec"]))
    print("%-15s %8.0f %24.0f   (exact shapes)" % ("floor (GEMM)", sn["training_exact_shape_floor_samples_per_sec"],
                                                    sn["inference_exact_shape_floor_samples_per_sec"]))
    print("ms/step (medians) forward  backward  optimizer  | wall train  cpu train | wall infer  cpu infer")
    for s in sides[:-1]:
        d = report["sides"][s]
        print("%-16s %8.2f %9.2f %10.2f  | %10.2f %10.2f | %10.2f %10.2f" % (
            s, d["forward_ms"]["median"], d["backward_ms"]["median"], d["optimizer_ms"]["median"],
            d["training_ms"]["median"], d["training_cpu_ms"]["median"], d["inference_ms"]["median"],
            d["inference_cpu_ms"]["median"]))
    if blases:
        rt = report["ratios"]
        for b in blases:
            tr, inf = rt["training_vs_torch-" + b], rt["inference_vs_torch-" + b]
            print("snn / torch-%-8s training %.2fx (paired [%.2f, %.2f])  inference %.2fx (paired [%.2f, %.2f])" % (
                b, tr["ratio_of_medians"], tr["paired_per_round"]["p25"], tr["paired_per_round"]["p75"],
                inf["ratio_of_medians"], inf["paired_per_round"]["p25"], inf["paired_per_round"]["p75"]))
        print("against the faster torch: training %.2fx (%s, target 3x), inference %.2fx (%s, target 2x): %s" % (
            rt["training"], rt["torch_baseline"]["training"], rt["inference"], rt["torch_baseline"]["inference"],
            "met" if rt["meets_targets"] else "NOT met"))
    print("JSON: %s" % a.output)


if __name__ == "__main__":
    main()
