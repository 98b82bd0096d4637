#!/bin/sh
# CPU speed of fcsnn against PyTorch (docs/cpu-speed.md).
#   bench/cpu/run.sh [fcsnn_vs_torch.py options]     e.g. --rounds 9 --threads 2 --output F.json
# Builds snn (Release) in build-cpubench/ (override: BUILD=dir) and the sgemm rate probe
# against the OpenMP OpenBLAS that libsnn links, then runs bench/cpu/fcsnn_vs_torch.py.
# Needs: cmake, ninja, python3-torch (Debian), libopenblas-openmp-dev, libopenblas0-pthread.
set -eu
cd "$(dirname "$0")/../.."
build=${BUILD:-build-cpubench}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" snn >/dev/null
ob=/usr/lib/x86_64-linux-gnu/openblas-openmp
mkdir -p "$build/cpu"
${CC:-cc} -std=c17 -O2 -Wall -Wextra -D_POSIX_C_SOURCE=200809L -I/usr/include/x86_64-linux-gnu/openblas-openmp \
  bench/cpu/sgemm_rate.c -o "$build/cpu/sgemm_rate" -L"$ob" -Wl,-rpath,"$ob" -lopenblas -lm
py=python3
python3 -c "import torch" 2>/dev/null || py=/usr/bin/python3
# Rounds wait (at most 60 s) for 85% idle CPUs; rounds that did not get it are left out of
# the statistics (on a shared machine; pass --wait-idle 0 to use every round).
exec "$py" bench/cpu/fcsnn_vs_torch.py --snn "$build/snn" --sgemm "$build/cpu/sgemm_rate" \
  --output "$build/fcsnn_vs_torch.json" --wait-idle 0.85 --wait-max 60 "$@"
