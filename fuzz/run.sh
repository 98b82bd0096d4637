#!/bin/sh
# Build the libFuzzer targets with clang (ASan + UBSan) and run each for SECONDS seconds.
#   fuzz/run.sh [SECONDS] [TARGET...]     default: 60 s, all targets (idx ckpt digits npy model lmjson)
# Needs clang and libclang-rt-14-dev (Debian 12): apt-get install -y clang libclang-rt-14-dev
# Work files go to build-fuzz/ (git-ignored): binaries, corpora, crash reproducers.
# Not part of CTest. Exit status: non-zero when a target found a crash.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-idx ckpt digits npy model lmjson}
CC=${CC:-clang}
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz/run.sh: $CC not found; apt-get install -y clang libclang-rt-14-dev" >&2
  exit 2
fi
out=build-fuzz
mkdir -p "$out"
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c17
       -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc -Wno-unknown-pragmas"
data_src="src/data/dataset.c src/data/idx.c src/data/digits.c src/data/encode.c src/data/zsrc.c src/core/error.c src/core/rng.c src/core/file.c"
# shellcheck disable=SC2086
$CC $flags -o "$out/fuzz_idx" fuzz/fuzz_idx.c $data_src -lz -lm
# shellcheck disable=SC2086
$CC $flags -o "$out/fuzz_digits" fuzz/fuzz_digits.c $data_src -lz -lm
# The reader (checkpoint.c) links alone; the model half lives in checkpoint_model.c.
# shellcheck disable=SC2086
$CC $flags -o "$out/fuzz_ckpt" fuzz/fuzz_ckpt.c src/train/checkpoint.c src/core/error.c src/core/file.c \
  $(pkg-config --cflags --libs libcjson) -lm
# The model layer needs the whole library (no OpenMP: one thread, deterministic).
blas_inc=/usr/include/x86_64-linux-gnu/openblas-openmp
[ -f "$blas_inc/cblas.h" ] || blas_inc=/usr/include/x86_64-linux-gnu/openblas-pthread
lib_src="$(ls src/*/*.c src/backend/cpu/*.c)"
lib_flags="-I$blas_inc -DSNN_VERSION_STRING=\"fuzz\" -DSNN_BLAS_NAME=\"openblas\""
lib_libs="$(pkg-config --cflags --libs libcjson) -lopenblas -lgomp -lz -lm"
# shellcheck disable=SC2086
$CC $flags $lib_flags -o "$out/fuzz_model" fuzz/fuzz_model.c $lib_src $lib_libs
# Seeds for it: checkpoints of every model kind, written by the library itself.
# shellcheck disable=SC2086
$CC -g -O1 -std=c17 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc -Wno-unknown-pragmas $lib_flags \
  -o "$out/seed_model" fuzz/seed_model.c $lib_src $lib_libs
mkdir -p "$out/corpus_model"
"$out/seed_model" "$out/corpus_model"
# shellcheck disable=SC2086
$CC $flags -o "$out/fuzz_npy" fuzz/fuzz_npy.c src/data/npy.c src/data/tokens.c src/core/error.c src/core/file.c -lm
# shellcheck disable=SC2086
$CC $flags -o "$out/fuzz_lmjson" fuzz/fuzz_lmjson.c src/lm/lm_config.c src/lm/lm_config_json.c src/lm/tokenizer_*.c \
  src/core/json_canon.c src/core/sha256.c src/core/error.c src/core/file.c $(pkg-config --cflags --libs libcjson) -lm

# Seed corpora: small valid files of each kind (written by Python's struct/json).
python3 - "$out" <<'PY'
import gzip, json, os, struct, sys
out = sys.argv[1]
for t in ("idx", "ckpt", "digits", "npy", "lmjson"):
    os.makedirs(os.path.join(out, "corpus_" + t), exist_ok=True)
def put(t, name, data):
    open(os.path.join(out, "corpus_" + t, name), "wb").write(data)
n, h, w = 3, 4, 5
img = struct.pack(">IIII", 0x803, n, h, w) + bytes(range(n * h * w))
lab = struct.pack(">II", 0x801, n) + bytes([0, 1, 2])
put("idx", "images", img)
put("idx", "pair", struct.pack(">H", len(img)) + img + lab)
put("idx", "images.gz", gzip.compress(img))
def st(tensors, meta):
    header, data = {"__metadata__": meta}, b""
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + data
put("ckpt", "two", st({"a": ("F32", [2, 2], bytes(16)), "b": ("I32", [1], bytes(4))}, {"k": "v"}))
put("ckpt", "scalar", st({"s": ("F64", [], bytes(8)), "e": ("U8", [0], b"")}, {}))
put("ckpt", "empty", st({}, {"format": "snn-checkpoint-v1"}))
row = ",".join(str(i % 17) for i in range(64))
put("digits", "two.csv", (row + ",3\n" + row + ",7\n").encode())
put("digits", "one.csv.gz", gzip.compress((row + ",1\n").encode()))
def npy(descr, shape, raw, major=1):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pre = 10 if major == 1 else 12
    d = d + " " * (-(pre + len(d) + 1) % 64) + "\n"
    ln = struct.pack("<H", len(d)) if major == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([major, 0]) + ln + d.encode() + raw
put("npy", "i4", npy("<i4", "(2, 3)", struct.pack("<6i", 1, 2, 3, 4, 5, 6)))
put("npy", "i8v2", npy("<i8", "(1, 2)", struct.pack("<2q", 7, 300), 2))
put("npy", "u2", npy("<u2", "(3, 2)", struct.pack("<6H", 9, 8, 7, 6, 5, 4)))
put("npy", "empty", npy("<i4", "(0, 4)", b""))
ex = open("docs/examples/lm-spikelm-fortunes.json", "rb").read()
put("lmjson", "training", ex)
put("lmjson", "tokenizer", json.dumps({"type": "bpe", "version": 1, "vocab_size": 259, "eos_id": 258,
    "merges": [[97, 98], [256, 99]], "vocab": ["%02x" % i for i in range(256)] + ["6162", "616263", ""]}).encode())
put("lmjson", "floats", b'{"a":[1.0,1e-05,-0.0,12345678901234567890,"\\u00e9"]}')
PY

status=0
for t in $targets; do
  dict=""
  [ -f "fuzz/$t.dict" ] && dict="-dict=fuzz/$t.dict"
  mkdir -p "$out/crashes_$t"
  echo "== fuzz_$t for ${secs}s"
  # shellcheck disable=SC2086
  if ! "$out/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=4096 \
       -artifact_prefix="$out/crashes_$t/" $dict "$out/corpus_$t" >"$out/fuzz_$t.log" 2>&1; then
    echo "fuzz_$t: CRASH, reproducer in $out/crashes_$t/ (log: $out/fuzz_$t.log)"
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/fuzz_$t.log" | sed "s/^/fuzz_$t: /"
done
exit $status
