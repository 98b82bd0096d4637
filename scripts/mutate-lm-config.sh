#!/bin/bash
# Mutation check of the config validators: every refusal `return E(...)` of
# src/lm/lm_config.c is disabled in turn (`if (0) return E(...)`) and tests/test_lm_config.c
# must then fail. Prints each surviving mutant and a summary; exit 1 if any survives.
# Needs gcc and libcjson; builds in a temporary directory (a few minutes on 2 cores).
set -u
cd "$(dirname "$0")/.."
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
F="-std=c17 -O0 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Isrc -Itests -w"
gcc $F -c tests/test_lm_config.c -o "$w/t.o" && gcc $F -c tests/harness.c -o "$w/h.o" || exit 2
objs=""
for s in src/lm/lm_config_json.c src/core/json_canon.c src/core/sha256.c src/core/error.c; do
  gcc $F -c "$s" -o "$w/$(basename "$s" .c).o" || exit 2
  objs="$objs $w/$(basename "$s" .c).o"
done
total=0 survived=0
for ln in $(grep -n "return E(" src/lm/lm_config.c | cut -d: -f1); do
  total=$((total + 1))
  sed "${ln}s/return E(/if (0) return E(/" src/lm/lm_config.c >"$w/m.c"
  gcc $F -Isrc/lm -c "$w/m.c" -o "$w/m.o" || { echo "line $ln: does not compile"; exit 2; }
  # shellcheck disable=SC2086
  gcc "$w/t.o" "$w/h.o" "$w/m.o" $objs $(pkg-config --libs libcjson) -lm -o "$w/t" || exit 2
  if "$w/t" >/dev/null 2>&1; then
    survived=$((survived + 1))
    echo "SURVIVED line $ln: $(sed -n "${ln}p" src/lm/lm_config.c)"
  fi
done
echo "mutants $total, survived $survived"
[ "$survived" -eq 0 ]
