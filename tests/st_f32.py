"""The F32 tensors of a safetensors file (8-byte little-endian header length, the JSON
header, then the raw data), read without the safetensors package, and the worst per-tensor
relative difference of two such files. Used by the distributed CLI tests."""
import json
import struct


def tensors(path):
    """{name: tuple of floats} for every F32 tensor whose name does not start with "__"."""
    d = open(path, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__" or k.startswith("__") or v["dtype"] != "F32":
            continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), d[8 + n + s:8 + n + e])
    return out


def worst_rel(a_path, b_path):
    """max over tensors of max |a - b| / max |b| (the files must hold the same names)."""
    ta, tb = tensors(a_path), tensors(b_path)
    assert ta.keys() == tb.keys() and ta, (sorted(ta), sorted(tb))
    w = 0.0
    for k in ta:
        top = max(abs(v) for v in tb[k]) or 1.0
        w = max(w, max(abs(x - y) for x, y in zip(ta[k], tb[k])) / top)
    return w, len(ta)
