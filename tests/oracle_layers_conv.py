"""PyTorch oracle for Conv2d, Conv1d, MaxPool2d, AvgPool2d and GELU (forward and backward).

Runs build/driver_layers_conv on fresh random inputs of odd sizes (strides, padding,
several GEMM chunkings, all three engine strategies) and compares with torch.nn.functional (conv2d, conv1d,
max_pool2d, avg_pool2d with count_include_pad=True, gelu) computed in float64 from the
same float32 inputs, gradients by autograd with the same dy.
Criterion per tensor: |got - want| <= 1e-4 * max(|want|, 1e-2 * max|want|).
Usage: python3 tests/oracle_layers_conv.py <build_dir>; exit 0 = pass.
Replay a run with SNN_TEST_SEED=<seed>."""
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    # CMake may have found a Python without PyTorch (e.g. a pyenv shim); the system one has it.
    syspy = "/usr/bin/python3"
    if os.path.exists(syspy) and os.path.realpath(sys.executable) != os.path.realpath(syspy):
        os.execv(syspy, [syspy] + sys.argv)
    print("oracle_layers_conv: PyTorch and NumPy are needed (python3-torch)", file=sys.stderr)
    sys.exit(1)

REL = 1e-4
FLOOR = 1e-2
failures = 0
checks = 0


def check(name, got, want):
    global failures, checks
    checks += 1
    got = np.asarray(got, dtype=np.float64).ravel()
    want = np.asarray(want, dtype=np.float64).ravel()
    if got.shape != want.shape:
        print(f"FAIL {name}: {got.shape} values, expected {want.shape}")
        failures += 1
        return
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    err = np.abs(got - want) / np.maximum(np.abs(want), FLOOR * scale)
    err[np.isnan(got) | np.isnan(want)] = np.inf
    e = float(err.max(initial=0.0))
    if not e <= REL:
        i = int(np.argmax(err))
        print(f"FAIL {name}: rel error {e:.3g} at {i}: got {got[i]:.9g} want {want[i]:.9g}")
        failures += 1


def run(build, args, arrays, n_out):
    exe = os.path.join(build, "driver_layers_conv")
    with tempfile.TemporaryDirectory() as d:
        fi, fo = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
        with open(fi, "wb") as f:
            for a in arrays:
                f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
        r = subprocess.run([exe] + [str(v) for v in args] + [fi, fo], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"driver failed ({r.returncode}): {r.stderr.strip()}")
        out = np.fromfile(fo, dtype="<f4")
    if out.size != n_out:
        raise RuntimeError(f"driver wrote {out.size} floats, expected {n_out}")
    return out


def t64(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def conv_case(build, rng, dim, T, N, C, S, O, k, s, p, bias, chunk):
    """dim 2: S = (H, W); dim 1: S = (L,)."""
    B = T * N
    x = rng.uniform(-1, 1, (B, C) + S).astype(np.float32)
    w = rng.uniform(-0.5, 0.5, (O, C) + (k,) * dim).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, O).astype(np.float32) if bias else None
    xt, wt = t64(x, True), t64(w, True)
    bt = t64(b, True) if bias else None
    f = F.conv2d if dim == 2 else F.conv1d
    y = f(xt, wt, bt, stride=s, padding=p)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32)
    y.backward(t64(dy))
    arrays = [x, w] + ([b] if bias else []) + [dy]
    op = "conv2d" if dim == 2 else "conv1d"
    n = y.numel() + x.size + w.size + (O if bias else 0)
    for strategy in (0, 1, 2):  # automatic, batched, per-sample
        args = [op, T, N, C] + list(S) + [O, k, s, p, int(bias), chunk, strategy]
        out = run(build, args, arrays, n)
        name = f"{op} T{T} N{N} C{C} {S} O{O} k{k} s{s} p{p} bias{int(bias)} chunk{chunk} strategy{strategy}"
        o = 0
        for label, want in (("y", y.detach()), ("dx", xt.grad), ("dweight", wt.grad)) + (
                (("dbias", bt.grad),) if bias else ()):
            cnt = want.numel()
            check(f"{name}: {label}", out[o:o + cnt], want.numpy())
            o += cnt


def pool_case(build, rng, kind, T, N, C, H, W, k, s, p):
    B = T * N
    # distinct values (a shuffled grid): no ties, so the argmax is unambiguous
    x = (rng.permutation(B * C * H * W).astype(np.float32) * 0.01 - B * C * H * W * 0.005)
    x = x.reshape(B, C, H, W)
    xt = t64(x, True)
    stride = s if s else k
    if kind == "maxpool2d":
        y = F.max_pool2d(xt, k, stride, p)
    else:
        y = F.avg_pool2d(xt, k, stride, p, count_include_pad=True)
    dy = rng.uniform(-1, 1, tuple(y.shape)).astype(np.float32)
    y.backward(t64(dy))
    out = run(build, [kind, T, N, C, H, W, k, s, p], [x, dy], y.numel() + x.size)
    name = f"{kind} T{T} N{N} [{C},{H},{W}] k{k} s{s} p{p}"
    check(f"{name}: y", out[:y.numel()], y.detach().numpy())
    check(f"{name}: dx", out[y.numel():], xt.grad.numpy())


def gelu_case(build, rng, T, N, n):
    x = rng.uniform(-4, 4, (T * N, n)).astype(np.float32)
    xt = t64(x, True)
    y = F.gelu(xt)
    dy = rng.uniform(-1, 1, x.shape).astype(np.float32)
    y.backward(t64(dy))
    out = run(build, ["gelu", T, N, n], [x, dy], 2 * x.size)
    check("gelu: y", out[:x.size], y.detach().numpy())
    check("gelu: dx", out[x.size:], xt.grad.numpy())


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    build = sys.argv[1]
    seed = int(os.environ.get("SNN_TEST_SEED", str(int(time.time() * 1000) % (2**31))))
    print(f"oracle_layers_conv: SNN_TEST_SEED={seed}")
    rng = np.random.default_rng(seed)
    # dim, T, N, C, spatial, O, k, s, p, bias, chunk
    conv = [
        (2, 2, 3, 3, (5, 7), 4, 3, 2, 1, True, 0),
        (2, 1, 4, 2, (9, 6), 5, 3, 1, 1, False, 0),
        (2, 2, 2, 4, (8, 8), 6, 1, 1, 0, True, 3),
        (2, 3, 2, 2, (7, 7), 3, 5, 2, 2, True, 1),
        (2, 1, 3, 3, (6, 5), 2, 2, 3, 0, True, 2),
        (2, 1, 5, 16, (14, 14), 32, 3, 1, 1, False, 2),
        (2, 2, 9, 3, (12, 12), 8, 3, 1, 1, True, 0),
        (2, 3, 7, 2, (16, 11), 6, 3, 1, 1, True, 5),
        (1, 2, 3, 3, (11,), 4, 3, 2, 1, True, 0),
        (1, 2, 3, 8, (10,), 16, 1, 1, 0, True, 0),
        (1, 1, 4, 24, (9,), 16, 1, 1, 0, False, 0),
        (1, 1, 2, 3, (9,), 2, 4, 3, 0, False, 1),
        (1, 2, 5, 48, (150,), 40, 1, 1, 0, True, 0),
        (1, 3, 3, 32, (20,), 24, 1, 1, 0, False, 4),
    ]
    for c in conv:
        conv_case(build, rng, *c)
    pools = [(2, 3, 3, 7, 9, 3, 2, 1), (1, 2, 2, 8, 8, 2, 2, 0), (2, 2, 3, 5, 7, 3, 1, 1),
             (1, 3, 2, 6, 7, 2, 0, 0), (1, 2, 4, 9, 9, 3, 3, 1)]
    for kind in ("maxpool2d", "avgpool2d"):
        for pc in pools:
            pool_case(build, rng, kind, *pc)
    gelu_case(build, rng, 2, 3, 37)
    print(f"oracle_layers_conv: {checks} checks, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
