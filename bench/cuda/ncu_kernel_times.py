#!/usr/bin/env python3
"""Kernel time per kernel name from an Nsight Compute raw CSV.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw PROGRAM ... > run.csv
    python3 bench/cuda/ncu_kernel_times.py run.csv [TOP]

Prints the total kernel time and the TOP (default 25) kernel names by summed
gpu__time_duration (launch count, share). Template arguments are kept, parameter lists cut.
"""
import collections
import csv
import re
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rows = list(csv.reader(l for l in open(path) if l.startswith('"')))
    hdr = rows[0]
    ki, ti = hdr.index('Kernel Name'), hdr.index('gpu__time_duration.sum')
    unit = rows[1][ti] if len(rows) > 1 else 'ns'
    scale = {'ns': 1.0, 'nsecond': 1.0, 'us': 1e3, 'usecond': 1e3, 'ms': 1e6, 'msecond': 1e6}.get(unit, 1.0)
    agg = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in rows[2:]:
        try:
            t = float(r[ti].replace(',', '')) * scale
        except (ValueError, IndexError):
            continue
        name = re.sub(r'\(.*', '', r[ki])[:90]
        agg[name][0] += 1
        agg[name][1] += t
        total += t
    print(f'total {total / 1e6:.2f} ms over {sum(v[0] for v in agg.values())} kernels')
    for name, (n, t) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f'{t / 1e6:9.2f} ms {100 * t / total:5.1f}% n={n:5d} {name}')


if __name__ == '__main__':
    main()
