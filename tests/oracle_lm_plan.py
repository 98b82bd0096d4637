"""`snn lm plan` against an independent Python model of the planner (written here from the
specification of SpikingJelly's plan_training, not from snn's C).

For several hundred random training configs (spikelm and gpt, fp32 / bf16 / fp16, FP8,
GQA, gated MLPs, tied and untied embeddings, learned and rotary positions, 1 to 48
devices, both objectives, random memory fractions) this file enumerates the candidate
topologies, computes every estimate of both passes, picks the config the rules choose, and
compares it with what the CLI prints: the chosen TP / PP / CP, the recompute policy and
use_snn_memopt in the JSON, the estimate and its two parts on stderr, the topology count,
and the two "No topology ..." messages with their numbers. Budgets are drawn around the
model's own estimates so that every branch is reached (pass 1 fits, only the selective
pass fits, nothing fits, no topology at all); the run fails if a branch was never seen.
Usage: python3 tests/oracle_lm_plan.py <build_dir>; exit 0 = pass."""
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile

build = sys.argv[1] if len(sys.argv) > 1 else "build"
SNN = os.path.join(build, "snn")
seed = int(os.environ.get("SNN_TEST_SEED", random.SystemRandom().randrange(1 << 31)))
rng = random.Random(seed)
print(f"oracle_lm_plan: seed {seed}")

failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        if failures <= 20:
            print("  FAIL:", what, file=sys.stderr)


# ---- the model of the planner ------------------------------------------------------------


def param_counts(m):
    """Per-layer (TP-sharded, replicated) and the whole-model pieces."""
    t = m["transformer"]
    h, a = t["hidden_size"], t["num_attention_heads"]
    groups = t.get("num_query_groups") or a
    head_dim = t.get("kv_channels") or h // a
    ffn = t.get("ffn_hidden_size") or 4 * h
    q = head_dim * a
    # Q and the output projection (h*q each) plus K and V (h*q*groups/heads each)
    attn = math.floor(2 * h * q * (1 + groups / a))
    gated = t.get("activation") == "swiglu"
    mlp = math.floor(2 * h * ffn * 1.5) if gated else 2 * h * ffn
    norms = 2 * h * (1 if t.get("normalization") == "RMSNorm" else 2)
    embed = h * m["vocab_size"]
    pos = h * m["max_sequence_length"] if m.get("position_embedding_type") == "learned_absolute" else 0
    return dict(layer_tp=attn + mlp, layer_rep=norms, final=norms // 2, embed=embed, pos=pos, head=embed, ffn=ffn)


def precision(t):
    if t.get("fp16"):
        return "fp16"
    return "bf16" if t.get("bf16") else "fp32"


def bytes_per_param(t, shard):
    base, opt = {"fp16": (4, 16), "bf16": (6, 12), "fp32": (8, 8)}[precision(t)]
    return base + opt / shard


def param_bytes(cfg, tp, pp, shard):
    m = cfg["model"]
    t = m["transformer"]
    pc = param_counts(m)
    stage_layers = t["num_layers"] / pp
    n = pc["layer_tp"] * stage_layers / tp + pc["layer_rep"] * stage_layers
    first = pc["embed"] / tp + pc["pos"]
    last = pc["head"] / tp + pc["final"]
    if pp == 1:
        n += first + pc["final"]
        if not m.get("share_embeddings_and_output_weights"):
            n += pc["head"] / tp
    else:
        n += max(first, last)
    return n * bytes_per_param(t, shard)


def act_bytes(cfg, tp, pp, cp, nmb, selective):
    m = cfg["model"]
    t = m["transformer"]
    s = cfg["sequence_length"] / cp
    b = cfg["micro_batch_size"] * m["time_steps"]
    h, L, V = t["hidden_size"], t["num_layers"], m["vocab_size"]
    f = t.get("ffn_hidden_size") or 4 * h
    sbh = s * b * h
    if selective:
        x = sbh * (18 + 4 * f / h) * L / tp
    else:
        x = sbh * (10 + 24 / tp) * L
    x += 8 * s * b * pp + sbh * pp
    if pp > 1:
        x *= min(1, nmb / pp)
    elif selective:
        x += sbh * 4 * (1 + V / h)
    else:
        x += 2 * (s * b * V / tp + sbh)
    if not selective:
        x *= 1.05
    if t.get("params_dtype", "float32") == "float32":
        x *= 2
    return x


def divs(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def topologies(cfg, world):
    t = cfg["model"]["transformer"]
    heads, L = t["num_attention_heads"], t["num_layers"]
    g = t.get("num_query_groups") or heads
    ffn = t.get("ffn_hidden_size") or 4 * t["hidden_size"]
    out, refused = [], 0
    for tp in divs(world):
        if heads % tp or max(g, tp) % min(g, tp):
            continue
        for pp in divs(world // tp):
            if L % pp:
                continue
            for cp in divs(world // tp // pp):
                dp = world // (tp * pp * cp)
                if cp > 1 and cfg["sequence_length"] % (2 * cp):
                    continue
                if cfg["global_batch_size"] % (cfg["micro_batch_size"] * dp):
                    continue
                nmb = cfg["global_batch_size"] // (cfg["micro_batch_size"] * dp)
                if nmb < pp:
                    continue
                # snn's own TransformerConfig checks: the layers must split over TP
                if g % tp or ffn % tp:
                    refused += 1
                    continue
                out.append((tp, pp, cp, dp, nmb))
    return out, refused


def all_estimates(cfg, world):
    """[(pass, topology, params, acts)] for every estimate both passes would compute."""
    t = cfg["model"]["transformer"]
    tops, refused = topologies(cfg, world)
    est = []
    for sel in (0, 1):
        for tp, pp, cp, dp, nmb in tops:
            if sel and (t.get("fp8") or cp > 1):
                continue
            est.append((sel, (tp, pp, cp, dp, nmb), param_bytes(cfg, tp, pp, dp * cp), act_bytes(cfg, tp, pp, cp, nmb, sel)))
    return tops, refused, est


def plan(cfg, world, budget, objective):
    tops, refused, est = all_estimates(cfg, world)
    if not tops:
        return dict(kind="none", refused=refused)
    smallest = math.inf
    for sel in (0, 1):
        here = [e for e in est if e[0] == sel]
        smallest = min([smallest] + [p + a for _, _, p, a in here])
        fit = [e for e in here if e[2] + e[3] <= budget]
        if fit:
            if objective == "throughput":
                key = lambda e: (e[1][1], e[1][2], e[1][0], e[2] + e[3])
            else:
                key = lambda e: (e[2] + e[3], e[1][1], e[1][2], e[1][0])
            e = min(fit, key=key)
            return dict(kind="ok", sel=sel, top=e[1], params=e[2], acts=e[3], topologies=len(tops),
                        estimates=sum(1 for x in est if x[0] <= sel), refused=refused)
    return dict(kind="nofit", budget=budget, smallest=smallest, topologies=len(tops), refused=refused)


# ---- random configs ------------------------------------------------------------------------


def random_config():
    kind = rng.choice(["spikelm", "spikelm", "gpt"])
    heads = rng.choice([1, 2, 3, 4, 6, 8, 12, 16])
    groups = rng.choice([0] + [d for d in divs(heads)])
    pos = rng.choice(["rope", "learned_absolute"])
    if rng.random() < 0.5:
        kv = 0
        head_dim = rng.choice([2, 4, 8, 16, 32, 64]) if pos == "rope" else rng.randrange(1, 65)
        hidden = head_dim * heads
    else:
        kv = rng.choice([8, 16, 32, 40, 64])
        hidden = rng.randrange(8, 1025)
    ffn = 0 if rng.random() < 0.4 else rng.randrange(1, 4097)
    prec = rng.choice(["fp32", "bf16", "bf16", "fp16"])
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[prec]
    t = {
        "_target_": "snn.lm.TransformerConfig",
        "num_layers": rng.choice([1, 2, 3, 4, 6, 8, 12, 24]),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "activation": rng.choice(["gelu", "swiglu"]),
        "normalization": "LayerNorm" if kind == "spikelm" else rng.choice(["LayerNorm", "RMSNorm"]),
        "calculate_per_token_loss": True,
        "fp16": prec == "fp16",
        "bf16": prec == "bf16",
        "params_dtype": dtype,
        "pipeline_dtype": dtype,
    }
    if groups:
        t["num_query_groups"] = groups
    if kv:
        t["kv_channels"] = kv
    if ffn:
        t["ffn_hidden_size"] = ffn
    if prec == "bf16" and rng.random() < 0.3:
        t["fp8"] = "hybrid"
    if rng.random() < 0.2:  # a recompute policy of its own, which the planner replaces
        t["recompute_granularity"] = "full"
        t["recompute_method"] = "uniform"
        t["recompute_num_layers"] = 1
    max_len = rng.choice([64, 127, 128, 256, 1000, 2048, 4096])
    seq = rng.choice([max_len, max_len // 2, rng.randrange(1, max_len + 1)])
    micro = rng.choice([1, 1, 2, 3, 4])
    cfg = {
        "_target_": "snn.lm.TrainingConfig",
        "model": {
            "_target_": "snn.lm.SpikeLMConfig" if kind == "spikelm" else "snn.lm.GPTConfig",
            "transformer": t,
            "vocab_size": rng.choice([64, 257, 1000, 4096, 32000, 50257]),
            "max_sequence_length": max_len,
            "time_steps": rng.randrange(1, 7) if kind == "spikelm" else 1,
            "share_embeddings_and_output_weights": rng.random() < 0.5,
            "position_embedding_type": pos,
        },
        "optimizer": {
            "_target_": "snn.lm.OptimizerConfig", "lr": 1e-3, "min_lr": 1e-4, "fp16": prec == "fp16",
            "bf16": prec == "bf16", "params_dtype": dtype, "use_distributed_optimizer": True,
        },
        "dataset_kwargs": {"path": "data"},
        "sequence_length": seq,
        "micro_batch_size": micro,
        "global_batch_size": micro * rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 32]),
        "train_steps": 10,
        "use_snn_memopt": rng.random() < 0.3 and "recompute_granularity" not in t,
    }
    return cfg


def pick_budget(cfg, world):
    """Bytes around the model's own estimates, so each branch is drawn."""
    _, _, est = all_estimates(cfg, world)
    p1 = sorted(p + a for s, _, p, a in est if s == 0)
    p2 = sorted(p + a for s, _, p, a in est if s == 1)
    r = rng.random()
    if not p1:
        return rng.randrange(1, 1 << 34)
    if r < 0.3:  # somewhere among the pass-1 estimates
        v = rng.uniform(p1[0], p1[-1] * 1.2)
    elif r < 0.55 and p2 and p2[0] < p1[0]:  # only the selective pass can fit
        v = rng.uniform(p2[0], p1[0])
    elif r < 0.7:  # nothing fits
        v = rng.uniform(1, min(p1[0], p2[0] if p2 else math.inf))
    else:
        v = p1[-1] * rng.uniform(1, 1000)
    return max(1, int(v))


def parse_err(text):
    m = re.search(r"tensor (\d+) x pipeline (\d+) x context (\d+) x data (\d+) \((\d+) microbatches\), "
                  r"recompute (none|selective core_attn), use_snn_memopt (true|false); estimate (\S+) bytes .*"
                  r"= parameters (\S+) \+ activations (\S+); budget (\S+) bytes .*; (\d+) topologies, (\d+) refused "
                  r"by validation, (\d+) estimates", text)
    return m


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


seen = {"ok0": 0, "ok1": 0, "nofit": 0, "none": 0, "refused": 0}
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "c.json")
    for case in range(400):
        cfg = random_config()
        world = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48])
        objective = rng.choice(["throughput", "memory"])
        frac = rng.choice([1.0, 0.9, rng.uniform(0.05, 1.0)])
        dev = pick_budget(cfg, world)
        # bytes/2^30 is exact in binary and repr() round-trips it, so the CLI gets exactly dev bytes
        gib = repr(dev / 2**30)
        with open(path, "w") as f:
            json.dump(cfg, f)
        budget = dev * frac
        want = plan(cfg, world, budget, objective)
        cmd = [SNN, "lm", "plan", "--world-size", str(world), "--device-memory-gib", gib, "--objective", objective,
               "--memory-fraction", repr(frac), path]
        r = subprocess.run(cmd, capture_output=True, text=True)
        label = f"case {case} (world {world}, {objective}, budget {budget:.0f})"
        if want["refused"]:
            seen["refused"] += 1
        if want["kind"] == "none":
            seen["none"] += 1
            check(r.returncode == 2 and r.stdout == "", f"{label}: want exit 2, got {r.returncode}")
            check(r.stderr.count("\n") == 1 and r.stderr.startswith(
                "snn: error: lm plan: No topology satisfies the model and batch constraints."), f"{label}: {r.stderr}")
            continue
        if want["kind"] == "nofit":
            seen["nofit"] += 1
            m = re.fullmatch(r"snn: error: lm plan: No topology fits the memory budget: budget=(\d+) bytes, "
                             r"smallest estimate=(\d+) bytes\.\n", r.stderr)
            check(r.returncode == 2 and m is not None, f"{label}: want no fit, got {r.returncode}: {r.stderr}")
            if m:
                check(abs(int(m.group(1)) - int(budget)) <= max(1, 1e-12 * budget), f"{label}: budget {m.group(1)}")
                check(close(int(m.group(2)), int(want["smallest"]), 1e-12) or abs(int(m.group(2)) - int(want["smallest"])) <= 1,
                      f"{label}: smallest {m.group(2)} vs {want['smallest']}")
            continue
        seen["ok%d" % want["sel"]] += 1
        check(r.returncode == 0, f"{label}: exit {r.returncode}: {r.stderr.strip()}")
        if r.returncode:
            continue
        out = json.loads(r.stdout)
        t = out["model"]["transformer"]
        tp, pp, cp, dp, nmb = want["top"]
        check((t["tensor_model_parallel_size"], t["pipeline_model_parallel_size"], t["context_parallel_size"]) == (tp, pp, cp),
              f"{label}: chose TP/PP/CP {t['tensor_model_parallel_size']}/{t['pipeline_model_parallel_size']}/"
              f"{t['context_parallel_size']}, model {tp}/{pp}/{cp}")
        check(t["sequence_parallel"] == (tp > 1), f"{label}: sequence_parallel")
        check(t["recompute_granularity"] == ("selective" if want["sel"] else None), f"{label}: recompute {t['recompute_granularity']}")
        check(t["recompute_modules"] == ["core_attn"] and t["recompute_method"] is None and t["recompute_num_layers"] is None,
              f"{label}: recompute fields")
        memopt = bool(cfg["use_snn_memopt"] or objective == "memory" or want["sel"])
        check(out["use_snn_memopt"] == memopt, f"{label}: use_snn_memopt {out['use_snn_memopt']} want {memopt}")
        check(t["pipeline_dtype"] == cfg["model"]["transformer"]["params_dtype"], f"{label}: pipeline_dtype")
        # everything else is the input's
        for k in ("sequence_length", "micro_batch_size", "global_batch_size", "train_steps"):
            check(out[k] == cfg[k], f"{label}: {k}")
        for k in ("num_layers", "hidden_size", "num_attention_heads", "params_dtype"):
            check(t[k] == cfg["model"]["transformer"][k], f"{label}: transformer.{k}")
        check(t["fp8"] == cfg["model"]["transformer"].get("fp8"), f"{label}: fp8")
        check(out["model"]["vocab_size"] == cfg["model"]["vocab_size"], f"{label}: vocab")
        m = parse_err(r.stderr)
        check(m is not None, f"{label}: stderr line: {r.stderr}")
        if not m:
            continue
        check(tuple(int(m.group(i)) for i in range(1, 6)) == (tp, pp, cp, dp, nmb), f"{label}: stderr topology")
        check(close(float(m.group(8)), want["params"] + want["acts"]), f"{label}: estimate {m.group(8)} vs {want['params'] + want['acts']}")
        check(close(float(m.group(9)), want["params"]), f"{label}: parameters {m.group(9)} vs {want['params']}")
        check(close(float(m.group(10)), want["acts"]), f"{label}: activations {m.group(10)} vs {want['acts']}")
        check(close(float(m.group(11)), budget, 1e-15), f"{label}: budget")
        check(int(m.group(12)) == want["topologies"], f"{label}: topologies {m.group(12)} vs {want['topologies']}")
        check(int(m.group(13)) == want["refused"], f"{label}: refused {m.group(13)} vs {want['refused']}")
        check(int(m.group(14)) == want["estimates"], f"{label}: estimates {m.group(14)} vs {want['estimates']}")

print("oracle_lm_plan: branches seen", seen)
for k, v in seen.items():
    check(v > 0, f"the random cases never reached branch {k}")
print(f"oracle_lm_plan: {checks} checks, {failures} failures")
sys.exit(1 if failures else 0)
