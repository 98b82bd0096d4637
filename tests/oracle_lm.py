"""PyTorch oracle for the language-model modules and models (driver_lm).

Fresh random inputs of odd sizes; PyTorch computes in float64 from the same float32 inputs:
  modules (forward, input gradient, parameter gradients): token embedding, learned
  positions (with an offset), RoPE (rotate-half, with an offset), causal attention
  (multi-head and grouped queries), RMSNorm, SwiGLU, output head, elastic bi-spiking over T
  (straight-through gradient written with torch's round / clamp / detach);
  the per-token cross-entropy with a loss mask on logits reduced over T (mean and sum);
  whole models: gpt (GPT-2 written here in torch) and spikelm, tied/untied, GELU/SwiGLU,
  LayerNorm/RMSNorm, learned/RoPE, GQA: reduced logits, loss and every parameter gradient;
  a central finite difference of the loss for a few spikelm-free parameters;
  cached greedy generation against uncached argmax decoding of the torch model.
Usage: python3 tests/oracle_lm.py <build_dir>; exit 0 = pass. Replay with SNN_TEST_SEED."""
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    syspy = "/usr/bin/python3"
    if os.path.exists(syspy) and os.path.realpath(sys.executable) != os.path.realpath(syspy):
        os.execv(syspy, [syspy] + sys.argv)
    print("oracle_lm: PyTorch and NumPy are needed (python3-torch)", file=sys.stderr)
    sys.exit(1)

failures = 0
checks = 0


def check(name, got, want, rel=1e-4, floor=1e-2):
    global failures, checks
    checks += 1
    got = np.asarray(got, dtype=np.float64).ravel()
    want = np.asarray(want, dtype=np.float64).ravel()
    if got.shape != want.shape:
        print(f"FAIL {name}: {got.shape} values, expected {want.shape}")
        failures += 1
        return
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    err = np.abs(got - want) / np.maximum(np.abs(want), floor * scale)
    err[np.isnan(got) | np.isnan(want)] = np.inf
    e = float(err.max(initial=0.0))
    if not e <= rel:
        i = int(np.argmax(err))
        print(f"FAIL {name}: rel error {e:.3g} at {i}: got {got[i]:.9g} want {want[i]:.9g}")
        failures += 1


def run(build, args, blobs, nbytes):
    with tempfile.TemporaryDirectory() as d:
        fi, fo = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
        with open(fi, "wb") as f:
            for b in blobs:
                f.write(np.ascontiguousarray(b).tobytes())
        r = subprocess.run([os.path.join(build, "driver_lm")] + [str(a) for a in args] + [fi, fo],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("driver_lm failed:", args, r.stderr)
            sys.exit(1)
        data = open(fo, "rb").read()
        if len(data) != nbytes:
            print(f"driver_lm {args[:2]}: {len(data)} bytes, expected {nbytes}")
            sys.exit(1)
        return data


def t64(a):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def rope_ref(x, H, G, hd, off):
    # x [..., S, (H+2G)*hd]; rotate-half on q and k heads
    S = x.shape[-2]
    h2 = hd // 2
    pos = torch.arange(off, off + S, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-2.0 * torch.arange(h2, dtype=torch.float64) / hd)
    c, s = torch.cos(pos * inv), torch.sin(pos * inv)
    rot = x[..., :(H + G) * hd].reshape(*x.shape[:-1], H + G, hd)
    a, b = rot[..., :h2], rot[..., h2:]
    c, s = c[:, None, :], s[:, None, :]
    r = torch.cat([a * c - b * s, a * s + b * c], -1).reshape(*x.shape[:-1], (H + G) * hd)
    return torch.cat([r, x[..., (H + G) * hd:]], -1)


def attn_ref(x, H, G, hd):
    # x [B, S, (H+2G)hd] -> [B, S, H hd]
    B, S, _ = x.shape
    q = x[..., :H * hd].reshape(B, S, H, hd).transpose(1, 2)
    k = x[..., H * hd:(H + G) * hd].reshape(B, S, G, hd).transpose(1, 2)
    v = x[..., (H + G) * hd:].reshape(B, S, G, hd).transpose(1, 2)
    k = k.repeat_interleave(H // G, dim=1)
    v = v.repeat_interleave(H // G, dim=1)
    z = q @ k.transpose(-1, -2) / math.sqrt(hd)
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    z = z.masked_fill(~mask, float("-inf"))
    return (z.softmax(-1) @ v).transpose(1, 2).reshape(B, S, H * hd)


def bispike_ref(x, decay, amp):
    # x [T, ...]
    v = None
    s_prev = None
    out = []
    for t in range(x.shape[0]):
        v = x[t] if t == 0 else v * decay * (amp - s_prev.detach()) + x[t]
        c = torch.clamp(v / amp, -1, 1)
        s = amp * (c + (torch.round(c) - c).detach())
        out.append(s)
        s_prev = s
    return torch.stack(out)


def mod_case(build, rng, kind, A, B_, C, D, S, T, N):
    rows = T * N
    if kind == "emb":
        ishape, params = (S,), [(A, B_)]
    elif kind == "pos":
        ishape, params = (S, B_), [(A, B_)]
    elif kind in ("rope", "attn"):
        ishape, params = (S, (A + 2 * B_) * C), []
    elif kind in ("rms",):
        ishape, params = (S, A), [(A,)]
    elif kind == "swiglu":
        ishape, params = (S, 2 * A), []
    elif kind == "head":
        ishape, params = (S, A), [(B_, A)]
    elif kind == "bis":
        ishape, params = (S, C), []
    if kind == "emb":
        x = rng.integers(0, A, size=(rows,) + ishape).astype(np.float32)
    elif kind == "bis":
        x = (rng.standard_normal((rows,) + ishape) * 1.2).astype(np.float32)
    else:
        x = rng.standard_normal((rows,) + ishape).astype(np.float32)
    ps = [rng.standard_normal(p).astype(np.float32) * (0.5 if kind != "rms" else 1) for p in params]
    X, Ps = t64(x), [t64(p) for p in ps]
    if kind == "emb":
        y = Ps[0][torch.tensor(x.astype(np.int64))]
    elif kind == "pos":
        y = X + Ps[0][C:C + S]
    elif kind == "rope":
        y = rope_ref(X, A, B_, C, D)
    elif kind == "attn":
        y = attn_ref(X, A, B_, C)
    elif kind == "rms":
        y = X / torch.sqrt((X * X).mean(-1, keepdim=True) + 1e-5) * Ps[0]
    elif kind == "swiglu":
        y = F.silu(X[..., :A]) * X[..., A:]
    elif kind == "head":
        y = X @ Ps[0].T
    elif kind == "bis":
        y = bispike_ref(X.reshape(T, N, *ishape), A / 1000.0, B_ / 1000.0).reshape(rows, *ishape)
    dy = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    nx, ny, npar = x.size, dy.size, sum(p.size for p in ps)
    out = np.frombuffer(run(build, ["mod", kind, A, B_, C, D, S, T, N],
                            [x] + ps + [dy], 4 * (ny + nx + npar)), dtype=np.float32)
    tag = f"{kind}({A},{B_},{C},{D}) S{S} T{T} N{N}"
    check(tag + " y", out[:ny], y.detach().numpy())
    if kind != "emb":
        check(tag + " dx", out[ny:ny + nx], X.grad.numpy())
    o = ny + nx
    for i, p in enumerate(Ps):
        check(tag + f" dparam{i}", out[o:o + p.numel()], p.grad.numpy())
        o += p.numel()


def loss_case(build, rng, T, N, S, V, red_sum):
    logits = (rng.standard_normal((T, N, S, V)) * 2).astype(np.float32)
    labels = rng.integers(0, V, size=(N, S)).astype(np.int32)
    mask = (rng.random((N, S)) < 0.7).astype(np.float32)
    mask[0, 0] = 1
    L = t64(logits)
    z = L.sum(0) if red_sum else L.mean(0)
    tl = F.cross_entropy(z.reshape(-1, V), torch.tensor(labels.astype(np.int64)).reshape(-1),
                         reduction="none") * torch.tensor(mask.astype(np.float64)).reshape(-1)
    loss = tl.sum() / float(mask.sum())
    loss.backward()
    ns = N * S
    out = np.frombuffer(run(build, ["loss", T, N, S, V, red_sum], [logits, labels, mask],
                            4 * (ns + 2 + logits.size)), dtype=np.float32)
    tag = f"loss T{T} N{N} S{S} V{V} sum{red_sum}"
    check(tag + " token", out[:ns], tl.detach().numpy(), rel=1e-5)
    check(tag + " sum", out[ns:ns + 1], [tl.sum().item()], rel=1e-5)
    check(tag + " count", out[ns + 1:ns + 2], [mask.sum()], rel=0)
    check(tag + " grad", out[ns + 2:], L.grad.numpy(), rel=1e-5)


class Ref:
    """GPT-2 (and spikelm) in torch from a name -> tensor map, [T*N, S] folded ids."""

    def __init__(self, o, P):
        self.o, self.P = o, P

    def norm(self, x, pre):
        o = self.o
        if o["norm"] == 1:
            return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * self.P[pre + ".weight"]
        return F.layer_norm(x, (o["hidden"],), self.P[pre + ".weight"], self.P[pre + ".bias"], 1e-5)

    def lin(self, x, pre):
        y = x @ self.P[pre + ".weight"].T
        return y + self.P[pre + ".bias"] if self.o["bias"] else y

    def spike(self, x):
        o = self.o
        if not o["spiking"]:
            return x
        T = o["T"]
        return bispike_ref(x.reshape(T, -1, *x.shape[1:]), 0.25, 1.0).reshape(x.shape)

    def forward(self, ids):
        # ids LongTensor [N, S] -> reduced logits [N, S, V]
        o, P = self.o, self.P
        T, H, heads, G = o["T"], o["hidden"], o["heads"], o["groups"]
        hd = H // heads
        ids = ids.repeat(T, 1)
        S = ids.shape[1]
        x = P["wte.weight"][ids]
        if o["pos"] == 0:
            x = x + P["wpe.weight"][:S]
        for i in range(o["layers"]):
            p = f"h.{i}"
            a = self.lin(self.spike(self.norm(x, p + ".ln_1")), p + ".attn.c_attn")
            if o["pos"] == 1:
                a = rope_ref(a, heads, G, hd, 0)
            x = x + self.lin(attn_ref(a, heads, G, hd), p + ".attn.c_proj")
            m = self.lin(self.spike(self.norm(x, p + ".ln_2")), p + ".mlp.c_fc")
            if o["act"] == 1:
                F_ = m.shape[-1] // 2
                m = F.silu(m[..., :F_]) * m[..., F_:]
            else:
                m = F.gelu(m)
            x = x + self.lin(m, p + ".mlp.c_proj")
        x = self.norm(x, "ln_f")
        W = P["wte.weight"] if o["tied"] else P["lm_head.weight"]
        logits = (x @ W.T).reshape(T, -1, S, o["vocab"])
        return logits.sum(0) if o["sum"] else logits.mean(0)


def opts_args(o):
    return [o["spiking"], o["vocab"], o["ctx"], o["S"], o["layers"], o["hidden"], o["heads"], o["groups"],
            o["ffn"], o["norm"], o["act"], o["pos"], o["bias"], o["tied"], o["T"], o["sum"]]


def names(build, o):
    r = subprocess.run([os.path.join(build, "driver_lm"), "names"] + [str(a) for a in opts_args(o)],
                       capture_output=True, text=True, check=True)
    out = []
    for line in r.stdout.split("\n"):
        if line:
            f = line.split()
            out.append((f[0], tuple(int(v) for v in f[1:])))
    return out


def model_case(build, rng, o, N, fd=False):
    nm = names(build, o)
    flat = [(rng.standard_normal(int(np.prod(s))) * (0.3 if "ln_" not in n else 0.2)
             + (1.0 if "ln_" in n and n.endswith("weight") else 0.0)).astype(np.float32) for n, s in nm]
    P = {n: t64(f.reshape(s)) for (n, s), f in zip(nm, flat)}
    S, V = o["S"], o["vocab"]
    ids = rng.integers(0, V, size=(N, S)).astype(np.int32)
    labels = rng.integers(0, V, size=(N, S)).astype(np.int32)
    mask = (rng.random((N, S)) < 0.8).astype(np.float32)
    mask[0, 0] = 1
    ref = Ref(o, P)
    z = ref.forward(torch.tensor(ids.astype(np.int64)))
    tl = F.cross_entropy(z.reshape(-1, V), torch.tensor(labels.astype(np.int64)).reshape(-1), reduction="none")
    loss = (tl * torch.tensor(mask.astype(np.float64)).reshape(-1)).sum() / float(mask.sum())
    loss.backward()
    n = sum(f.size for f in flat)
    out = np.frombuffer(run(build, ["gpt"] + opts_args(o) + [N], [np.concatenate(flat), ids, labels, mask],
                            4 * (N * S * V + 1 + n)), dtype=np.float32)
    tag = "spikelm" if o["spiking"] else "gpt"
    tag += f" norm{o['norm']} act{o['act']} pos{o['pos']} tied{o['tied']} G{o['groups']} T{o['T']} sum{o['sum']}"
    # spikelm: a rounding boundary can flip between float32 and float64; the inputs are
    # drawn so that this is rare, and the model is checked with a looser tolerance
    rel = 2e-4 if o["spiking"] else 1e-4
    check(tag + " logits", out[:N * S * V], z.detach().numpy(), rel=rel)
    check(tag + " loss", out[N * S * V:N * S * V + 1], [loss.item()], rel=rel)
    g = out[N * S * V + 1:]
    off = 0
    for (nme, s), f in zip(nm, flat):
        check(tag + " grad " + nme, g[off:off + f.size], P[nme].grad.numpy().ravel(), rel=rel * 10, floor=1e-2)
        off += f.size
    if fd:
        # central differences of the torch loss in float64 against snn's gradient
        for nme in ("h.0.attn.c_attn.weight", "wte.weight", "ln_f.weight"):
            k = [x[0] for x in nm].index(nme)
            o0 = sum(f.size for f in flat[:k])
            for j in rng.choice(flat[k].size, 3, replace=False):
                def lossat(delta):
                    Q = {a: b.detach().clone() for a, b in P.items()}
                    Q[nme].view(-1)[j] += delta
                    zz = Ref(o, Q).forward(torch.tensor(ids.astype(np.int64)))
                    t = F.cross_entropy(zz.reshape(-1, V), torch.tensor(labels.astype(np.int64)).reshape(-1),
                                        reduction="none")
                    return float((t * torch.tensor(mask.astype(np.float64)).reshape(-1)).sum() / mask.sum())
                h = 1e-4
                num = (lossat(h) - lossat(-h)) / (2 * h)
                check(tag + f" fd {nme}[{j}]", [g[o0 + j]], [num], rel=2e-3, floor=1e-2)
    return nm, flat, ref


def gen_case(build, rng, o, B, Pn, new):
    nm = names(build, o)
    flat = [(rng.standard_normal(int(np.prod(s))) * (0.5 if "ln_" not in n else 0.1)
             + (1.0 if "ln_" in n and n.endswith("weight") else 0.0)).astype(np.float32) for n, s in nm]
    P = {n: torch.tensor(f.reshape(s).astype(np.float64)) for (n, s), f in zip(nm, flat)}
    prompt = rng.integers(0, o["vocab"], size=(B, Pn)).astype(np.int32)
    out = np.frombuffer(run(build, ["gen"] + opts_args(o) + [B, Pn, new], [np.concatenate(flat), prompt],
                            4 * B * (Pn + new)), dtype=np.int32).reshape(B, Pn + new)
    seq = torch.tensor(prompt.astype(np.int64))
    margin_ok = True
    for step in range(new):
        oo = dict(o)
        oo["S"] = seq.shape[1]
        z = Ref(oo, P).forward(seq)[:, -1]
        top = torch.topk(z, 2, dim=-1).values
        if (top[:, 0] - top[:, 1]).min() < 1e-4:
            margin_ok = False  # a near tie: float32 may legitimately pick the other token
        seq = torch.cat([seq, z.argmax(-1, keepdim=True)], 1)
    global checks, failures
    checks += 1
    tag = ("spikelm" if o["spiking"] else "gpt") + f" generate B{B} P{Pn} new{new}"
    if not margin_ok:
        print(f"note {tag}: a near tie in the reference logits, tokens not compared")
    elif not np.array_equal(out, seq.numpy()):
        print(f"FAIL {tag}: cached tokens {out.tolist()} != uncached {seq.numpy().tolist()}")
        failures += 1


def main():
    build = sys.argv[1]
    seed = int(os.environ.get("SNN_TEST_SEED", np.random.SeedSequence().entropy % (1 << 31)))
    print(f"oracle_lm: seed {seed}")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    mod_case(build, rng, "emb", 37, 12, 0, 0, 7, 1, 3)
    mod_case(build, rng, "pos", 20, 12, 5, 0, 9, 2, 3)
    mod_case(build, rng, "rope", 4, 2, 6, 0, 9, 1, 3)
    mod_case(build, rng, "rope", 2, 2, 8, 11, 5, 2, 2)
    mod_case(build, rng, "attn", 3, 3, 5, 0, 11, 1, 3)
    mod_case(build, rng, "attn", 4, 2, 6, 0, 9, 2, 2)
    mod_case(build, rng, "attn", 4, 1, 4, 0, 1, 1, 2)
    mod_case(build, rng, "rms", 19, 0, 0, 0, 5, 2, 3)
    mod_case(build, rng, "swiglu", 13, 0, 0, 0, 5, 1, 3)
    mod_case(build, rng, "head", 12, 29, 0, 0, 5, 1, 3)
    mod_case(build, rng, "bis", 250, 1000, 17, 0, 3, 4, 3)
    mod_case(build, rng, "bis", 600, 700, 9, 0, 5, 3, 2)
    loss_case(build, rng, 1, 3, 5, 17, 0)
    loss_case(build, rng, 3, 2, 4, 11, 0)
    loss_case(build, rng, 2, 2, 3, 9, 1)
    base = dict(spiking=0, vocab=23, ctx=16, S=7, layers=2, hidden=16, heads=4, groups=4, ffn=24,
                norm=0, act=0, pos=0, bias=1, tied=1, T=1, sum=0)
    model_case(build, rng, base, 3, fd=True)
    model_case(build, rng, dict(base, tied=0, groups=2, act=1, norm=1, pos=1, bias=0), 2)
    model_case(build, rng, dict(base, spiking=1, T=3), 2)
    model_case(build, rng, dict(base, spiking=1, T=2, sum=1, tied=0), 2)
    gen_case(build, rng, dict(base, ctx=20), 2, 5, 8)
    gen_case(build, rng, dict(base, ctx=20, pos=1, groups=2), 1, 4, 6)
    gen_case(build, rng, dict(base, ctx=20, spiking=1, T=3), 2, 3, 6)
    print(f"oracle_lm: {checks} checks, {failures} failures")
    sys.exit(1 if failures else 0)


main()
