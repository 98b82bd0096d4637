#!/bin/bash
# cmake --install into a temporary prefix inside the build directory, then a project outside
# snn (tests/install) built against it three ways: find_package(snn) with snn::snn (shared)
# and snn::snn_static, and pkg-config (shared and static, tests/install/Makefile). Each
# consumer trains a small model and must run from the prefix alone (the build directory's
# libsnn moved aside for the shared one's run).
set -u
B=$(cd "${1:?build dir}" && pwd)
SRC=$(cd "$(dirname "$0")/.." && pwd)
PREFIX="$B/install-test/prefix"
W="$B/install-test/work"
rm -rf "$B/install-test"
mkdir -p "$W"
fail=0
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
step() { local what=$1; shift; if ! "$@" >>"$W/log" 2>&1; then echo "FAIL: $what (log: $W/log)" >&2; tail -20 "$W/log" >&2; fail=1; return 1; fi; }

step "cmake --install" cmake --install "$B" --prefix "$PREFIX" || exit 1
for f in include/snn/snn.h include/snn/nn.h bin/snn; do
  [ -e "$PREFIX/$f" ] || { echo "FAIL: $f not installed" >&2; fail=1; }
done
LIB=$(dirname "$(find "$PREFIX" -name libsnn.so -print -quit)")
for f in libsnn.a libsnn.so pkgconfig/snn.pc cmake/snn/snnConfig.cmake cmake/snn/snnTargets.cmake; do
  [ -e "$LIB/$f" ] || { echo "FAIL: $f not installed under $LIB" >&2; fail=1; }
done
# the shared library holds position-independent code only (no text relocations)
if readelf -d "$LIB/libsnn.so" | grep -q TEXTREL; then echo "FAIL: libsnn.so has text relocations" >&2; fail=1; fi
"$PREFIX/bin/snn" --version | grep -q '^snn .* commit ' || { echo "FAIL: installed snn --version" >&2; fail=1; }
# the recorded commit is this checkout's HEAD (when this is a git checkout without a stamp)
if [ ! -f "$SRC/.source-commit" ] && head=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null); then
  "$B/snn" --version | grep -q " commit $head" || { echo "FAIL: snn --version '$("$B/snn" --version)' is not HEAD $head" >&2; fail=1; }
fi

# find_package
if step "consumer configure" cmake -S "$SRC/tests/install" -B "$W/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX" && step "consumer build" cmake --build "$W/cmake"; then
  if readelf -d "$W/cmake/consumer" | grep -q 'NEEDED.*libsnn.so'; then :; else echo "FAIL: consumer does not load libsnn.so" >&2; fail=1; fi
  if readelf -d "$W/cmake/consumer_static" | grep -q 'NEEDED.*libsnn'; then echo "FAIL: consumer_static loads libsnn.so" >&2; fail=1; fi
  step "consumer (snn::snn) runs" "$W/cmake/consumer" "$W/model.safetensors"
  step "consumer (snn::snn_static) runs" "$W/cmake/consumer_static"
  ldd "$W/cmake/consumer" | grep -q "$PREFIX" || { echo "FAIL: consumer does not take libsnn.so from the prefix" >&2; fail=1; }
  [ -s "$W/model.safetensors" ] || { echo "FAIL: no checkpoint written" >&2; fail=1; }
fi
# pkg-config
if step "pkg-config build" env PKG_CONFIG_PATH="$LIB/pkgconfig" make -s -C "$SRC/tests/install" OUT="$W"; then
  step "consumer_pc runs" "$W/consumer_pc"
  step "consumer_pc_static runs" "$W/consumer_pc_static"
fi
[ $fail = 0 ] && { echo "cli_install: ok"; grep -m1 '^snn ' "$W/log"; }
exit $fail
