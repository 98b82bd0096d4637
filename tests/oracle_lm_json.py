"""Oracle test: SHA-256 against Python's hashlib, canonical JSON against Python's json.

Usage: python3 tests/oracle_lm_json.py <build_dir>   (exit 0 = pass)

* SHA-256 of fresh random byte strings (lengths around the 55/56/64-byte padding edges and
  up to 1 MiB), fed to the C code in uneven pieces, must equal hashlib.sha256.
* Random JSON documents (nested objects and arrays, non-ASCII and control characters in
  keys and strings, integers up to 2^53 and beyond, floats over many magnitudes, written
  unsorted and indented) canonicalised by the C code must equal
  json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")).
* A TrainingConfig recipe printed by the C code is already in that canonical form, and its
  printed SHA-256 is hashlib's of those bytes.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

build = sys.argv[1]
drv = os.path.join(build, "driver_lm_json")
rng = random.Random(int.from_bytes(os.urandom(8), "little"))
fails = 0
checks = 0


def check(cond, what):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", what, file=sys.stderr)


def run(mode, data):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
        path = f.name
    try:
        r = subprocess.run([drv, mode, path], capture_output=True)
    finally:
        os.unlink(path)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


lengths = [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4095, 65537, 1 << 20]
lengths += [rng.randrange(0, 5000) for _ in range(12)]
for n in lengths:
    data = os.urandom(n)
    rc, out, err = run("sha256", data)
    want = hashlib.sha256(data).hexdigest()
    check(rc == 0 and out.split() == [want, want], f"sha256 of {n} random bytes: {out.strip()} vs {want} {err}")


def rand_str():
    alphabet = "abcXYZ _-\"\\/\n\t\r\b\f\x01\x1f\x7f\u00e9\u20ac\u4e2d\U0001F600\U00010348"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))


def rand_float():
    k = rng.randrange(6)
    if k == 0:
        return float(rng.randrange(-10 ** 6, 10 ** 6))
    if k == 1:
        return rng.uniform(-1, 1) * 10 ** rng.randrange(-30, 30)
    if k == 2:
        return rng.choice([0.0, -0.0, 1e16, 1e15, 1e-4, 1e-5, 0.1, 1 / 3, 2.5e-7, 123456789012345678.0])
    if k == 3:
        return rng.uniform(-1e300, 1e300)
    if k == 4:
        return float.fromhex("0x1.%013xp%d" % (rng.getrandbits(52), rng.randrange(-1070, 1020)))
    return rng.random()


def rand_value(depth=0):
    k = rng.randrange(8 if depth < 4 else 5)
    if k == 0:
        return rng.randrange(-2 ** 53, 2 ** 53)
    if k == 1:
        return rand_float()
    if k == 2:
        return rand_str()
    if k == 3:
        return rng.choice([True, False, None])
    if k == 4:
        return rng.randrange(-1000, 1000) * 10 ** rng.randrange(0, 25)  # big integers stay exact
    if k == 5:
        return [rand_value(depth + 1) for _ in range(rng.randrange(0, 5))]
    return {rand_str() + str(i): rand_value(depth + 1) for i in range(rng.randrange(0, 6))}


for i in range(150):
    obj = {("k%d" % j) + rand_str(): rand_value(1) for j in range(rng.randrange(1, 8))}
    text = json.dumps(obj, indent=rng.choice([None, 1, 3]), ensure_ascii=rng.random() < 0.5)
    want = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    rc, out, err = run("canon", text.encode("utf-8"))
    check(rc == 0 and out == want, f"canonical JSON #{i}:\n  in   {text[:300]}\n  got  {out[:300]}\n  want {want[:300]} {err}")

rc, out, err = run("canon", b'{"a":1,"a":2}')
check(rc != 0 and "twice" in err, "duplicate keys refused: " + err)
rc, out, err = run("canon", b'{"a":"\xff"}')
check(rc != 0, "invalid UTF-8 refused")

cfg = {
    "_target_": "snn.lm.TrainingConfig",
    "model": {"_target_": "snn.lm.SpikeLMConfig", "vocab_size": 257, "max_sequence_length": 64, "time_steps": 4,
              "spike_decay": rng.random(), "spike_amplitude": 0.5 + rng.random(),
              "transformer": {"_target_": "snn.lm.TransformerConfig", "num_layers": 2, "hidden_size": 64,
                              "num_attention_heads": 4, "calculate_per_token_loss": True, "bf16": True,
                              "params_dtype": "bfloat16", "layernorm_epsilon": rng.random() * 1e-4 + 1e-9}},
    "optimizer": {"_target_": "snn.lm.OptimizerConfig", "lr": 3e-4, "min_lr": 3e-5, "bf16": True,
                  "params_dtype": "bfloat16", "use_distributed_optimizer": True},
    "dataset_kwargs": {"path": "d\u00e9j\u00e0/tokens"},
    "sequence_length": 32, "micro_batch_size": 2, "global_batch_size": 8, "train_steps": 10,
}
rc, out, err = run("recipe", json.dumps(cfg).encode())
lines = out.split("\n")
check(rc == 0 and len(lines) >= 2, "recipe printed: " + err)
if rc == 0:
    recipe, digest = lines[0], lines[1]
    parsed = json.loads(recipe)
    check(json.dumps(parsed, sort_keys=True, separators=(",", ":")) == recipe, "recipe is canonical: " + recipe)
    check(hashlib.sha256(recipe.encode()).hexdigest() == digest, "recipe sha256")
    check(parsed["spike_decay"] == cfg["model"]["spike_decay"] and parsed["model"]["time_steps"] == 4
          and parsed["layernorm_epsilon"] == cfg["model"]["transformer"]["layernorm_epsilon"]
          and parsed["dataset_kwargs"]["path"] == "d\u00e9j\u00e0/tokens", "recipe values")

# the example recipe of docs/lm.md loads, and omitted keys hash like the full form
example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "examples", "lm-spikelm-fortunes.json")
rc, out, err = run("recipe", open(example, "rb").read())
check(rc == 0 and len(out.split("\n")[1]) == 64, "docs example recipe loads: " + err)

print(f"oracle_lm_json: {checks} checks, {fails} failures")
sys.exit(1 if fails else 0)
