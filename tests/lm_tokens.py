"""Token datasets for the language-model CLI tests: DIR/{train,valid,test}.npy, int32 [n, S+1]
rows of arithmetic sequences (random start and stride modulo V) with a fraction of random
tokens, drawn from SNN_TEST_SEED (the caller prints it so a failure can be replayed).

    lm_tokens.py DIR [--vocab 40] [--seq 16] [--rows 48,16,16] [--noise 0.2]
"""
import argparse
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--vocab", type=int, default=40)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--rows", default="48,16,16", help="train,valid,test rows")
    ap.add_argument("--noise", type=float, default=0.2)
    a = ap.parse_args()
    rng = np.random.default_rng(int(os.environ["SNN_TEST_SEED"]))
    os.makedirs(a.dir)
    V, S = a.vocab, a.seq
    for split, n in zip(("train", "valid", "test"), (int(x) for x in a.rows.split(","))):
        first = rng.integers(0, V, size=(n, 1))
        stride = rng.integers(1, 4, size=(n, 1))
        noise = rng.integers(0, V, size=(n, S + 1)) * (rng.random((n, S + 1)) < a.noise)
        np.save(os.path.join(a.dir, split + ".npy"), ((first + stride * np.arange(S + 1) + noise) % V).astype(np.int32))


if __name__ == "__main__":
    main()
