"""End-to-end checks of `snn lm train | eval | generate | export` (tiny models, seconds).

Token datasets are written with numpy.save; checkpoints and exports are read with an
independent safetensors parser written here (json + numpy, BF16 widened by hand).
  * training prints the metric JSON lines and metrics.json;
  * a run resumed from its step-6 checkpoint ends bit-identical to the straight run
    (weights and AdamW state); a resume with another recipe is refused (exit 2);
  * bad configurations exit 2 with one "snn: error:" line naming the rule;
  * export: shards within --max-shard-size, the index lists every tensor with the right
    total_size, the manifest's recipe_sha256 is the SHA-256 of the recipe's canonical JSON
    (Python's json.dumps(sort_keys=True, separators=(",", ":"))), an fp32 checkpoint and an
    existing output are refused;
  * a GPT-2 written here in torch with Hugging Face's conventions (Conv1D weights [in, out],
    fused c_attn split into q, k, v, tied lm_head) on the exported BF16 tensors reproduces
    `snn lm eval --round-bf16 --dump` logits and `snn lm generate --round-bf16` greedy tokens;
  * a spikelm export holds the manifest's names and shapes, lm_head.weight == wte.weight.
Usage: python3 tests/oracle_lm_cli.py <build_dir>; exit 0 = pass."""
import hashlib
import json
import math
import os
import shutil
import struct
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
    print("oracle_lm_cli: PyTorch and NumPy are needed", file=sys.stderr)
    sys.exit(1)

failures = 0
checks = 0


def expect(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        print("FAIL", what)
        failures += 1


def snn(build, *args, rc=0, err=None):
    r = subprocess.run([os.path.join(build, "snn"), "lm"] + [str(a) for a in args], capture_output=True, text=True)
    ok = r.returncode == rc
    if rc == 2:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        ok = ok and len(lines) == 1 and lines[0].startswith("snn: error:") and (err is None or err in lines[0])
    expect(ok, f"snn lm {' '.join(map(str, args))}: rc {r.returncode} (want {rc}{', ' + err if err else ''}): "
               f"{r.stderr.strip()[-300:]}")
    return r


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            v = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            v = np.frombuffer(raw, dtype={"F32": np.float32, "I32": np.int32}[info["dtype"]])
        out[name] = v.reshape(info["shape"])
    return out, header.get("__metadata__", {})


def gpt2_hf(P, cfg, ids):
    """GPT-2 as Hugging Face computes it, float64, from exported tensors."""
    P = {k: torch.tensor(v.astype(np.float64)) for k, v in P.items()}
    H, heads = cfg["n_embd"], cfg["n_head"]
    hd = H // heads
    B, S = ids.shape
    eps = cfg["layer_norm_epsilon"]
    x = P["wte.weight"][ids] + P["wpe.weight"][:S]
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = F.layer_norm(x, (H,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = a @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(H, dim=-1)
        q, k, v = (t.reshape(B, S, heads, hd).transpose(1, 2) for t in (q, k, v))
        z = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~mask, float("-inf"))
        o = (z.softmax(-1) @ v).transpose(1, 2).reshape(B, S, H)
        x = x + o @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        m = F.layer_norm(x, (H,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        m = F.gelu(m @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"])
        x = x + m @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (H,), P["ln_f.weight"], P["ln_f.bias"], eps)
    return x @ P["wte.weight"].T


def load_export(d):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    P = {}
    for f in sorted(set(idx["weight_map"].values())):
        t, meta = read_st(os.path.join(d, f))
        expect(meta.get("format") == "pt", f"{f}: metadata format pt")
        for k in t:
            expect(idx["weight_map"].get(k) == f, f"index maps {k} to {f}")
        P.update(t)
    return P, idx


def main():
    build = os.path.abspath(sys.argv[1])
    rng = np.random.default_rng(int(os.environ.get("SNN_TEST_SEED", "7")))
    tmp = tempfile.mkdtemp(prefix="snn-lm-cli-")
    try:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        V, S = 40, 16
        for split, n in (("train", 64), ("valid", 16), ("test", 16)):
            start = rng.integers(0, V, size=(n, 1))
            step = rng.integers(1, 4, size=(n, 1))
            np.save(os.path.join(data, split + ".npy"), ((start + step * np.arange(S + 1)) % V).astype(np.int32))
        base = ["--data", data, "--layers", 2, "--hidden", 32, "--heads", 4, "--micro-batch-size", 4,
                "--global-batch-size", 8, "--lr", 3e-3, "--lr-warmup-steps", 2, "--log-interval", 4,
                "--precision", "bf16", "--train-steps", 12]
        o1, o2 = os.path.join(tmp, "o1"), os.path.join(tmp, "o2")
        r = snn(build, "train", *base, "--output", o1, "--eval-interval", 6, "--eval-steps", 1)
        lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        logs = [l for l in lines if "lm_loss" in l and "grad_norm" in l]
        expect(len(logs) >= 3 and all(k in logs[0] for k in ("optimizer_step", "consumed_samples", "grad_norm",
                "semantic_tokens_per_second", "neural_steps_per_second", "peak_memory_bytes", "lr")), "metric lines")
        expect(any("validation_lm_loss" in l for l in lines), "validation line")
        expect(os.path.exists(os.path.join(o1, "metrics.json")), "metrics.json")
        expect(logs[0]["lm_loss"] > logs[-1]["lm_loss"], "the loss goes down")
        snn(build, "train", *base, "--output", o2, "--checkpoint-interval", 6)
        shutil.rmtree(os.path.join(o2, "step_0000012"))
        snn(build, "train", *base, "--output", o2, "--resume", os.path.join(o2, "step_0000006"))
        a, _ = read_st(os.path.join(o1, "step_0000012", "checkpoint.safetensors"))
        b, _ = read_st(os.path.join(o2, "step_0000012", "checkpoint.safetensors"))
        expect(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a), "resume is bit-identical")
        expect(any(k.startswith("__optim__") for k in a), "optimizer state in the checkpoint")
        bad = list(base)
        bad[bad.index("--hidden") + 1] = 64
        snn(build, "train", *bad, "--output", os.path.join(tmp, "o3"), "--resume", os.path.join(o2, "step_0000006"),
            rc=2, err="recipe")
        # configuration rules
        for extra, msg in ((["--global-batch-size", 15, "--micro-batch-size", 2], "divisible"),
                           (["--eval-interval", 5], "eval"),
                           (["--lr-warmup-steps", 12, "--lr-decay-steps", 12], "decay"),
                           (["--position-embedding", "alibi"], "position"),
                           (["--train-steps", 0], "train-steps")):
            snn(build, "train", *base, *extra, "--output", os.path.join(tmp, "bad"), rc=2, err=msg)
        _, meta = read_st(os.path.join(o1, "step_0000012", "checkpoint.safetensors"))
        cfg = json.loads(meta["lm_training_config"])
        cfg["optimizer"]["params_dtype"] = "float32"
        cfg["optimizer"]["bf16"] = False
        cp = os.path.join(tmp, "cfg.json")
        json.dump(cfg, open(cp, "w"))
        snn(build, "train", "--config", cp, "--output", os.path.join(tmp, "bad2"), rc=2, err="bf16")

        # eval
        ck = os.path.join(o1, "step_0000012")
        ev = json.loads(snn(build, "eval", ck, "--split", "test").stdout.splitlines()[-1])
        expect(ev["valid_tokens"] == 16 * S and abs(ev["perplexity"] - math.exp(ev["lm_loss"])) < 1e-6 * ev["perplexity"],
               "eval fields")
        ev5 = json.loads(snn(build, "eval", ck, "--split", "test", "--max-samples", 5).stdout.splitlines()[-1])
        expect(ev5["valid_tokens"] == 5 * S, "padded evaluation counts only real tokens")
        # export
        ex = os.path.join(tmp, "ex")
        limit = 20000
        snn(build, "export", ck, ex, "--max-shard-size", limit)
        snn(build, "export", ck, ex, rc=2, err="exists")
        P, idx = load_export(ex)
        files = set(idx["weight_map"].values())
        expect(len(files) > 1 and all(os.path.getsize(os.path.join(ex, f)) <= limit for f in files), "shard sizes")
        expect(idx["metadata"]["total_size"] == sum(v.size * 2 for v in P.values()), "total_size")
        man = json.load(open(os.path.join(ex, "snn_lm_export.json")))
        canon = json.dumps(man["recipe"], sort_keys=True, separators=(",", ":"))
        expect(man["recipe_sha256"] == hashlib.sha256(canon.encode()).hexdigest(), "recipe_sha256")
        expect(man["dtype"] == "bfloat16" and man["time_steps"] == 1 and man["schema_version"] == 2, "manifest fields")
        hf = json.load(open(os.path.join(ex, "config.json")))
        expect(hf["architectures"] == ["GPT2LMHeadModel"] and hf["model_type"] == "gpt2", "GPT-2 config")
        expect(P["h.0.attn.c_attn.weight"].shape == (32, 96), "Conv1D layout [in, out]")
        dump = os.path.join(tmp, "dump.safetensors")
        snn(build, "eval", ck, "--split", "test", "--round-bf16", "--dump", dump, "--dump-rows", 4)
        d, _ = read_st(dump)
        want = d["logits"].astype(np.float64)
        got = gpt2_hf(P, hf, torch.tensor(d["input_ids"].astype(np.int64))).numpy()
        err = np.abs(got - want).max() / np.abs(want).max()
        expect(err < 1e-5, f"exported GPT-2 logits vs snn: {err:.3g}")
        tok = os.path.join(tmp, "tok.safetensors")
        prompts = d["input_ids"][:, :5]
        snn(build, "generate", ck, "--round-bf16", "--prompt-ids", ";".join(",".join(map(str, r)) for r in prompts),
            "--max-new-tokens", 8, "--out", tok)
        gen = read_st(tok)[0]["tokens"]
        seq = torch.tensor(prompts.astype(np.int64))
        for _ in range(8):
            seq = torch.cat([seq, gpt2_hf(P, hf, seq)[:, -1].argmax(-1, keepdim=True)], 1)
        expect(np.array_equal(gen, seq.numpy()), f"greedy tokens: snn {gen.tolist()} torch {seq.tolist()}")
        snn(build, "generate", ck, "--prompt-ids", "1,2,3", "--max-new-tokens", 14, rc=2, err="context")
        # fp32 checkpoints are not exported
        f32 = os.path.join(tmp, "f32")
        fb = list(base)
        fb[fb.index("--precision") + 1] = "fp32"
        fb[fb.index("--train-steps") + 1] = 4
        snn(build, "train", *fb, "--output", f32)
        snn(build, "export", os.path.join(f32, "step_0000004"), os.path.join(tmp, "ex32"), rc=2, err="bf16")
        # spikelm
        sp = os.path.join(tmp, "sp")
        sb = list(base)
        sb[sb.index("--train-steps") + 1] = 3
        snn(build, "train", *sb, "--model", "spikelm", "--time-steps", 2, "--output", sp)
        snn(build, "eval", os.path.join(sp, "step_0000003"))
        exs = os.path.join(tmp, "exs")
        snn(build, "export", os.path.join(sp, "step_0000003"), exs)
        Ps, _ = load_export(exs)
        mans = json.load(open(os.path.join(exs, "snn_lm_export.json")))
        expect({k: list(v.shape) for k, v in Ps.items()} == mans["tensors"], "spikelm names and shapes")
        expect(np.array_equal(Ps["lm_head.weight"], Ps["wte.weight"]), "tied spikelm lm_head")
        expect(mans["time_steps"] == 2 and json.load(open(os.path.join(exs, "config.json")))["tie_word_embeddings"],
               "spikelm manifest")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"oracle_lm_cli: {checks} checks, {failures} failures")
    sys.exit(1 if failures else 0)


main()
