#!/usr/bin/env python3
"""Checkpoint oracle: an independent safetensors reader and writer (json + struct + NumPy,
plus torch for BF16 and the safetensors package when importable) against our C code.

A. Python makes random tensors, our writer packs them (test_checkpoint --pack), and this
   script parses the file itself and compares dtypes, shapes, values and metadata.
B. This script writes safetensors files its own way (other key order, other data order,
   ASCII-escaped unicode, padding), our reader unpacks them (test_checkpoint --unpack), and
   the tensors and metadata must come back unchanged.
C. Files this script breaks on purpose must be refused with SNN_E_FORMAT.

usage: oracle_checkpoint.py BUILD_DIR   (exit 0 = pass)
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    # A Python without NumPy (e.g. a pyenv shim) may shadow Debian's; use Debian's.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("oracle_checkpoint: NumPy is required (apt-get install python3-numpy)")
    sys.exit(1)

try:
    import torch
except ImportError:
    torch = None
try:
    import safetensors.numpy as st_numpy
except ImportError:
    st_numpy = None

NP_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
    "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}
RAW_DTYPES = {"BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
SIZES = {k: np.dtype(v).itemsize for k, v in NP_DTYPES.items()}
SIZES.update(RAW_DTYPES)

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def random_tensor(rng, dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    if dtype in ("F64", "F32", "F16"):
        a = (rng.standard_normal(n) * 10).astype(NP_DTYPES[dtype])
        return a.reshape(shape).tobytes()
    if dtype == "BOOL":
        return rng.integers(0, 2, n).astype("?").tobytes()
    if dtype == "BF16":
        if torch is not None:
            t = torch.from_numpy(rng.standard_normal(n).astype("<f4")).to(torch.bfloat16)
            return t.view(torch.int16).numpy().astype("<i2").tobytes()
        return rng.integers(0, 65536, n).astype("<u2").tobytes()
    if dtype in RAW_DTYPES:
        return rng.integers(0, 256, n * RAW_DTYPES[dtype]).astype("u1").tobytes()
    info = np.iinfo(np.dtype(NP_DTYPES[dtype]))
    return rng.integers(info.min, info.max, n, dtype=np.dtype(NP_DTYPES[dtype]), endpoint=True).tobytes()


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key in the header")
    return dict(pairs)


def parse_safetensors(path):
    """Our own reader: returns (metadata, {name: (dtype, shape, bytes)}), checking the layout."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header_bytes = blob[8:8 + n]
    check(len(header_bytes) == n, "header length beyond the file")
    check(n % 8 == 0, "header not padded to 8 bytes (data start unaligned)")
    header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=no_duplicates)
    meta = header.pop("__metadata__", {})
    check(all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()), "metadata not str->str")
    data = blob[8 + n:]
    spans = []
    out = {}
    for name, info in header.items():
        check(set(info) == {"dtype", "shape", "data_offsets"}, "unexpected keys for %r: %s" % (name, list(info)))
        b, e = info["data_offsets"]
        size = SIZES[info["dtype"]] * (int(np.prod(info["shape"])) if info["shape"] else 1)
        check(e - b == size, "tensor %r: span %d != %d" % (name, e - b, size))
        check(b % SIZES[info["dtype"]] == 0, "tensor %r: unaligned offset %d" % (name, b))
        spans.append((b, e))
        out[name] = (info["dtype"], list(info["shape"]), data[b:e])
    spans.sort()
    pos = 0
    for b, e in spans:
        check(b == pos, "data not contiguous at %d (expected %d)" % (b, pos))
        pos = e
    check(pos == len(data), "data region %d bytes, tensors cover %d" % (len(data), pos))
    return meta, out


def run(exe, *args):
    return subprocess.run([exe] + list(args), capture_output=True, text=True, timeout=60)


def make_cases(rng):
    names = ["layers.0.weight", "layers.0.bias", "blocks.3.attn.qkv.weight", "caf\u00e9 \u20ac",
             "emoji \U0001F600", "quote\" back\\slash", "scalar", "empty", "x" * 300]
    dtypes = list(SIZES)
    cases = []
    for i, name in enumerate(names):
        dtype = dtypes[i % len(dtypes)] if i < len(names) - 3 else rng.choice(dtypes)
        if name == "scalar":
            shape = []
        elif name == "empty":
            shape = [3, 0, 2]
        else:
            shape = [int(d) for d in rng.integers(1, 6, int(rng.integers(1, 5)))]
        cases.append((name, dtype, shape, random_tensor(rng, dtype, shape)))
    for dtype in dtypes:  # every dtype at least once
        shape = [int(rng.integers(1, 7)), int(rng.integers(1, 7))]
        cases.append(("all." + dtype, dtype, shape, random_tensor(rng, dtype, shape)))
    meta = {"format": "oracle", "snn_model_config": json.dumps({"model": "fcsnn", "hidden": 16}),
            "unicode \u00e9": "line\nbreak\ttab \u20ac \U0001F600", "empty": ""}
    return cases, meta


def compare_values(name, dtype, shape, got, want):
    if dtype in NP_DTYPES:
        a = np.frombuffer(got, NP_DTYPES[dtype]).reshape(shape)
        b = np.frombuffer(want, NP_DTYPES[dtype]).reshape(shape)
        check(np.array_equal(a, b, equal_nan=dtype.startswith("F")), "values of %r differ" % name)
    elif dtype == "BF16" and torch is not None:
        a = torch.frombuffer(bytearray(got), dtype=torch.bfloat16) if got else torch.zeros(0, dtype=torch.bfloat16)
        b = torch.frombuffer(bytearray(want), dtype=torch.bfloat16) if want else torch.zeros(0, dtype=torch.bfloat16)
        check(torch.equal(a.float(), b.float()), "bf16 values of %r differ" % name)
    check(got == want, "bytes of %r differ" % name)


def direction_a(exe, tmp, rng):
    cases, meta = make_cases(rng)
    manifest = os.path.join(tmp, "pack.txt")
    with open(manifest, "w") as f:
        for i, (name, dtype, shape, raw) in enumerate(cases):
            p = os.path.join(tmp, "in%d.bin" % i)
            open(p, "wb").write(raw)
            f.write("t %s %s %d %s %s\n" % (name.encode().hex(), dtype, len(shape), " ".join(map(str, shape)), p))
        for k, v in meta.items():
            f.write("m %s %s\n" % (k.encode().hex(), v.encode().hex() or "-"))
    out = os.path.join(tmp, "ours.safetensors")
    r = run(exe, "--pack", out, manifest)
    check(r.returncode == 0, "pack failed: %s %s" % (r.stdout, r.stderr))
    if r.returncode:
        return
    check(not [x for x in os.listdir(tmp) if ".tmp." in x], "temporary file left behind")
    got_meta, tensors = parse_safetensors(out)
    check(got_meta == meta, "metadata differs: %r" % got_meta)
    check(set(tensors) == {c[0] for c in cases}, "tensor names differ")
    for name, dtype, shape, raw in cases:
        if name not in tensors:
            continue
        gd, gs, gb = tensors[name]
        check(gd == dtype and gs == shape, "%r: %s %s != %s %s" % (name, gd, gs, dtype, shape))
        compare_values(name, dtype, shape, gb, raw)
    if st_numpy is not None:  # the reference implementation, when installed
        loaded = st_numpy.load_file(out)
        for name, dtype, shape, raw in cases:
            if dtype in NP_DTYPES:
                check(np.array_equal(loaded[name], np.frombuffer(raw, NP_DTYPES[dtype]).reshape(shape),
                                     equal_nan=True), "safetensors package: %r differs" % name)
    print("A: our writer -> Python reader: %d tensors, %d metadata keys checked%s" %
          (len(cases), len(meta), "" if st_numpy is None else " (and with the safetensors package)"))


def write_safetensors(path, cases, meta, rng, pad=True, ensure_ascii=True):
    """Our own writer: data in a shuffled order, header keys in another shuffled order."""
    order = list(range(len(cases)))
    rng.shuffle(order)
    offsets, pos, data = {}, 0, b""
    for i in order:
        name, dtype, shape, raw = cases[i]
        offsets[name] = (pos, pos + len(raw))
        data += raw
        pos += len(raw)
    keys = list(range(len(cases)))
    rng.shuffle(keys)
    header = {}
    if meta is not None:
        header["__metadata__"] = meta
    for i in keys:
        name, dtype, shape, raw = cases[i]
        header[name] = {"shape": shape, "data_offsets": list(offsets[name]), "dtype": dtype}
    hb = json.dumps(header, ensure_ascii=ensure_ascii, indent=1 if not pad else None).encode("utf-8")
    if pad:
        hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)


def read_unpacked(d):
    tensors, meta = {}, {}
    for line in open(os.path.join(d, "manifest.txt")):
        parts = line.split()
        if parts[0] == "t":
            idx, name, dtype, rank = parts[1], bytes.fromhex(parts[2]).decode(), parts[3], int(parts[4])
            shape = [int(x) for x in parts[5:5 + rank]]
            tensors[name] = (dtype, shape, open(os.path.join(d, idx + ".bin"), "rb").read())
        elif parts[0] == "m":
            k = bytes.fromhex(parts[1]).decode()
            meta[k] = "" if parts[2] == "-" else bytes.fromhex(parts[2]).decode()
    return tensors, meta


def direction_b(exe, tmp, rng):
    n = 0
    for variant in range(4):
        cases, meta = make_cases(rng)
        path = os.path.join(tmp, "py%d.safetensors" % variant)
        write_safetensors(path, cases, meta if variant != 3 else None, rng,
                          pad=variant % 2 == 0, ensure_ascii=variant < 2)
        d = os.path.join(tmp, "un%d" % variant)
        os.mkdir(d)
        r = run(exe, "--unpack", path, d)
        check(r.returncode == 0, "unpack of a Python-written file failed: %s %s" % (r.stdout, r.stderr))
        if r.returncode:
            continue
        tensors, got_meta = read_unpacked(d)
        check(got_meta == (meta if variant != 3 else {}), "metadata differs after unpack: %r" % got_meta)
        check(set(tensors) == {c[0] for c in cases}, "names differ after unpack")
        for name, dtype, shape, raw in cases:
            if name in tensors:
                gd, gs, gb = tensors[name]
                check(gd == dtype and gs == shape, "unpacked %r: %s %s != %s %s" % (name, gd, gs, dtype, shape))
                compare_values(name, dtype, shape, gb, raw)
        n += 1
    print("B: Python writer -> our reader: %d files checked" % n)


def direction_c(exe, tmp, rng):
    cases, meta = make_cases(rng)
    good = os.path.join(tmp, "good.safetensors")
    write_safetensors(good, cases, meta, rng)
    blob = open(good, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    bad = {}
    bad["truncated"] = blob[:-1]
    bad["extra byte"] = blob + b"\0"
    bad["length past end"] = struct.pack("<Q", len(blob)) + blob[8:]
    first = [k for k in header if k != "__metadata__"][0]

    def with_header(h):
        hb = json.dumps(h).encode()
        return struct.pack("<Q", len(hb)) + hb + blob[8 + n:]

    h = json.loads(json.dumps(header)); h[first]["dtype"] = "F128"; bad["unknown dtype"] = with_header(h)
    h = json.loads(json.dumps(header)); h[first]["shape"] = [2 ** 40, 2 ** 40]; bad["huge shape"] = with_header(h)
    h = json.loads(json.dumps(header)); h[first]["data_offsets"][1] += 1; bad["offset off by one"] = with_header(h)
    h = json.loads(json.dumps(header)); h["__metadata__"]["x"] = 5; bad["metadata number"] = with_header(h)
    bad["list header"] = (lambda hb: struct.pack("<Q", len(hb)) + hb)(b"[1, 2, 3]")
    for what, data in bad.items():
        p = os.path.join(tmp, "bad.safetensors")
        open(p, "wb").write(data)
        d = os.path.join(tmp, "badout")
        os.makedirs(d, exist_ok=True)
        r = run(exe, "--unpack", p, d)
        check(r.returncode == 3 and r.stdout.startswith("ERROR SNN_E_FORMAT") and p in r.stdout,
              "%s: expected SNN_E_FORMAT naming the file, got rc=%d %r" % (what, r.returncode, r.stdout))
    print("C: %d broken files refused" % len(bad))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    exe = os.path.join(sys.argv[1], "test_checkpoint")
    if not os.path.exists(exe):
        print("oracle_checkpoint: %s not built" % exe)
        return 1
    seed = int(os.environ.get("SNN_TEST_SEED", random.SystemRandom().randrange(2 ** 32)))
    print("oracle_checkpoint: SNN_TEST_SEED=%d, torch %s, safetensors package %s" %
          (seed, "yes" if torch is not None else "no", "yes" if st_numpy is not None else "no (not in Debian)"))
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        direction_a(exe, tmp, rng)
        direction_b(exe, tmp, rng)
        direction_c(exe, tmp, rng)
    print("oracle_checkpoint: %s" % ("FAIL (%d)" % failures if failures else "pass"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
