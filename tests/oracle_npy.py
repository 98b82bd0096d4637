"""Oracle test: snn's .npy reader/writer and token dataset against NumPy.

Usage: python3 tests/oracle_npy.py <build_dir>   (exit 0 = pass)

* NumPy writes fresh random int32 / int64 / uint16 2-D arrays (np.save, and format versions
  1.0, 2.0 and 3.0 through numpy.lib.format.write_array); snn reads the same values.
* snn writes random arrays; np.load reads the same values, shape and dtype.
* Malformed files (made from NumPy's own output) are refused with exit 1 and a message:
  big-endian, Fortran order, 1-D, 3-D, float, truncated, one extra byte, bad magic, version
  4.0, header without newline, misaligned data, shape products that overflow, huge
  header length, unknown and repeated keys.
* A token dataset directory written by NumPy: sample i equals row i mod N [:-1] / [1:] for
  random i (also beyond N); values outside the vocabulary are refused.
"""
import io
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != "/usr/bin/python3" \
            and not os.environ.get("SNN_ORACLE_REEXEC"):
        os.environ["SNN_ORACLE_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("oracle_npy: NumPy is needed (python3-numpy)", file=sys.stderr)
    sys.exit(1)

build = sys.argv[1]
drv = os.path.join(build, "driver_npy")
seed = int.from_bytes(os.urandom(4), "little")
rng = np.random.default_rng(seed)
prng = random.Random(seed)
print("oracle_npy: seed", seed)
fails = checks = 0
tmp = tempfile.mkdtemp(prefix="snn_npy_")


def check(cond, what):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", what, file=sys.stderr)


def c_read(path):
    r = subprocess.run([drv, "read", path], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


kinds = {"i4": np.int32, "i8": np.int64, "u2": np.uint16}


def rand_array(k, rows, cols):
    info = np.iinfo(kinds[k])
    return rng.integers(info.min, info.max, size=(rows, cols), dtype=kinds[k], endpoint=True)


# NumPy writes, snn reads
for trial in range(24):
    k = prng.choice(list(kinds))
    rows, cols = prng.randrange(0, 40), prng.randrange(1, 40)
    if trial < 3:
        rows = 0 if trial == 0 else rows
    a = rand_array(k, rows, cols)
    path = os.path.join(tmp, "np%d.npy" % trial)
    version = [None, (1, 0), (2, 0), (3, 0)][trial % 4]
    if version is None:
        np.save(path, a)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, a, version=version)
    rc, out, err = c_read(path)
    lines = out.split("\n")
    ok = rc == 0 and lines[0] == "%s %d %d" % (k, rows, cols)
    vals = [int(v) for v in lines[1].split()] if ok and lines[1] else []
    check(ok and vals == [int(v) for v in a.reshape(-1)], f"read {k} {rows}x{cols} v{version}: {err} {lines[0]}")

# a wide header (2.0 needed): many columns do not matter, but a long shape does not exist for
# 2-D; instead check that np.load accepts what snn writes, for every dtype
for trial in range(12):
    k = prng.choice(list(kinds))
    rows, cols = prng.randrange(0, 30), prng.randrange(1, 30)
    a = rand_array(k, rows, cols)
    path = os.path.join(tmp, "c%d.npy" % trial)
    r = subprocess.run([drv, "write", path, k, str(rows), str(cols)], input=" ".join(str(int(v)) for v in a.reshape(-1)),
                       capture_output=True, text=True)
    check(r.returncode == 0, "write: " + r.stderr)
    if r.returncode == 0:
        b = np.load(path)
        check(b.dtype == kinds[k] and b.shape == (rows, cols) and np.array_equal(a, b), f"np.load of snn's {k} file")
        raw = open(path, "rb").read()
        check(raw[:8] == b"\x93NUMPY\x01\x00" and (10 + int.from_bytes(raw[8:10], "little")) % 64 == 0, "snn's header")

# malformed files
good = io.BytesIO()
np.save(good, rand_array("i4", 3, 5))
good = good.getvalue()
hl = int.from_bytes(good[8:10], "little")
header = good[10:10 + hl]
data = good[10 + hl:]


def with_header(h, version=1, body=data, pad=True):
    h = h.rstrip(b" \n")
    pre = 10 if version == 1 else 12
    if pad:
        h = h + b" " * ((-(pre + len(h) + 1)) % 64) + b"\n"
    ln = len(h).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + ln + h + body


def save_bytes(arr, **kw):
    b = io.BytesIO()
    np.save(b, arr, **kw)
    return b.getvalue()


bad = {
    "big-endian": save_bytes(rand_array("i4", 2, 3).astype(">i4")),
    "fortran": save_bytes(np.asfortranarray(rand_array("i4", 3, 4))),
    "1-D": save_bytes(rand_array("i4", 1, 6).reshape(-1)),
    "3-D": save_bytes(rand_array("i4", 6, 4).reshape(2, 3, 4)),
    "float": save_bytes(rng.random((2, 3), dtype=np.float32)),
    "uint8": save_bytes(rand_array("u2", 2, 3).astype(np.uint8)),
    "truncated": good[:-1],
    "extra byte": good + b"\x00",
    "magic": b"\x92" + good[1:],
    "version 4.0": good[:6] + b"\x04\x00" + good[8:],
    "minor 1": good[:6] + b"\x01\x01" + good[8:],
    "no newline": good[:10 + hl - 1] + b" " + data,
    "misaligned": with_header(header + b"  ", pad=False),
    "overflow": with_header(b"{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }"),
    "overflow2": with_header(b"{'descr': '<i8', 'fortran_order': False, 'shape': (99999999999999999999, 1), }"),
    "negative": with_header(b"{'descr': '<i4', 'fortran_order': False, 'shape': (-3, 5), }"),
    "unknown key": with_header(b"{'descr': '<i4', 'fortran_order': False, 'shape': (3, 5), 'x': 1, }"),
    "repeated key": with_header(b"{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (3, 5), }"),
    "missing key": with_header(b"{'descr': '<i4', 'shape': (3, 5), }"),
    "fortran string": with_header(b"{'descr': '<i4', 'fortran_order': 'False', 'shape': (3, 5), }"),
    "junk after": with_header(b"{'descr': '<i4', 'fortran_order': False, 'shape': (3, 5), } x"),
    "leading zero": with_header(b"{'descr': '<i4', 'fortran_order': False, 'shape': (03, 5), }"),
    "huge header": good[:8] + b"\xff\xff\xff\x7f" + good[12:],
    "header past end": b"\x93NUMPY\x02\x00" + (1 << 20).to_bytes(4, "little") + b"{",
    "shape mismatch": with_header(b"{'descr': '<i4', 'fortran_order': False, 'shape': (3, 6), }"),
    "empty": b"",
}
# a valid variant written by hand must be accepted (no trailing comma, version 2.0, double quotes)
okv = {
    "v2 handmade": with_header(b'{"descr": "<i4", "shape": (3, 5), "fortran_order": False}', version=2),
}
for name, blob in list(bad.items()) + list(okv.items()):
    path = os.path.join(tmp, "bad.npy")
    open(path, "wb").write(blob)
    rc, out, err = c_read(path)
    if name in okv:
        check(rc == 0 and out.split("\n")[0] == "i4 3 5", f"{name} accepted: {err}")
    else:
        check(rc == 1 and err.strip() and "\n" not in err.strip(), f"malformed '{name}' refused (rc {rc}, {err!r})")

# the token dataset
d = os.path.join(tmp, "tok")
os.makedirs(d)
V = 300
for split, dt in (("train", np.int32), ("valid", np.int64), ("test", np.uint16)):
    n, s1 = prng.randrange(1, 20), prng.randrange(2, 30)
    arr = rng.integers(0, V, size=(n, s1), dtype=dt)
    np.save(os.path.join(d, split + ".npy"), arr)
    idx = [prng.randrange(0, 10 * n) for _ in range(6)] + [0, n - 1, n]
    r = subprocess.run([drv, "sample", d, split, str(V)] + [str(i) for i in idx], capture_output=True, text=True)
    check(r.returncode == 0, "sample: " + r.stderr)
    lines = r.stdout.split("\n")
    for j, i in enumerate(idx):
        if r.returncode != 0:
            break
        row = arr[i % n]
        check(lines[3 * j] == "%d %d" % (n, s1 - 1), "dataset shape")
        check([int(v) for v in lines[3 * j + 1].split()] == [int(v) for v in row[:-1]], f"{split} input of sample {i}")
        check([int(v) for v in lines[3 * j + 2].split()] == [int(v) for v in row[1:]], f"{split} target of sample {i}")
    r = subprocess.run([drv, "sample", d, split, str(int(arr.max()))], capture_output=True, text=True)
    check(r.returncode == 1 and "outside" in r.stderr, "token >= vocab refused: " + r.stderr)
np.save(os.path.join(d, "train.npy"), np.array([[-1, 3]], dtype=np.int32))
r = subprocess.run([drv, "sample", d, "train", "0"], capture_output=True, text=True)
check(r.returncode == 1 and "outside" in r.stderr, "negative token refused")
np.save(os.path.join(d, "train.npy"), np.zeros((4, 1), dtype=np.int32))
r = subprocess.run([drv, "sample", d, "train", "0"], capture_output=True, text=True)
check(r.returncode == 1 and "(4, 1)" in r.stderr, "one column refused: " + r.stderr)
r = subprocess.run([drv, "sample", d, "dev", "0"], capture_output=True, text=True)
check(r.returncode == 1 and "split" in r.stderr, "unknown split refused")

print(f"oracle_npy: {checks} checks, {fails} failures")
sys.exit(1 if fails else 0)
