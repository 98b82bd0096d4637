#!/usr/bin/env bash
# Compare OpenBLAS and BLIS on the SGEMM shapes our models issue (bench/blas_compare.c).
#
#   scripts/blas-compare.sh [OUT_DIR] [MIN_SECONDS_PER_SHAPE]
#
# Builds the benchmark twice (OpenBLAS and BLIS, the OpenMP builds of both, through their
# CBLAS layers) and
# runs five configurations with the same thread count (SNN_BLAS_THREADS, default 2):
#   openblas        OpenBLAS, kernels it picks itself (what a plain build gets)
#   openblas-skx    OpenBLAS with OPENBLAS_CORETYPE=SkylakeX (AVX-512 kernels)
#   blis            BLIS, sub-configuration it picks itself (what a plain build gets)
#   blis-zen3       BLIS with BLIS_ARCH_TYPE=6 (zen3 kernels)
#   blis-skx        BLIS with BLIS_ARCH_TYPE=0 (skx, AVX-512 kernels)
# (Debian's BLIS 0.9 and OpenBLAS 0.3.21 predate some CPUs and fall back to older or
# generic kernels; the forced variants show what the library could do.) The configurations
# run in turn for SNN_BLAS_ROUNDS rounds (default 3) so that all see the same background
# load; per shape the reported time is the lowest of the rounds' medians (a round disturbed
# by other work on the machine does not count).
# Writes OUT_DIR/<config>.rN.json, OUT_DIR/blas-compare.json (merged) and
# OUT_DIR/blas-compare.md (tables + geometric means of time ratios against openblas).
# Default OUT_DIR: build-blas/ at the repository root (git-ignored).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build-blas}"
min_s="${2:-0.5}"
threads="${SNN_BLAS_THREADS:-2}"
rounds="${SNN_BLAS_ROUNDS:-3}"
mkdir -p "$out"
arch=x86_64-linux-gnu
cc="${CC:-cc}"
cflags=(-std=c17 -O2 -D_POSIX_C_SOURCE=200809L -Wall -Wextra)

# OpenBLAS: the OpenMP build (what CMakeLists.txt links), else the pthreads one
ob_inc=""; ob_lib=""
for v in openblas-openmp openblas-pthread; do
  if [[ -f /usr/include/$arch/$v/cblas.h && -e /usr/lib/$arch/$v/libopenblas.so ]]; then
    ob_inc=/usr/include/$arch/$v; ob_lib=/usr/lib/$arch/$v; break
  fi
done
# BLIS: prefer the OpenMP build (libblis-openmp-dev), else the plain one
bl_inc=""; bl_lib=""
for v in blis-openmp blis-pthread blis-serial blis; do
  if [[ -f /usr/include/$arch/$v/cblas.h && -e /usr/lib/$arch/$v/libblis.so ]]; then
    bl_inc=/usr/include/$arch/$v; bl_lib=/usr/lib/$arch/$v; break
  fi
done
[[ -n $ob_inc ]] || { echo "OpenBLAS CBLAS not found: apt-get install libopenblas-openmp-dev" >&2; exit 1; }
[[ -n $bl_inc ]] || { echo "BLIS CBLAS not found: apt-get install libblis-openmp-dev" >&2; exit 1; }

"$cc" "${cflags[@]}" -fopenmp -I"$ob_inc" "$root/bench/blas_compare.c" -o "$out/blas_compare_openblas" \
  -L"$ob_lib" -Wl,-rpath,"$ob_lib" -lopenblas -lm
"$cc" "${cflags[@]}" -fopenmp -I"$bl_inc" "$root/bench/blas_compare.c" -o "$out/blas_compare_blis" \
  -L"$bl_lib" -Wl,-rpath,"$bl_lib" -lblis -lm

export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads BLIS_NUM_THREADS=$threads
configs=(openblas openblas-skx blis blis-zen3 blis-skx)
run_config() { # name out.json
  case $1 in
    openblas) "$out/blas_compare_openblas" "$1" "$2" "$min_s" ;;
    openblas-skx) OPENBLAS_CORETYPE=SkylakeX "$out/blas_compare_openblas" "$1" "$2" "$min_s" ;;
    blis) "$out/blas_compare_blis" "$1" "$2" "$min_s" ;;
    blis-zen3) BLIS_ARCH_TYPE=6 "$out/blas_compare_blis" "$1" "$2" "$min_s" ;;
    blis-skx) BLIS_ARCH_TYPE=0 "$out/blas_compare_blis" "$1" "$2" "$min_s" ;;
  esac
}
echo "OpenBLAS: $(ldd "$out/blas_compare_openblas" | awk '/openblas/{print $3}')"
echo "BLIS:     $(ldd "$out/blas_compare_blis" | awk '/blis/{print $3}')"
# which kernels each picks by itself, as the libraries report it
ob_core="$(OPENBLAS_VERBOSE=2 "$out/blas_compare_openblas" --probe 2>&1 | sed -n 's/^Core: *//p' | head -1)"
bl_core="$(BLIS_ARCH_DEBUG=1 "$out/blas_compare_blis" --probe 2>&1 | sed -n "s/.*sub-configuration '\(.*\)'.*/\1/p" | head -1)"
echo "kernels picked: OpenBLAS ${ob_core:-?}, BLIS ${bl_core:-?}"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    echo "== round $r/$rounds: $c"
    run_config "$c" "$out/$c.r$r.json"
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
python3 - "$out" "$cpu" "$threads" "$rounds" "$load_before" "$load_after" "${ob_core:-?}" "${bl_core:-?}" "${configs[@]}" <<'PY'
import json, math, sys
out, cpu, threads, rounds, load0, load1, ob_core, bl_core = sys.argv[1:9]
configs = sys.argv[9:]
rounds = int(rounds)

def merged(cfg):
    runs = [json.load(open("%s/%s.r%d.json" % (out, cfg, r)))["results"] for r in range(1, rounds + 1)]
    res = []
    for shape in zip(*runs):
        best = dict(min(shape, key=lambda x: x["median_ms"]))
        best["round_medians_ms"] = [x["median_ms"] for x in shape]
        best["min_ms"] = min(x["min_ms"] for x in shape)
        best["gflops"] = 2.0 * best["M"] * best["N"] * best["K"] / (best["median_ms"] * 1e-3) * 1e-9
        res.append(best)
    return res

res = {c: merged(c) for c in configs}
base = res[configs[0]]
names = [x["name"] for x in base]
for c in configs:
    assert [x["name"] for x in res[c]] == names
rows = ["Median time per call in ms (GFLOP/s in brackets); lower is better.", "",
        "| shape | M | N | K | " + " | ".join(configs) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(configs)]
for i, x in enumerate(base):
    cells = ["%.3f (%.0f)" % (res[c][i]["median_ms"], res[c][i]["gflops"]) for c in configs]
    rows.append("| %s | %d | %d | %d | %s |" % (x["name"], x["M"], x["N"], x["K"], " | ".join(cells)))
rows += ["", "Geometric mean of time / %s time (> 1: slower than %s):" % (configs[0], configs[0]), "",
         "| config | all | fcsnn | convsnn | spikformer |", "|---|---:|---:|---:|---:|"]
geo = {}
for c in configs:
    logs = {}
    for a, b in zip(base, res[c]):
        l = math.log(b["median_ms"] / a["median_ms"])
        logs.setdefault("all", []).append(l)
        logs.setdefault(a["name"].split()[0], []).append(l)
    geo[c] = {k: math.exp(sum(v) / len(v)) for k, v in logs.items()}
    rows.append("| %s | %s |" % (c, " | ".join("%.3f" % geo[c][k] for k in ("all", "fcsnn", "convsnn", "spikformer"))))
rows += ["", "CPU: %s; %s threads; %d rounds; load average %s before, %s after." % (cpu, threads, rounds, load0, load1),
         "Kernels picked by the libraries themselves: OpenBLAS %s, BLIS %s." % (ob_core, bl_core),
         "Time = lowest of the rounds' medians."]
text = "\n".join(rows) + "\n"
json.dump({"cpu": cpu, "threads": int(threads), "rounds": rounds, "load_before": load0, "load_after": load1,
           "openblas_core": ob_core, "blis_subconfig": bl_core, "results": res, "geomean_vs_" + configs[0]: geo},
          open(out + "/blas-compare.json", "w"), indent=1)
open(out + "/blas-compare.md", "w").write(text)
print(text)
PY
