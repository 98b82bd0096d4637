"""Oracle test: our SGD / Adam / AdamW, gradient clipping and lr schedules against PyTorch.

Usage: python3 tests/oracle_optim.py <build_dir>   (exit 0 = pass)

Each optimizer run takes random FP32 parameters, a random weight-decay mask and ~20 steps
of fresh random gradients and learning rates; the same data go to torch.optim (the mask
becomes two param groups, one with weight decay 0) and to tests/driver_optim.c. Final
parameters and optimizer state must agree to 1e-6 relative.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    # CMake may have found a Python without torch (e.g. a pyenv shim); Debian's python3-torch
    # lives with the system interpreter.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != "/usr/bin/python3" \
            and not os.environ.get("SNN_ORACLE_REEXEC"):
        os.environ["SNN_ORACLE_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("oracle_optim: PyTorch and NumPy are needed (python3-torch)", file=sys.stderr)
    sys.exit(1)

import warnings

warnings.simplefilter("ignore")  # torch's scheduler deprecation chatter

REL = 1e-6
failures = 0
checks = 0


def check(ok, msg):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL: " + msg, file=sys.stderr)


def max_rel(a, b, floor):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if np.any(np.isnan(a)) or np.any(np.isnan(b)):
        return float("inf")
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), floor))) if a.size else 0.0


def driver_path(build):
    for name in ("driver_optim", "tests/driver_optim"):
        p = os.path.join(build, name)
        if os.path.exists(p):
            return p
    print("oracle_optim: driver_optim not found in " + build, file=sys.stderr)
    sys.exit(1)


def run(drv, args):
    r = subprocess.run([drv] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        print("driver failed: %s\n%s" % (" ".join(map(str, args)), r.stderr), file=sys.stderr)
        sys.exit(1)


def f32(x):
    """The double equal to x rounded to float32 (what the C side sees)."""
    return float(np.float32(x))


def torch_optimizer(kind, groups, cfg):
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg["momentum"],
                               dampening=cfg["dampening"], nesterov=bool(cfg["nesterov"]))
    betas = (cfg["beta1"], cfg["beta2"])
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(groups, lr=cfg["lr"], betas=betas, eps=cfg["eps"])


def optim_case(drv, tmp, rng, name, kind, n, steps, **kw):
    cfg = dict(lr=0.01, wd=0.0, momentum=0.0, dampening=0.0, nesterov=0,
               beta1=0.9, beta2=0.999, eps=1e-8)
    cfg.update(kw)
    cfg = {k: (f32(v) if isinstance(v, float) else v) for k, v in cfg.items()}
    params = rng.uniform(-1, 1, n).astype(np.float32)
    mask = (rng.uniform(0, 1, n) < 0.7).astype(np.float32)
    lrs = (cfg["lr"] * rng.uniform(0.3, 1.5, steps)).astype(np.float32)
    # gradients of mixed magnitudes (1e-3 .. 1), fresh each step
    scale = np.exp(rng.uniform(np.log(1e-3), 0, n)).astype(np.float32)
    grads = (rng.standard_normal((steps, n)).astype(np.float32) * scale).astype(np.float32)
    fin = os.path.join(tmp, name + ".in")
    fout = os.path.join(tmp, name + ".out")
    with open(fin, "wb") as f:
        for a in (params, mask, lrs, grads):
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    run(drv, ["optim", kind, repr(cfg["lr"]), repr(cfg["wd"]), repr(cfg["momentum"]),
              repr(cfg["dampening"]), cfg["nesterov"], repr(cfg["beta1"]), repr(cfg["beta2"]),
              repr(cfg["eps"]), n, steps, fin, fout])
    got = np.fromfile(fout, dtype="<f4")

    on = mask != 0
    idx = [np.nonzero(on)[0], np.nonzero(~on)[0]]
    tp = [torch.nn.Parameter(torch.from_numpy(params[i].copy())) for i in idx]
    groups = [{"params": [tp[0]], "weight_decay": cfg["wd"]},
              {"params": [tp[1]], "weight_decay": 0.0}]
    opt = torch_optimizer(kind, groups, cfg)
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = float(lrs[s])
        for t, i in zip(tp, idx):
            t.grad = torch.from_numpy(grads[s][i].copy())
        opt.step()

    def gather(tensors):
        out = np.empty(n, dtype=np.float32)
        for t, i in zip(tensors, idx):
            out[i] = t.detach().numpy()
        return out

    want = [gather(tp)]
    names = ["params"]
    if kind == "sgd" and cfg["momentum"] != 0:
        want.append(gather([opt.state[t]["momentum_buffer"] for t in tp]))
        names.append("momentum_buffer")
    elif kind != "sgd":
        want.append(gather([opt.state[t]["exp_avg"] for t in tp]))
        want.append(gather([opt.state[t]["exp_avg_sq"] for t in tp]))
        names += ["exp_avg", "exp_avg_sq"]
    check(got.size == n * len(want), "%s: driver wrote %d floats, want %d" % (name, got.size, n * len(want)))
    if got.size != n * len(want):
        return
    for k, (nm, w) in enumerate(zip(names, want)):
        g = got[k * n:(k + 1) * n]
        # floor: parameters are O(1); moments are compared relative to their own scale
        floor = 1e-2 if nm == "params" else max(float(np.max(np.abs(w))) * 1e-3, 1e-30)
        r = max_rel(g, w, floor)
        exact = float(np.mean(g.view(np.uint32) == w.view(np.uint32)))
        check(r <= REL, "%s %s: max rel diff %.3g > %g" % (name, nm, r, REL))
        print("%-22s %-16s max rel %.2e  bit-identical %.1f%%" % (name, nm, r, 100 * exact))
    # the run must have moved the parameters (a no-op optimizer would fail above, but say so)
    check(float(np.max(np.abs(want[0] - params))) > 0, name + ": torch did not move the parameters")


def clip_case(drv, tmp, rng, name, sizes, max_norm, bad=None):
    parts = [(rng.standard_normal(s) * rng.uniform(0.1, 2)).astype(np.float32) for s in sizes]
    flat = np.concatenate(parts)
    if bad is not None:
        flat[rng.integers(0, flat.size)] = bad
        parts = np.split(flat, np.cumsum(sizes)[:-1])
    n = flat.size
    fin = os.path.join(tmp, name + ".in")
    fout = os.path.join(tmp, name + ".out")
    flat.astype("<f4").tofile(fin)
    run(drv, ["clip", repr(f32(max_norm)), n, fin, fout])
    got = np.fromfile(fout, dtype="<f4")
    norm, g = float(got[0]), got[1:]
    tp = [torch.nn.Parameter(torch.zeros(s)) for s in sizes]
    for t, p in zip(tp, parts):
        t.grad = torch.from_numpy(np.array(p, dtype=np.float32))
    tnorm = float(torch.nn.utils.clip_grad_norm_(tp, f32(max_norm)))
    if bad is not None:
        # ours: non-finite norm returned as is, gradients untouched (torch would scale them)
        check(np.isnan(norm) if np.isnan(bad) else norm == np.inf, "%s: norm %r, want %r" % (name, norm, bad))
        check(np.array_equal(g.view(np.uint32), flat.view(np.uint32)), name + ": gradients were changed")
        print("%-22s norm %r, gradients untouched" % (name, norm))
        return
    tg = np.concatenate([t.grad.numpy() for t in tp])
    # Our norm is accumulated in double; torch's float32 reduction over ~1e5 values is itself
    # off by ~1e-6. So: the exact (float64) norm at 1e-6, torch's norm and its clipped
    # gradients (whose coefficient carries torch's norm error) at 1e-5.
    exact = float(np.sqrt(np.sum(flat.astype(np.float64) ** 2)))
    rx = abs(norm - exact) / exact
    rn = abs(norm - tnorm) / tnorm
    rg = max_rel(g, tg, 1e-3 * float(np.max(np.abs(tg))))
    check(rx <= REL, "%s: norm %.9g vs exact %.9g (rel %.3g)" % (name, norm, exact, rx))
    check(rn <= 10 * REL, "%s: norm %.9g vs torch %.9g (rel %.3g)" % (name, norm, tnorm, rn))
    check(rg <= 10 * REL, "%s: clipped gradients max rel diff %.3g" % (name, rg))
    clipped = tnorm > max_norm
    check(clipped == (not np.array_equal(g, flat)), name + ": clipping happened iff norm > max_norm")
    print("%-22s norm %.6g (torch %.6g) max_norm %.4g clipped=%s grads max rel %.2e"
          % (name, norm, tnorm, max_norm, clipped, rg))


def sched_case(drv, tmp, name, kind, base, warmup, start, total, min_lr, step_size, gamma, nsteps):
    fout = os.path.join(tmp, name + ".out")
    base, start, min_lr, gamma = f32(base), f32(start), f32(min_lr), f32(gamma)
    run(drv, ["sched", kind, repr(base), warmup, repr(start), total, repr(min_lr), step_size,
              repr(gamma), nsteps, fout])
    got = np.fromfile(fout, dtype="<f4").astype(np.float64)
    p = [torch.nn.Parameter(torch.zeros(1))]
    opt = torch.optim.SGD(p, lr=base)
    if kind == "cosine":
        main = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
    elif kind == "step":
        main = torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=gamma)
    else:
        main = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0)
    if warmup > 0:
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=start, end_factor=1.0, total_iters=warmup)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, main], milestones=[warmup])
    else:
        sched = main
    want = []
    for _ in range(nsteps):
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    want = np.array(want)
    # torch's cosine restarts after T_max; ours stays at min_lr: compare up to total steps
    m = min(nsteps, total + 1) if kind == "cosine" else nsteps
    r = max_rel(got[:m], want[:m], 1e-3 * base)
    check(r <= REL, "%s: lr max rel diff %.3g vs torch" % (name, r))
    if kind == "cosine" and nsteps > total + 1:
        check(np.all(got[total:] == np.float32(min_lr)), name + ": lr after total steps must stay at min_lr")
    print("%-22s %d steps, max rel %.2e vs torch" % (name, nsteps, r))


def main():
    if len(sys.argv) != 2:
        print("usage: oracle_optim.py <build_dir>", file=sys.stderr)
        return 2
    drv = driver_path(sys.argv[1])
    env = os.environ.get("SNN_TEST_SEED")
    seed = int(env) if env else int.from_bytes(os.urandom(4), "little")
    print("test seed: SNN_TEST_SEED=%d" % seed, file=sys.stderr)
    rng = np.random.default_rng(seed)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        n = 1000 + int(rng.integers(1, 8))  # not a multiple of the vector width
        steps = 20
        optim_case(drv, tmp, rng, "sgd_plain", "sgd", n, steps, lr=0.05)
        optim_case(drv, tmp, rng, "sgd_momentum", "sgd", n, steps, lr=0.05, momentum=0.9)
        optim_case(drv, tmp, rng, "sgd_nesterov_wd", "sgd", n, steps, lr=0.05, momentum=0.9, nesterov=1, wd=0.01)
        optim_case(drv, tmp, rng, "sgd_damp_wd", "sgd", n, steps, lr=0.02, momentum=0.8, dampening=0.1, wd=0.05)
        optim_case(drv, tmp, rng, "sgd_wd_nomom", "sgd", n, steps, lr=0.05, wd=0.1)
        optim_case(drv, tmp, rng, "adam", "adam", n, steps, lr=1e-3)
        optim_case(drv, tmp, rng, "adam_wd", "adam", n, steps, lr=2e-3, wd=0.01, beta1=0.8, beta2=0.99)
        optim_case(drv, tmp, rng, "adamw", "adamw", n, steps, lr=1e-3, wd=0.01)
        optim_case(drv, tmp, rng, "adamw_big_wd", "adamw", n, steps, lr=3e-3, wd=0.2, eps=1e-6)
        # large enough for the OpenMP path (>= 32768 elements)
        big = 70000 + int(rng.integers(1, 16))
        optim_case(drv, tmp, rng, "adamw_large", "adamw", big, 5, lr=1e-3, wd=0.05)
        optim_case(drv, tmp, rng, "sgd_nesterov_large", "sgd", big, 5, lr=0.05, momentum=0.9, nesterov=1, wd=1e-3)

        clip_case(drv, tmp, rng, "clip_scaled", [300, 1000, 17], 1.0)
        clip_case(drv, tmp, rng, "clip_untouched", [300, 1000, 17], 1e4)
        clip_case(drv, tmp, rng, "clip_large", [100000, 33333], 5.0)
        clip_case(drv, tmp, rng, "clip_inf", [300, 1000], 1.0, bad=np.inf)
        clip_case(drv, tmp, rng, "clip_nan", [300, 1000], 1.0, bad=np.nan)

        sched_case(drv, tmp, "cosine_warmup", "cosine", 0.1, 5, 0.1, 60, 1e-4, 0, 0.0, 70)
        sched_case(drv, tmp, "cosine_nowarmup", "cosine", 3e-3, 0, 0.0, 100, 0.0, 0, 0.0, 101)
        sched_case(drv, tmp, "step_warmup", "step", 0.05, 3, 0.25, 0, 0.0, 7, 0.5, 40)
        sched_case(drv, tmp, "step_nowarmup", "step", 0.1, 0, 0.0, 0, 0.0, 10, 0.1, 35)
        sched_case(drv, tmp, "constant_warmup", "constant", 2e-3, 10, 0.01, 0, 0.0, 0, 0.0, 25)
    print("oracle_optim: %d checks, %d failures" % (checks, failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
