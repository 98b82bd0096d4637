#!/usr/bin/env python3
"""Check a `snn lm export` of a gpt checkpoint with Hugging Face transformers.

  scripts/lm-hf-check.py OUT LOGITS [TOKENS]

OUT     the export directory (snn lm export CHECKPOINT OUT)
LOGITS  `snn lm eval CHECKPOINT --round-bf16 --dump LOGITS --dump-rows 4 --split test`:
        input_ids [R, S] and snn's T-reduced logits [R, S, V], computed in FP32 from the
        BF16-rounded weights (the values the export holds)
TOKENS  optional `snn lm generate CHECKPOINT --round-bf16 --prompt-ids ... --out TOKENS`:
        tokens [B, P + new] of snn's cached greedy decoding; the prompt length P is read
        from the prompt_tokens argument below (default 8)

Loads the export with GPT2LMHeadModel.from_pretrained(OUT) in float32 (the BF16 weights
are exact in float32), compares the logits on the dumped sequences (max |diff| relative to
the logits' scale, must be below 2^-8, BF16's rounding step) and, with TOKENS, checks that
model.generate(greedy) reproduces snn's tokens exactly. Exit 0 = pass."""
import json
import struct
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "I32": np.int32}[info["dtype"]]
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt).reshape(info["shape"])
    return out


def main():
    if len(sys.argv) not in (3, 4, 5):
        print(__doc__)
        sys.exit(2)
    out, logits_path = sys.argv[1], sys.argv[2]
    tokens_path = sys.argv[3] if len(sys.argv) > 3 else None
    prompt_len = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    model = GPT2LMHeadModel.from_pretrained(out, torch_dtype=torch.float32).eval()
    d = read_safetensors(logits_path)
    ids = torch.tensor(d["input_ids"].astype(np.int64))
    want = d["logits"].astype(np.float64)
    with torch.no_grad():
        got = model(ids).logits.double().numpy()
    scale = np.abs(want).max()
    err = np.abs(got - want).max() / scale
    ok = err < 2.0 ** -8
    print(f"logits: {ids.shape[0]} sequences of {ids.shape[1]} tokens, max |hf - snn| / max|snn| = {err:.3g}"
          f" ({'ok' if ok else 'FAIL'}), argmax agreement {np.mean(got.argmax(-1) == want.argmax(-1)):.4f}")
    if tokens_path:
        snn_tok = read_safetensors(tokens_path)["tokens"].astype(np.int64)
        prompt = torch.tensor(snn_tok[:, :prompt_len])
        new = snn_tok.shape[1] - prompt_len
        with torch.no_grad():
            hf = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=1,
                                pad_token_id=0, eos_token_id=None).numpy()
        same = np.array_equal(hf, snn_tok)
        print(f"greedy: {snn_tok.shape[0]} x {new} tokens {'identical' if same else 'DIFFER'}")
        if not same:
            print("snn:", snn_tok.tolist())
            print("hf: ", hf.tolist())
        ok = ok and same
    sys.exit(0 if ok else 1)


main()
