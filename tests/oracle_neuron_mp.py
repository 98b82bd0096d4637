#!/usr/bin/env python3
"""Oracle test for the mixed-precision neuron kernels (snn_neuron_forward_mp /
snn_neuron_backward_mp): PyTorch is the reference for the rounding rule.

The rule (include/snn/neuron.h, docs/neurons.md "Neuron precision") is written below
with torch ops on float32 tensors and an explicit `.to(dtype).to(float32)` after each
operation: x and v0 are rounded to the storage dtype S, then read in the forward dtype F;
every charge / reset result is rounded to F; the spike test h - V_th is FP32; h_seq and
v_last are stored rounded to S; the membrane is not re-rounded to S between steps. The
backward reads the stored h, evaluates the surrogate in FP32 (here: float64, rounded to
float32) and rounds it to the backward dtype B, and rounds every result of the BPTT
recurrence to B; the PLIF k-gradient partials per element are kept in B (FP16/BF16) or
in float64 (FP32). Rounding is torch's own float32 -> bfloat16/float16 conversion (round
to nearest even), independent of snn's dtype code.

Cases: every (S, F, B) in {bf16, fp16, fp32}^3, several random neuron configurations each
(IF/LIF/PLIF, hard/soft reset, detach, decay_input, all 7 surrogates, random tau, V_th,
v_reset (not representable in 16 bits: the constants' rounding is exercised), with and
without v0 and upstream gradients).

Checks:
  forward: spikes, h_seq and v_last bit-identical (the forward has no transcendental
    function, so both sides round the same exact values); k agrees to 1 ulp;
  backward: the surrogate differs by a few FP32 ulps (snn's exp is its own), which can
    flip one B-rounding now and then, and the flip propagates through the carry. Per
    tensor: max |c - r| <= tol(B) * max |r|, tol = 2e-5 (fp32), 4e-3 (fp16), 3e-2 (bf16);
    with B = fp16/bf16 at least 98% of dL/dx and dL/dv0 bit-identical; PLIF dL/dk within
    tol(B) of the sum of |terms| (a sum of both signs).
  A control: the same cases evaluated with every dtype FP32 must differ from the
    mixed-precision results somewhere when S, F or B is 16-bit (the rounding is real).

usage: oracle_neuron_mp.py <build_dir>     (SNN_TEST_SEED=<n> replays a run)
"""
import math
import os
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError:
    _sys_py = "/usr/bin/python3"
    if os.path.exists(_sys_py) and os.path.realpath(sys.executable) != os.path.realpath(_sys_py):
        os.execv(_sys_py, [_sys_py] + sys.argv)
    print("oracle_neuron_mp: needs NumPy and PyTorch (Debian: python3-numpy python3-torch)", file=sys.stderr)
    sys.exit(1)

SURROGATES = [("sigmoid", 4.0), ("atan", 2.0), ("piecewise_quadratic", 1.0), ("piecewise_exp", 1.0),
              ("softsign", 2.0), ("superspike", 1.0), ("erf", 2.0)]
KINDS = ["IFNode", "LIFNode", "ParametricLIFNode"]
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}
F32 = torch.float32


def rnd(dt, t):
    """Round a float32 tensor to dtype dt and back (identity for f32)."""
    if dt == "f32":
        return t
    return t.to(DTYPES[dt]).to(F32)


def c32(v):
    return torch.tensor(v, dtype=F32)


def surrogate_grad(sid, a, z):
    """g'(z) in float64 (the SpikingJelly surrogate table)."""
    z = z.double()
    if sid == 0:
        sg = torch.sigmoid(a * z)
        return a * sg * (1.0 - sg)
    if sid == 1:
        return (a / 2.0) / (1.0 + (math.pi / 2.0 * a * z) ** 2)
    if sid == 2:
        return torch.clamp(a - a * a * z.abs(), min=0.0)
    if sid == 3:
        return (a / 2.0) * torch.exp(-a * z.abs())
    if sid == 4:
        return 1.0 / (2.0 * a * (1.0 / a + z.abs()) ** 2)
    if sid == 5:
        return a / (z.abs() + 1.0) ** 2
    if sid == 6:
        return a / math.sqrt(math.pi) * torch.exp(-((a * z) ** 2))
    raise ValueError(sid)


def reference(c, x, v0, gs, gvl, k, S, F, B):
    """The rounding rule, step by step. Returns s, h, v_last, gx, gv0, gk, kterms."""
    T, n = c["T"], c["n"]
    kind, soft, detach = c["kind"], c["soft"], c["detach"]
    mode = 0 if kind == 0 else (1 if c["decay"] else 2)
    vth32 = c32(c["vth"])
    vr = 0.0 if soft else c["vreset"]
    kF, vrF, vthF, vresetF = rnd(F, c32(k)), rnd(F, c32(vr)), rnd(F, vth32), rnd(F, c32(c["vreset"]))
    # ---- forward
    v = rnd(F, rnd(S, v0)) if c["use_v0"] else vrF.expand(n).clone()
    s_all, h_all = [], []
    for t in range(T):
        xt = rnd(F, rnd(S, x[t]))
        if mode == 0:
            h = rnd(F, v + xt)
        elif mode == 1:
            u = rnd(F, vrF - v)
            u = rnd(F, u + xt)
            u = rnd(F, kF * u)
            h = rnd(F, v + u)
        else:
            u = rnd(F, vrF - v)
            u = rnd(F, kF * u)
            u = rnd(F, v + u)
            h = rnd(F, u + xt)
        sp = (h - vth32) >= 0
        s_all.append(sp.to(F32))
        v = torch.where(sp, rnd(F, h - vthF) if soft else vresetF.expand(n), h)
        h_all.append(rnd(S, h))
    s = torch.stack(s_all)
    hs = torch.stack(h_all)
    v_last = rnd(S, v)
    # ---- backward
    sid, a = c["sg_id"], c["alpha_eff"]
    vrB, vthB = rnd(B, c32(vr)), rnd(B, vth32)
    aB = rnd(B, c32(1.0) - c32(k)) if mode != 0 else rnd(B, c32(1.0))
    cB = rnd(B, c32(k)) if mode == 1 else rnd(B, c32(1.0))
    use_g = c["use_g"]
    carry = rnd(B, gvl) if use_g else torch.zeros(n, dtype=F32)
    gx = torch.empty(T, n, dtype=F32)
    acc16 = torch.zeros(n, dtype=F32)
    acc64 = torch.zeros(n, dtype=torch.float64)
    kterms = torch.zeros(n, dtype=torch.float64)
    v0S = rnd(S, v0) if c["use_v0"] else rnd(S, vrF).expand(n)
    for t in range(T - 1, -1, -1):
        h = hs[t]
        sig = rnd(B, surrogate_grad(sid, a, h - vth32).to(F32))
        hB = rnd(B, h)
        G = carry
        gS = rnd(B, gs[t]) if use_g else torch.zeros(n, dtype=F32)
        spf = (h >= vth32).to(F32)
        if not soft and not detach:
            u = rnd(B, vrB - hB)
            u = rnd(B, G * u)
            u = rnd(B, gS + u)
            u = rnd(B, u * sig)
            gh = rnd(B, u + G * (1.0 - spf))
        elif not soft:
            gh = rnd(B, rnd(B, gS * sig) + G * (1.0 - spf))
        elif not detach:
            u = rnd(B, vthB * G)
            u = rnd(B, gS - u)
            u = rnd(B, u * sig)
            gh = rnd(B, u + G)
        else:
            gh = rnd(B, rnd(B, gS * sig) + G)
        gx[t] = rnd(B, gh * cB)
        carry = rnd(B, gh * aB)
        if kind == 2:
            if t > 0:
                hp = hs[t - 1]
                fired = hp >= vth32
                vreset_st = rnd(S, rnd(F, hp - vthF)) if soft else rnd(S, vresetF).expand(n)
                vp = torch.where(fired, vreset_st, hp)
            else:
                vp = v0S
            if B == "f32":
                d = (h.double() - vp.double()) if mode == 1 else (vr - vp.double())
                acc64 += gh.double() * d
                kterms += (gh.double() * d).abs()
            else:
                vpB = rnd(B, vp)
                d = rnd(B, hB - vpB) if mode == 1 else rnd(B, vrB - vpB)
                p = rnd(B, gh * d)
                acc16 = rnd(B, acc16 + p)
                kterms += p.double().abs()
    gk = float("nan")
    if kind == 2:
        tot = acc64.sum().item() if B == "f32" else acc16.double().sum().item()
        scale = kterms.sum().item()
        if mode == 1:
            tot /= k
            scale /= k
        gk = (tot, scale)
    return s, hs, v_last, gx, carry, gk


def make_cases(rng):
    names = list(DTYPES)
    cases = []
    i = 0
    for S in names:
        for F in names:
            for B in names:
                for rep in range(3):
                    kind = (i + rep) % 3
                    sg = int(rng.integers(0, 7))
                    alpha = 0.0 if rng.random() < 0.5 else float(np.float32(rng.uniform(0.5, 4.0)))
                    c = dict(kind=kind, kind_name=KINDS[kind], sg_id=sg, sg=SURROGATES[sg][0], alpha=alpha,
                             alpha_eff=alpha if alpha != 0.0 else SURROGATES[sg][1],
                             tau=float(np.float32(rng.uniform(1.2, 5.0))), vth=float(np.float32(rng.uniform(0.5, 1.5))),
                             soft=int(rng.integers(0, 2)), vreset=float(np.float32(rng.uniform(-0.3, 0.3))),
                             detach=int(rng.integers(0, 2)), decay=int(rng.integers(0, 2)), T=int(rng.integers(2, 13)),
                             n=int(rng.integers(40, 400)), S=S, F=F, B=B, use_v0=int(rep != 0), use_g=int(rep != 1),
                             w=float(np.float32(rng.uniform(-1.5, 1.5))))
                    cases.append(c)
                i += 1
    return cases


def gen_inputs(rng, c):
    T, n = c["T"], c["n"]
    x = rng.uniform(-1.0, 2.5, size=(T, n)).astype(np.float32)
    v0 = rng.uniform(-0.5, 1.0, size=n).astype(np.float32)
    gs = rng.uniform(-1.0, 1.0, size=(T, n)).astype(np.float32)
    gvl = rng.uniform(-1.0, 1.0, size=n).astype(np.float32)
    return x, v0, gs, gvl


def main():
    if len(sys.argv) != 2:
        print("usage: oracle_neuron_mp.py <build_dir>", file=sys.stderr)
        return 2
    driver = os.path.join(sys.argv[1], "driver_neuron_mp")
    seed = int(os.environ.get("SNN_TEST_SEED", time.time_ns() % (2**31)))
    print(f"oracle_neuron_mp: SNN_TEST_SEED={seed}")
    rng = np.random.default_rng(seed)
    torch.set_num_threads(1)
    cases = make_cases(rng)
    inputs = [gen_inputs(rng, c) for c in cases]
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "cases.txt"), "w") as f:
            f.write(f"{len(cases)}\n")
            for c in cases:
                f.write(f"{c['kind_name']} {c['sg']} {c['alpha']!r} {c['tau']!r} {c['vth']!r} {c['soft']} "
                        f"{c['vreset']!r} {c['detach']} {c['decay']} {c['T']} {c['n']} {c['S']} {c['F']} {c['B']} "
                        f"{c['use_v0']} {c['use_g']} {c['w']!r}\n")
        with open(os.path.join(tmp, "inputs.bin"), "wb") as f:
            for x, v0, gs, gvl in inputs:
                for a in (x, v0, gs, gvl):
                    f.write(a.tobytes())
        r = subprocess.run([driver, tmp], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"driver_neuron_mp failed (rc={r.returncode}): {r.stderr}")
            return 1
        raw = open(os.path.join(tmp, "outputs.bin"), "rb").read()
    failures = 0
    off = 0
    stats = {}
    differs_from_f32 = 0
    lowp_cases = 0
    for c, (x, v0, gs, gvl) in zip(cases, inputs):
        T, n = c["T"], c["n"]
        Tn = T * n

        def take(cnt):
            nonlocal off
            a = np.frombuffer(raw, dtype=np.float32, count=cnt, offset=off)
            off += 4 * cnt
            return a

        cs, ch, cvl, cgx, cgv0, ck = take(Tn), take(Tn), take(n), take(Tn), take(n), take(1)[0]
        cgk = np.frombuffer(raw, dtype=np.float64, count=1, offset=off)[0]
        off += 8
        tag = (f"{c['S']}/{c['F']}/{c['B']} {c['kind_name']} sg={c['sg']} soft={c['soft']} detach={c['detach']} "
               f"decay={c['decay']} T={T} n={n} v0={c['use_v0']} g={c['use_g']}")
        # k: the driver's, checked against an independent float64 evaluation (1 ulp)
        if c["kind"] == 1:
            kref = np.float32(1.0 / c["tau"])
        elif c["kind"] == 2:
            kref = np.float32(1.0 / (1.0 + math.exp(-c["w"])))
        else:
            kref = np.float32(0.0)
        if abs(float(ck) - float(kref)) > float(np.spacing(np.float32(max(abs(kref), 1e-30)))):
            print(f"FAIL {tag}: k {ck!r} vs {kref!r}")
            failures += 1
        k = float(ck)
        tx, tv0, tgs, tgvl = (torch.from_numpy(a.copy()) for a in (x, v0, gs, gvl))
        s, hs, vl, gx, gv0, gk = reference(c, tx, tv0, tgs, tgvl, k, c["S"], c["F"], c["B"])
        ok_fwd = (np.array_equal(cs, s.numpy().ravel()) and np.array_equal(ch, hs.numpy().ravel())
                  and np.array_equal(cvl, vl.numpy()))
        if not ok_fwd:
            nh = int(np.sum(ch != hs.numpy().ravel()))
            ns = int(np.sum(cs != s.numpy().ravel()))
            print(f"FAIL {tag}: forward not bit-identical ({ns} spikes, {nh} h values differ)")
            failures += 1
        # control: the all-FP32 evaluation of the same case
        if (c["S"], c["F"], c["B"]) != ("f32", "f32", "f32"):
            lowp_cases += 1
            s32, h32, _, gx32, _, _ = reference(c, tx, tv0, tgs, tgvl, k, "f32", "f32", "f32")
            if not (torch.equal(h32, hs) and torch.equal(gx32, gx)):
                differs_from_f32 += 1
        tol = TOL[c["B"]]
        for name, cv, rv in (("dL/dx", cgx, gx.numpy().ravel()), ("dL/dv0", cgv0, gv0.numpy())):
            scale = max(float(np.max(np.abs(rv))), 1e-30)
            err = float(np.max(np.abs(cv.astype(np.float64) - rv))) if cv.size else 0.0
            same = float(np.mean(cv == rv)) if cv.size else 1.0
            st = stats.setdefault((c["B"], name), [0.0, 1.0])
            st[0] = max(st[0], err / scale)
            st[1] = min(st[1], same)
            if not np.all(np.isfinite(cv)) or err > tol * scale:
                print(f"FAIL {tag}: {name} max error {err:.3g} > {tol} * {scale:.3g}")
                failures += 1
            if c["B"] != "f32" and same < 0.98:
                print(f"FAIL {tag}: {name} only {100 * same:.1f}% bit-identical")
                failures += 1
        if c["kind"] == 2:
            tot, mag = gk
            err = abs(float(cgk) - tot)
            st = stats.setdefault((c["B"], "dL/dk"), [0.0, 1.0])
            st[0] = max(st[0], err / max(mag, 1e-30))
            if not math.isfinite(float(cgk)) or err > tol * max(mag, 1e-30) + 1e-12:
                print(f"FAIL {tag}: dL/dk {cgk!r} vs {tot!r} (terms {mag:.3g})")
                failures += 1
    for (b, name), (e, same) in sorted(stats.items()):
        extra = f", min bit-identical {100 * same:.1f}%" if name != "dL/dk" else ""
        print(f"  B={b:4s} {name:6s}: worst error / scale {e:.2e}{extra}")
    print(f"  {differs_from_f32}/{lowp_cases} mixed cases differ from their all-FP32 evaluation")
    if differs_from_f32 < lowp_cases * 0.9:
        print("FAIL: the mixed-precision rounding hardly changes anything (control)")
        failures += 1
    print(f"oracle_neuron_mp: {len(cases)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
