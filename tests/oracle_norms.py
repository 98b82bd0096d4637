"""PyTorch oracle for BatchNorm, LayerNorm, the two losses and the softmax helpers.

Runs build/driver_norms on fresh random inputs of odd sizes and compares with PyTorch
computed in float64 from the same float32 inputs:
  F.batch_norm (training: output, running-stat update, backward; then eval with the
  updated statistics), F.layer_norm, F.cross_entropy(logits.mean(0), labels),
  F.mse_loss(out.mean(0), one_hot(labels)), softmax / log_softmax.
Usage: python3 tests/oracle_norms.py <build_dir>; exit 0 = pass.
Replay a run with SNN_TEST_SEED=<seed>."""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    # CMake may have found a Python without PyTorch (e.g. a pyenv shim); the system one has it.
    syspy = "/usr/bin/python3"
    if os.path.exists(syspy) and os.path.realpath(sys.executable) != os.path.realpath(syspy):
        os.execv(syspy, [syspy] + sys.argv)
    print("oracle_norms: PyTorch and NumPy are needed (python3-torch)", file=sys.stderr)
    sys.exit(1)

REL = 1e-5        # relative tolerance
FLOOR = 1e-2      # ... of max(|value|, FLOOR * max|tensor|): entries that cancel to ~0
failures = 0
worst = 0.0


def check(name, got, want, scale=None):
    """scale: the magnitude of the terms `want` is a difference of, where it cancels (the
    input gradient of a norm in training); by default the tensor's own max."""
    global failures, worst
    got = np.asarray(got, dtype=np.float64).ravel()
    want = np.asarray(want, dtype=np.float64).ravel()
    if got.shape != want.shape:
        print(f"FAIL {name}: {got.shape} values, expected {want.shape}")
        failures += 1
        return
    if scale is None:
        scale = np.abs(want).max(initial=0.0)
    scale = max(scale, 1e-30)
    denom = np.maximum(np.abs(want), FLOOR * scale)
    err = np.abs(got - want) / denom
    err[np.isnan(got) | np.isnan(want)] = np.inf
    e = float(err.max(initial=0.0))
    worst = max(worst, e / REL)
    if not e <= REL:
        i = int(np.argmax(err))
        print(f"FAIL {name}: rel error {e:.3g} at {i}: got {got[i]:.9g} want {want[i]:.9g}")
        failures += 1


def run(build, args, inputs, out_count):
    with tempfile.TemporaryDirectory() as d:
        fi, fo = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
        with open(fi, "wb") as f:
            for a in inputs:
                f.write(np.ascontiguousarray(a).tobytes())
        exe = os.path.join(build, "driver_norms")
        p = subprocess.run([exe] + [str(a) for a in args] + [fi, fo], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"driver_norms {args} failed ({p.returncode}): {p.stderr}")
        out = np.fromfile(fo, dtype=np.float32)
    if out.size != out_count:
        raise RuntimeError(f"driver_norms {args}: {out.size} values, expected {out_count}")
    return out


def split(out, sizes):
    res, o = [], 0
    for s in sizes:
        res.append(out[o:o + s])
        o += s
    return res


def f32(rng, shape, lo, hi):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def t64(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def case_bn(build, rng, shape, T, N):
    C = shape[0]
    B = T * N
    eps = float(np.float32(10 ** rng.uniform(-5, -2)))
    mom = float(np.float32(rng.uniform(0.05, 0.5)))
    x = f32(rng, (B,) + shape, -2, 3) + f32(rng, (1, C) + (1,) * (len(shape) - 1), -2, 2)
    w, b = f32(rng, C, 0.5, 1.5), f32(rng, C, -1, 1)
    rm, rv = f32(rng, C, -1, 1), f32(rng, C, 0.5, 2)
    dy = f32(rng, (B,) + shape, -1, 1)
    dims = list(shape) + [1] * (3 - len(shape))
    n = x.size
    out = run(build, ["bn", len(shape)] + dims + [T, N, eps, mom], [x, w, b, rm, rv, dy],
              4 * n + 6 * C)
    y, rm2, rv2, dx, dw, db, ye, dxe, dwe, dbe = split(out, [n, C, C, n, C, C, n, n, C, C])
    tag = f"bn{list(shape)} T={T} N={N}"

    xt, wt, bt = t64(x).requires_grad_(), t64(w).requires_grad_(), t64(b).requires_grad_()
    rmt, rvt = t64(rm), t64(rv)
    yt = F.batch_norm(xt, rmt, rvt, wt, bt, training=True, momentum=mom, eps=eps)
    yt.backward(t64(dy))
    check(tag + " y", y, yt.detach())
    check(tag + " running_mean", rm2, rmt)
    check(tag + " running_var", rv2, rvt)
    # dx = w/std * (dy - mean(dy) - x_hat * mean(dy x_hat)) cancels when few values share
    # a channel (two values: dx ~ eps); measure it against the size of w/std * dy
    red = (0,) + tuple(range(2, x.ndim))
    var = t64(x).var(dim=red, unbiased=False)
    gain = (t64(w) / torch.sqrt(var + eps)).abs().max().item()
    check(tag + " dx", dx, xt.grad, scale=gain * np.abs(dy).max())
    check(tag + " dweight", dw, wt.grad)
    check(tag + " dbias", db, bt.grad)

    # eval with the statistics our training forward produced
    xt, wt, bt = t64(x).requires_grad_(), t64(w).requires_grad_(), t64(b).requires_grad_()
    yt = F.batch_norm(xt, t64(rm2), t64(rv2), wt, bt, training=False, eps=eps)
    yt.backward(t64(dy))
    check(tag + " eval y", ye, yt.detach())
    check(tag + " eval dx", dxe, xt.grad)
    check(tag + " eval dweight", dwe, wt.grad)
    check(tag + " eval dbias", dbe, bt.grad)


def case_ln(build, rng, shape, T, N):
    Fd = shape[-1]
    eps = float(np.float32(10 ** rng.uniform(-6, -3)))
    x = f32(rng, (T * N,) + shape, -2, 3) * f32(rng, (T * N,) + shape[:-1] + (1,), 0.2, 3)
    w, b = f32(rng, Fd, 0.5, 1.5), f32(rng, Fd, -1, 1)
    dy = f32(rng, x.shape, -1, 1)
    dims = list(shape) + [1] * (3 - len(shape))
    n = x.size
    out = run(build, ["ln", len(shape)] + dims + [T, N, eps], [x, w, b, dy], 2 * n + 2 * Fd)
    y, dx, dw, db = split(out, [n, n, Fd, Fd])
    tag = f"ln{list(shape)} T={T} N={N}"
    xt, wt, bt = t64(x).requires_grad_(), t64(w).requires_grad_(), t64(b).requires_grad_()
    yt = F.layer_norm(xt, (Fd,), wt, bt, eps)
    yt.backward(t64(dy))
    check(tag + " y", y, yt.detach())
    check(tag + " dx", dx, xt.grad)
    check(tag + " dweight", dw, wt.grad)
    check(tag + " dbias", db, bt.grad)


def case_loss(build, rng, kind, T, N, C):
    global failures
    if kind == "ce":
        x = f32(rng, (T, N, C), -5, 5)
    else:  # spikes: a firing-rate loss sees 0/1 outputs (ties included) or rates
        x = (rng.uniform(size=(T, N, C)) < 0.3).astype(np.float32)
        if rng.uniform() < 0.5:
            x = f32(rng, (T, N, C), 0, 1)
    lab = rng.integers(0, C, size=N).astype(np.int32)
    out = run(build, [kind, T, N, C], [x, lab], 2 + x.size)
    loss, g, correct = out[0], out[1:1 + x.size], out[-1]
    tag = f"{kind} T={T} N={N} C={C}"
    xt = t64(x).requires_grad_()
    m = xt.mean(0)
    lt = torch.from_numpy(lab.astype(np.int64))
    if kind == "ce":
        L = F.cross_entropy(m, lt)
    else:
        L = F.mse_loss(m, F.one_hot(lt, C).to(torch.float64))
    L.backward()
    check(tag + " loss", [loss], [L.item()])
    check(tag + " grad", g, xt.grad)
    want_correct = int((m.detach().argmax(1) == lt).sum())
    if int(correct) != want_correct:
        print(f"FAIL {tag} correct: got {int(correct)} want {want_correct}")
        failures += 1


def case_softmax(build, rng, R, K):
    x = f32(rng, (R, K), -20, 20)
    x[0, 0] = 95.0  # exp would overflow FP32 without the max shift
    for kind in ("softmax", "logsoftmax"):
        y = run(build, [kind, R, K], [x], x.size)
        ref = F.softmax(t64(x), 1) if kind == "softmax" else F.log_softmax(t64(x), 1)
        check(f"{kind} {R}x{K}", y, ref)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    seed = int(os.environ.get("SNN_TEST_SEED", int.from_bytes(os.urandom(6), "little")))
    print(f"oracle_norms: SNN_TEST_SEED={seed}")
    rng = np.random.default_rng(seed)
    odd = lambda lo, hi: int(rng.integers(lo, hi)) | 1
    # fixed layouts with random odd sizes, then random T/N
    for _ in range(2):
        T, N = int(rng.integers(1, 5)), odd(1, 6)
        case_bn(build, rng, (odd(1, 14),), max(T, 2), N)  # [C] needs T*N >= 2 in training
        case_bn(build, rng, (odd(1, 12), odd(2, 16)), T, N)
        case_bn(build, rng, (odd(1, 8), odd(1, 8), odd(2, 10)), T, N)
        case_ln(build, rng, (odd(2, 40),), T, N)
        case_ln(build, rng, (odd(1, 6), odd(2, 40)), T, N)
        case_ln(build, rng, (odd(1, 4), odd(1, 4), odd(2, 20)), T, N)
        case_loss(build, rng, "ce", T, N, odd(2, 20))
        case_loss(build, rng, "mse", T, N, odd(2, 20))
    case_bn(build, rng, (5,), 1, 2)          # two values per channel: unbiased = 2 * biased
    case_bn(build, rng, (3, 1, 1), 1, 3)
    case_bn(build, rng, (97, 33), 4, 16)     # large enough for the OpenMP path
    case_bn(build, rng, (301,), 8, 31)
    case_ln(build, rng, (64, 97), 4, 8)
    case_loss(build, rng, "ce", 1, 1, 2)
    case_loss(build, rng, "ce", 4, 37, 1000)
    case_loss(build, rng, "mse", 1, 3, 10)
    case_softmax(build, rng, 7, odd(2, 30))
    case_softmax(build, rng, 300, 257)
    print(f"oracle_norms: worst error {worst:.3f} of the tolerance; {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
