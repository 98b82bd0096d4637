"""Oracle test: the FP8 GEMM path of a converted module against an independent reference.

Usage: python3 tests/oracle_precision.py <build_dir>   (exit 0 = pass)

tests/driver_precision.c prepares a model whose root is one Linear (or pointwise Conv1d)
for mode fp8, loads X, W, b and dY from a file, runs one training forward and the backward
(with dX) and writes Y, dX, dW, db. Here the same numbers are computed from the formulas
of fp8.md, written independently of the C code:

  * the E4M3 (fn) and E5M2 value tables come from the bit layouts (sign, 4/5-bit exponent
    with bias 7/15, 3/2-bit mantissa, subnormals at exponent 0; E4M3 S.1111.111 is NaN,
    E5M2 exponent 31 is inf/NaN);
  * quantise (§2.1): the FP32 product x*s, saturated to +-max (SATFINITE), rounded to the
    nearest table value, ties to the even code; dequantise x_hat = q * (1/s) with
    1/s the FP32 reciprocal;
  * current scaling (§2.2): s = fp8_max / amax as an FP32 division (amax 0 -> 1, an
    infinite quotient -> FLT_MAX), E4M3 (448) for X and W, E5M2 (57344) for dY (TE's
    hybrid format); delayed scaling before its first update quantises with s = 1;
  * the GEMMs in float64: Y = X_hat W_hat^T + b, dX = dY_hat W_hat, dW = dY_hat^T X_hat,
    db = sum of the unquantised dY; Y and dX are then rounded to bfloat16 by torch (the fp8
    mode's BF16 base), dW and db stay FP32.
Y and dX must equal the torch-rounded reference except where the FP32 accumulation lands
on the other side of a bf16 rounding boundary (at most 2 % of the elements; those within
one bf16 ulp plus the FP32 accumulation bound n 2^-24 sum|terms|); dW and db agree to 1e-5
relative to the sum of |terms|.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != "/usr/bin/python3" \
            and not os.environ.get("SNN_ORACLE_REEXEC"):
        os.environ["SNN_ORACLE_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("oracle_precision: PyTorch and NumPy are needed (python3-torch)", file=sys.stderr)
    sys.exit(1)

failures = 0
checks = 0


def check(ok, msg):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL: " + msg, file=sys.stderr)


# ---------- FP8 formats from their bit layouts ----------

def fp8_positive_table(exp_bits, man_bits, fn):
    """Values of the positive codes 0 .. (all finite, increasing with the code)."""
    bias = (1 << (exp_bits - 1)) - 1
    vals = []
    for code in range(1 << (exp_bits + man_bits)):
        e = code >> man_bits
        m = code & ((1 << man_bits) - 1)
        if fn and e == (1 << exp_bits) - 1 and m == (1 << man_bits) - 1:
            break  # E4M3fn: S.1111.111 is NaN, the only special value
        if not fn and e == (1 << exp_bits) - 1:
            break  # E5M2: exponent all ones is inf / NaN
        if e == 0:
            v = (m / (1 << man_bits)) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        vals.append(v)
    return np.array(vals, dtype=np.float64)


E4M3 = fp8_positive_table(4, 3, True)
E5M2 = fp8_positive_table(5, 2, False)
assert E4M3[-1] == 448.0 and len(E4M3) == 127, E4M3[-1]
assert E5M2[-1] == 57344.0 and len(E5M2) == 124, E5M2[-1]


def round_to_table(v, table):
    """Round float64 values to the nearest table value, ties to the even code, saturating."""
    a = np.minimum(np.abs(v), table[-1])
    hi = np.clip(np.searchsorted(table, a, side="left"), 0, len(table) - 1)
    lo = np.maximum(hi - 1, 0)
    dlo = a - table[lo]
    dhi = table[hi] - a
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    idx = np.where(pick_hi, hi, lo)
    return np.sign(v) * table[idx]


def qdq(x, table, recipe):
    """Quantise -> dequantise one tensor with a per-tensor scale (float64 result)."""
    x32 = np.asarray(x, dtype=np.float32)
    fmax = np.float32(table[-1])
    if recipe == "current":
        amax = np.float32(np.max(np.abs(x32)))
        if amax == 0 or not np.isfinite(amax):
            s = np.float32(1)
        else:
            with np.errstate(over="ignore"):
                s = np.float32(fmax / amax)  # FP32 division, round to nearest
            if np.isinf(s):
                s = np.float32(np.finfo(np.float32).max)
    else:  # delayed, before its first update
        s = np.float32(1)
    scaled = (x32 * s).astype(np.float32)  # FP32 multiply
    q = round_to_table(scaled.astype(np.float64), table)
    d = np.float32(1) / s
    return q * np.float64(d)


def bf16(v):
    return torch.tensor(np.asarray(v, dtype=np.float64)).to(torch.float32).to(torch.bfloat16).to(torch.float64).numpy()


def bf16_ulp(v):
    a = np.maximum(np.abs(v), 2.0 ** -126)
    return 2.0 ** (np.floor(np.log2(a)) - 7)


# ---------- one case ----------

def run_case(build, name, kind, recipe, X, W, b, dY):
    B = X.shape[0]
    O, K = W.shape
    L = X.shape[2] if kind == "conv1d" else 1
    with tempfile.TemporaryDirectory() as d:
        fin, fout = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
        np.concatenate([a.astype(np.float32).ravel() for a in (X, W, b, dY)]).tofile(fin)
        r = subprocess.run([os.path.join(build, "driver_precision"), kind, recipe, str(B), str(K), str(O), str(L),
                            fin, fout], capture_output=True, text=True)
        check(r.returncode == 0, "%s: driver failed: %s" % (name, r.stderr.strip()))
        if r.returncode != 0:
            return
        out = np.fromfile(fout, dtype=np.float32).astype(np.float64)
    ny, nx = B * O * L, B * K * L
    Y, dX, dW, db = out[:ny], out[ny:ny + nx], out[ny + nx:ny + nx + O * K], out[ny + nx + O * K:]
    # token-major operands: rows of K (a Conv1d sample [K, L] is L rows)
    Xt = X.transpose(0, 2, 1).reshape(-1, K) if kind == "conv1d" else X
    dYt = dY.transpose(0, 2, 1).reshape(-1, O) if kind == "conv1d" else dY
    Xq, Wq, dYq = qdq(Xt, E4M3, recipe), qdq(W, E4M3, recipe), qdq(dYt, E5M2, recipe)
    Yr = Xq @ Wq.T + b.astype(np.float64)
    dXr = dYq @ Wq
    dWr = dYq.T @ Xq
    dWabs = np.abs(dYq).T @ np.abs(Xq)
    dbr = dYt.astype(np.float64).sum(axis=0)
    dbabs = np.abs(dYt.astype(np.float64)).sum(axis=0)
    if kind == "conv1d":
        Yr = Yr.reshape(B, L, O).transpose(0, 2, 1)
        dXr = dXr.reshape(B, L, K).transpose(0, 2, 1)
    # sums of |terms|: an FP32 accumulation of n terms is within n * 2^-24 of them
    Yabs = np.abs(Xq) @ np.abs(Wq).T + np.abs(b.astype(np.float64))
    dXabs = np.abs(dYq) @ np.abs(Wq)
    if kind == "conv1d":
        Yabs = Yabs.reshape(B, L, O).transpose(0, 2, 1)
        dXabs = dXabs.reshape(B, L, K).transpose(0, 2, 1)
    for what, got, ref, absum, n in (("Y", Y, Yr.ravel(), Yabs.ravel(), K + 1), ("dX", dX, dXr.ravel(), dXabs.ravel(), O)):
        want = bf16(ref)
        exact = np.mean(got == want)
        within = np.all(np.abs(got - ref) <= bf16_ulp(ref) + n * 2.0 ** -24 * absum)
        isbf = np.all(bf16(got) == got)
        check(np.all(np.isfinite(got)) and within and isbf and exact >= 0.98,
              "%s %s: %.2f%% equal to the bf16-rounded reference, all within 1 ulp: %s, all bf16: %s, "
              "max |diff| %.3g" % (name, what, 100 * exact, within, isbf, np.max(np.abs(got - want))))
        print("%-22s %-2s: %6.2f%% bit-equal to torch's bf16 rounding of the float64 reference" % (name, what, 100 * exact))
    err_w = np.max(np.abs(dW - dWr.ravel()) / np.maximum(dWabs.ravel(), 1e-30))
    err_b = np.max(np.abs(db - dbr) / np.maximum(dbabs, 1e-30))
    check(err_w <= 1e-5 and err_b <= 1e-5, "%s: dW rel %.3g, db rel %.3g (<= 1e-5)" % (name, err_w, err_b))
    print("%-22s dW rel %.2e, db rel %.2e (<= 1e-5)" % (name, err_w, err_b))


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build = sys.argv[1]
    seed = int(os.environ.get("SNN_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
    print("test seed: SNN_TEST_SEED=%d" % seed, file=sys.stderr)
    rng = np.random.default_rng(seed)

    def f32(a):
        return np.asarray(a, dtype=np.float32)

    # Linear, current scaling, values over many binades (subnormals after scaling too)
    B, K, O = 24, 64, 32
    X = f32(rng.standard_normal((B, K)) * np.exp(rng.uniform(-6, 3, (B, K))))
    W = f32(rng.uniform(-0.2, 0.2, (O, K)))
    b = f32(rng.uniform(-1, 1, O))
    dY = f32(rng.standard_normal((B, O)) * 1e-3)
    run_case(build, "linear/current", "linear", "current", X, W, b, dY)

    # Ties and saturation: amax 448 (E4M3) / 57344 (E5M2) makes s = 1 exactly, so the
    # values below sit exactly half-way between two FP8 neighbours.
    e4_ties = [1.0625, 1.1875, 17.0, 19.0, 2.0 ** -10, 3 * 2.0 ** -10, 232.0, 0.0]
    e5_ties = [1.125, 1.375, 2.0 ** -17, 3 * 2.0 ** -17, 18432.0, 0.0]
    X = f32(rng.choice(e4_ties, (B, K)) * rng.choice([-1, 1], (B, K)))
    X[0, 0] = 448
    W = f32(rng.choice(e4_ties, (O, K)) * rng.choice([-1, 1], (O, K)) / 64)
    W[3, 5] = -448 / 64  # amax 7: scale 64, an exact power of two, keeps the ties
    dY = f32(rng.choice(e5_ties, (B, O)) * rng.choice([-1, 1], (B, O)))
    dY[1, 2] = 57344
    run_case(build, "linear/current/ties", "linear", "current", X, W, b, dY)

    # Delayed scaling before its first update: s = 1, so values beyond 448 saturate and
    # small ones fall into the subnormals
    X = f32(rng.uniform(-600, 600, (B, K)) * (rng.uniform(0, 1, (B, K)) < 0.1) + rng.standard_normal((B, K)) * 0.01)
    W = f32(rng.uniform(-0.1, 0.1, (O, K)))
    dY = f32(rng.standard_normal((B, O)) * 1e-4)
    run_case(build, "linear/delayed/step0", "linear", "delayed", X, W, b, dY)

    # pointwise Conv1d: [B, C, L] is transposed to token rows and back
    B, C, O, L = 3, 32, 16, 10
    X = f32(rng.standard_normal((B, C, L)) * 2)
    W = f32(rng.uniform(-0.3, 0.3, (O, C)))
    b = f32(rng.uniform(-1, 1, O))
    dY = f32(rng.standard_normal((B, O, L)) * 0.01)
    run_case(build, "conv1d/current", "conv1d", "current", X, W, b, dY)

    print("oracle_precision: %d checks, %d failures" % (checks, failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
