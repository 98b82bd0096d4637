#!/usr/bin/env python3
"""Oracle test for the FP16 / BF16 conversions: implementations we did not write.

NumPy's float32 -> float16 cast (round to nearest even, overflow to inf) and PyTorch's
float32 -> bfloat16 cast (round to nearest even) are the references for ~1.1M FP32 values:
random bit patterns, log-uniform magnitudes, every midpoint between neighbouring F16 and
BF16 values with the FP32 values on either side, and specials. build/driver_dtype converts
the same file with snn_convert. Also checked: the saturating mode (reference: clip to
+-max, then cast), and widening of all 65536 codes of each format.

usage: oracle_dtype.py <build_dir>     (SNN_TEST_SEED=<n> replays a run)
"""
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError:
    # The first python3 on PATH may be a separate interpreter without Debian's
    # python3-numpy / python3-torch; the system one has them.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and not os.environ.get("SNN_ORACLE_REEXEC"):
        os.environ["SNN_ORACLE_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("oracle_dtype: needs numpy and torch (Debian: python3-numpy python3-torch)", file=sys.stderr)
    sys.exit(1)


def run_driver(build, args):
    drv = os.path.join(build, "driver_dtype")
    r = subprocess.run([drv] + args, capture_output=True, text=True)
    if r.returncode != 0:
        print("driver failed:", r.stderr, file=sys.stderr)
        sys.exit(1)


def grid_points(pos_values, next_value):
    """Midpoints of consecutive positive finite values (and the one above max), with
    the neighbouring FP32 values, both signs."""
    v = np.append(pos_values.astype(np.float64), next_value)
    mids = ((v[:-1] + v[1:]) * 0.5).astype(np.float32)
    assert np.all(mids.astype(np.float64) == (v[:-1] + v[1:]) * 0.5)
    pts = np.concatenate([mids, np.nextafter(mids, np.float32(0)),
                          np.nextafter(mids, np.float32(np.inf)), pos_values.astype(np.float32)])
    return np.concatenate([pts, -pts])


def main():
    build = sys.argv[1]
    seed = int(os.environ.get("SNN_TEST_SEED", str(int(time.time() * 1000) % (1 << 31))))
    print(f"test seed: SNN_TEST_SEED={seed}", file=sys.stderr)
    rng = np.random.default_rng(seed)

    f16_pos = np.arange(0x7C00, dtype=np.uint16).view(np.float16)
    bf16_pos = torch.from_numpy(np.arange(0x7F80, dtype=np.uint16).view(np.int16)).view(torch.bfloat16).float().numpy()
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.996, 65520, 65536,
                         3.3895314e38, 3.39e38, 3.4e38, np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                         1e-45, 2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -133, 2.0 ** -134],
                        dtype=np.float32)
    sig_nan = np.array([0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FC00000, 0xFFFFFFFF], dtype=np.uint32).view(np.float32)
    x = np.concatenate([
        rng.integers(0, 1 << 32, size=300000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        (np.exp2(rng.uniform(-28, 18, size=300000)) * rng.choice([-1.0, 1.0], size=300000)).astype(np.float32),
        (np.exp2(rng.uniform(-149, 128, size=100000)) * rng.choice([-1.0, 1.0], size=100000)).astype(np.float32),
        grid_points(f16_pos.astype(np.float32), 65536.0),
        grid_points(bf16_pos, 2.0 ** 128),
        specials, sig_nan,
    ]).astype(np.float32)
    nan_in = np.isnan(x)
    failures = 0

    def compare(name, got, want, is_nan_code):
        nonlocal failures
        bad = np.where(nan_in, ~is_nan_code(got), got != want)
        nb = int(bad.sum())
        print(f"{name}: {len(x)} values, {nb} differ", file=sys.stderr)
        for i in np.flatnonzero(bad)[:10]:
            print(f"  x={float(x[i])!r} (0x{x.view(np.uint32)[i]:08x}): snn 0x{got[i]:04x} ref 0x{want[i]:04x}",
                  file=sys.stderr)
        failures += nb

    f16_nan = lambda c: ((c & 0x7C00) == 0x7C00) & ((c & 0x03FF) != 0)
    bf16_nan = lambda c: ((c & 0x7F80) == 0x7F80) & ((c & 0x007F) != 0)
    f16_max = np.float32(65504.0)
    bf16_max = np.float32(bf16_pos[-1])

    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.f32"), os.path.join(d, "out.bin")
        x.tofile(inp)
        with np.errstate(all="ignore"):
            for sat in (0, 1):
                xr = np.clip(x, -f16_max, f16_max) if sat else x
                run_driver(build, ["narrow", "f16", str(sat), inp, out])
                compare(f"f16 sat={sat} vs numpy", np.fromfile(out, dtype=np.uint16),
                        xr.astype(np.float16).view(np.uint16), f16_nan)
                xr = np.clip(x, -bf16_max, bf16_max) if sat else x
                run_driver(build, ["narrow", "bf16", str(sat), inp, out])
                ref = torch.from_numpy(xr.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
                compare(f"bf16 sat={sat} vs torch", np.fromfile(out, dtype=np.uint16), ref, bf16_nan)

        # Widening, every code.
        codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        codes.tofile(inp)
        refs = {"f16": codes.view(np.float16).astype(np.float32),
                "bf16": torch.from_numpy(codes.view(np.int16).copy()).view(torch.bfloat16).float().numpy()}
        for name, ref in refs.items():
            run_driver(build, ["widen", name, inp, out])
            got = np.fromfile(out, dtype=np.float32)
            bad = np.where(np.isnan(ref), ~np.isnan(got), got.view(np.uint32) != ref.view(np.uint32))
            print(f"{name} widen: 65536 codes, {int(bad.sum())} differ", file=sys.stderr)
            failures += int(bad.sum())

    print("oracle_dtype:", "PASS" if failures == 0 else f"FAIL ({failures})", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
