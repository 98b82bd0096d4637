#!/bin/bash
# snn lm prepare-data on real text (a few files of Debian's fortunes corpus, plus files
# that must be skipped): the token dataset and tokenizer are checked with NumPy and an
# independent decoder of tokenizer.json — rows [N, S+1] int32 with stride S, every
# complete document between EOS tokens decodes to exactly one fortune of the corpus, the
# splits hold disjoint documents, the meta counts and the unigram baseline are
# recomputed; runs are deterministic per seed; bad input exits 2 with one error line.
# Runs `snn lm prepare-data` when the build has the lm command; otherwise it links the
# command's file against the library into a small stand-in (same code, same argv).
set -u
B=${1:?build dir}
SRC=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
F=/usr/share/games/fortunes

if "$B/snn" lm prepare-data --help >/dev/null 2>&1; then
  run() { "$B/snn" lm prepare-data "$@"; }
else
  printf 'int snn_cmd_lm_prepare_data(int, char **);\nint main(int c, char **v) { return snn_cmd_lm_prepare_data(c, v); }\n' >"$tmp/m.c"
  san=""
  grep -q "^SNN_SANITIZE:BOOL=ON" "$B/CMakeCache.txt" 2>/dev/null && san="-fsanitize=address,undefined"
  if ! ${CC:-cc} $san -std=c17 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I"$SRC/include" -I"$SRC/src" -I"$SRC/tools/snn" \
      "$tmp/m.c" "$SRC/tools/snn/cmd_lm_data.c" "$SRC/tools/snn/args.c" "$B/libsnn.a" \
      $(pkg-config --cflags --libs libcjson) -lm -o "$tmp/prep"; then
    echo "FAIL: cannot build the stand-in" >&2; exit 1
  fi
  run() { "$tmp/prep" lm prepare-data "$@"; }
fi

check() { if ! eval "$2"; then echo "FAIL: $1" >&2; fail=1; fi; }
expect_error() {
  local what=$1 needle=$2; shift 2
  run "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^snn: error: ' "$tmp/err" ||
     ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL: $what: rc=$rc, expected exit 2 with '$needle'; stderr:" >&2; cat "$tmp/err" >&2; fail=1
  fi
}

if [ ! -f "$F/computers" ]; then
  echo "FAIL: the fortunes corpus is missing ($F; scripts/deps --test installs it)" >&2; exit 1
fi
mkdir "$tmp/corpus"
for f in computers linux science wisdom; do cp "$F/$f" "$tmp/corpus/"; done
cp "$F/computers.dat" "$tmp/corpus/"        # index file: skipped
echo "hidden" >"$tmp/corpus/.hidden"          # hidden: skipped
ln -s computers "$tmp/corpus/computers.u8"    # UTF-8 link: skipped

check "help" 'run --help | grep -q -- "--seq-len"'
run "$tmp/corpus" "$tmp/bpe" --seq-len 64 --tokenizer bpe --vocab-size 1000 --doc-separator % --seed 7 \
  >"$tmp/meta.out" 2>"$tmp/err"
rc_bpe=$?
check "bpe run exit 0 ($(cat "$tmp/err"))" "[ $rc_bpe -eq 0 ]"
check "meta printed = meta.json" 'cmp -s "$tmp/meta.out" "$tmp/bpe/meta.json"'
run "$tmp/corpus" "$tmp/byte" --seq-len 32 >/dev/null 2>"$tmp/err"
rc_byte=$?
check "byte run exit 0 ($(cat "$tmp/err"))" "[ $rc_byte -eq 0 ]"

check "datasets against NumPy and an independent decoder" '$PY - "$tmp" <<'"'"'EOF'"'"'
import json, math, os, sys
import numpy as np
tmp = sys.argv[1]
files, fortunes = [], []
for name in sorted(os.listdir(os.path.join(tmp, "corpus"))):
    p = os.path.join(tmp, "corpus", name)
    if name.startswith(".") or name.endswith(".dat") or name.endswith(".u8") or not os.path.isfile(p) or os.path.islink(p):
        continue
    text = open(p, "rb").read()
    files.append(text)
    # the parts between lines that are exactly "%"
    cur = []
    for line in text.split(b"\n"):
        if line.rstrip(b"\r") == b"%":
            d = b"\n".join(cur) + b"\n" if cur else b""
            if d: fortunes.append(d)
            cur = []
        else:
            cur.append(line)
    tail = b"\n".join(cur)
    if tail: fortunes.append(tail)
ok = True
def fail(msg):
    global ok
    ok = False
    print("  " + msg, file=sys.stderr)
for kind, sep in (("bpe", True), ("byte", False)):
    docs = fortunes if sep else files
    docset = set(docs)
    d = os.path.join(tmp, kind)
    meta = json.load(open(os.path.join(d, "meta.json")))
    tok = json.load(open(os.path.join(d, "tokenizer.json")))
    V, eos, S = tok["vocab_size"], tok["eos_id"], meta["seq_len"]
    if kind == "byte" and (V != 257 or eos != 256 or tok["type"] != "byte" or tok["merges"]):
        fail("byte tokenizer.json")
    if kind == "bpe" and (V != 1000 or len(tok["merges"]) != 743 or tok["type"] != "bpe"):
        fail("bpe tokenizer.json: %d merges" % len(tok["merges"]))
    # independent decoder: bytes of each id from the merges alone
    table = [bytes([i]) for i in range(256)]
    for a, b in tok["merges"]:
        table.append(table[a] + table[b])
    table.append(b"")
    if [t.hex() for t in table] != tok["vocab"]:
        fail(kind + ": vocab does not match merges")
    if meta["vocab_size"] != V or meta["eos_id"] != eos or meta["source_files"] != 4:
        fail(kind + ": meta tokenizer fields / source_files " + str(meta["source_files"]))
    seen = {}
    counts = {}
    for split in ("train", "valid", "test"):
        a = np.load(os.path.join(d, split + ".npy"))
        if a.dtype != np.int32 or a.ndim != 2 or a.shape[1] != S + 1 or a.shape[0] < 1:
            fail("%s %s: dtype %s shape %s" % (kind, split, a.dtype, a.shape)); continue
        if a.min() < 0 or a.max() >= V:
            fail("%s %s: ids out of range" % (kind, split))
        if a.shape[0] > 1 and not np.array_equal(a[1:, 0], a[:-1, -1]):
            fail("%s %s: rows do not overlap by one (stride S)" % (kind, split))
        m = meta["splits"][split]
        if m["rows"] != a.shape[0] or not (a.shape[0] * S + 1 <= m["tokens"] < (a.shape[0] + 1) * S + 1):
            fail("%s %s: meta rows/tokens %s vs shape %s" % (kind, split, m, a.shape))
        stream = np.concatenate([a[0], a[1:, 1:].reshape(-1)]) if a.shape[0] > 1 else a[0]
        counts[split] = a
        # every complete piece between EOS tokens decodes to one whole document
        pieces, cur = [], []
        for t in stream.tolist():
            if t == eos:
                pieces.append(b"".join(table[x] for x in cur)); cur = []
            else:
                cur.append(t)
        bad = [p for p in pieces if p not in docset]
        rest = b"".join(table[x] for x in cur)  # the start of the next document (or all of it, cut)
        if not any(d.startswith(rest) for d in docs):
            fail("%s %s: the last partial document is not the start of a document" % (kind, split))
        if bad or (sep and not pieces):
            fail("%s %s: %d of %d decoded documents are not documents of the corpus, e.g. %r" % (kind, split, len(bad), len(pieces), bad[0][:80] if bad else b""))
        for p in pieces:
            if p in seen and seen[p] != split and docs.count(p) == 1:
                fail("%s: a document is in %s and %s" % (kind, seen[p], split))
            seen[p] = split
    # the unigram baseline, recomputed
    tr, va = counts["train"], counts["valid"]
    c = np.bincount(tr[:, 1:].reshape(-1), minlength=V).astype(np.float64)
    p = (c + 1) / (c.sum() + V)
    ub = float(-np.log(p[va[:, 1:].reshape(-1)]).mean())
    if abs(ub - meta["unigram_valid_loss"]) > 1e-9 * max(1, ub):
        fail("%s: unigram baseline %r vs %r" % (kind, meta["unigram_valid_loss"], ub))
    if not (0 < meta["splits"]["valid"]["bytes"] and 0 < meta["splits"]["test"]["bytes"]):
        fail(kind + ": empty split")
    if meta["documents"] != len(docs):
        fail("%s: %d documents, want %d" % (kind, meta["documents"], len(docs)))
    total = sum(meta["splits"][s]["bytes"] for s in ("train", "valid", "test"))
    if total != sum(len(x) for x in docs):
        fail("%s: split bytes %d vs documents %d" % (kind, total, sum(len(x) for x in docs)))
    if sep:
        vf = meta["splits"]["valid"]["bytes"] / total
        if not 0.05 <= vf < 0.06:
            fail("%s: valid share %.4f" % (kind, vf))
sys.exit(0 if ok else 1)
EOF'

# deterministic per seed; another seed deals other documents
run "$tmp/corpus" "$tmp/bpe2" --seq-len 64 --tokenizer bpe --vocab-size 1000 --doc-separator % --seed 7 >/dev/null 2>&1
for f in train.npy valid.npy test.npy tokenizer.json meta.json; do
  check "same seed, same $f" 'cmp -s "$tmp/bpe/$f" "$tmp/bpe2/$f"'
done
run "$tmp/corpus" "$tmp/bpe3" --seq-len 64 --tokenizer bpe --vocab-size 1000 --doc-separator % --seed 8 >/dev/null 2>&1
check "other seed, other valid.npy" '! cmp -s "$tmp/bpe/valid.npy" "$tmp/bpe3/valid.npy"'
# one file, no separator: cut by bytes
run "$tmp/corpus/linux" "$tmp/one" --seq-len 16 --valid-fraction 0.1 >/dev/null 2>"$tmp/err"
check "single file ($(cat "$tmp/err"))" '[ -f "$tmp/one/test.npy" ] && grep -q "\"documents\":1" "$tmp/one/meta.json"'

# bad input
C="$tmp/corpus"
expect_error "missing --seq-len" "--seq-len is required" "$C" "$tmp/x"
expect_error "seq-len 0" "--seq-len must be" "$C" "$tmp/x" --seq-len 0
expect_error "seq-len text" "--seq-len" "$C" "$tmp/x" --seq-len 12x
expect_error "seq-len overflow" "--seq-len" "$C" "$tmp/x" --seq-len 99999999999
expect_error "tokenizer" "--tokenizer must be byte or bpe" "$C" "$tmp/x" --seq-len 8 --tokenizer wordpiece
expect_error "vocab with byte" "--vocab-size needs --tokenizer bpe" "$C" "$tmp/x" --seq-len 8 --vocab-size 500
expect_error "vocab small" "--vocab-size must be" "$C" "$tmp/x" --seq-len 8 --tokenizer bpe --vocab-size 100
expect_error "valid 0" "--valid-fraction" "$C" "$tmp/x" --seq-len 8 --valid-fraction 0
expect_error "test 0.6" "--test-fraction" "$C" "$tmp/x" --seq-len 8 --test-fraction 0.6
expect_error "fraction nan" "--valid-fraction" "$C" "$tmp/x" --seq-len 8 --valid-fraction nan
expect_error "seed negative" "--seed" "$C" "$tmp/x" --seq-len 8 --seed -1
expect_error "unknown option" "unknown option" "$C" "$tmp/x" --seq-len 8 --shuffle
expect_error "missing OUT" "needs TEXT and OUT" "$C" --seq-len 8
expect_error "extra positional" "unexpected argument" "$C" "$tmp/x" extra --seq-len 8
expect_error "no TEXT" "cannot read" "$tmp/nope" "$tmp/x" --seq-len 8
mkdir "$tmp/empty"
expect_error "empty dir" "no text files" "$tmp/empty" "$tmp/x" --seq-len 8
expect_error "existing output" "exists" "$C" "$tmp/bpe" --seq-len 8
expect_error "rows too long" "fewer than one row" "$C" "$tmp/x" --seq-len 100000
expect_error "empty separator" "--doc-separator" "$C" "$tmp/x" --seq-len 8 --doc-separator ""
check "no output after errors" '[ ! -e "$tmp/x" ]'

[ $fail -eq 0 ] && echo "cli_lm_data: all checks passed"
exit $fail
