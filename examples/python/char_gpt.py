#!/usr/bin/env python3
"""Train a character-level GPT on a text file with resgrad, then sample from it.

    python3 examples/python/char_gpt.py [--text FILE] [--device cpu|cuda|auto]
                                        [--steps N] [--save FILE]

Without --text it reads the project's README.md. The model is the library's GPT
(resgrad.nn.GPT: GPT-2's architecture, tied head). Each step uploads one batch of token
ids and reads back the loss; on a GPU the step replays as one captured CUDA graph.
"""
import argparse
import os
import sys
import time

import numpy as np

import resgrad as rg


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", default=os.path.join(here, "..", "..", "README.md"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--sample", type=int, default=200, help="characters to generate")
    ap.add_argument("--save", help="write the trained model here (safetensors)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be at least 1")

    with open(args.text, encoding="utf-8", errors="replace") as f:
        text = f.read()
    chars = sorted(set(text))
    if len(text) < args.block + 2:
        sys.exit(f"char_gpt: {args.text} has {len(text)} characters; it needs more than "
                 f"--block + 1 = {args.block + 1}")
    code = {c: i for i, c in enumerate(chars)}
    data = np.array([code[c] for c in text], np.int32)
    rng = np.random.default_rng(args.seed)

    with rg.Context(args.device, seed=args.seed) as ctx:
        print(f"resgrad {rg.__version__} on {ctx.device_name}; {len(text)} characters, "
              f"vocabulary {len(chars)}", file=sys.stderr)
        gpt = rg.nn.GPT(ctx, vocab=len(chars), block=args.block, layers=args.layers,
                        width=args.width, heads=args.heads)
        opt = rg.optim.AdamW(ctx, lr=3e-3, weight_decay=0.01)
        opt.set_schedule("cosine", lr=3e-3, min_lr=3e-4, warmup=args.steps // 10,
                         total=args.steps)
        t0 = time.perf_counter()
        for step in range(1, args.steps + 1):
            at = rng.integers(0, len(data) - args.block - 1, args.batch)
            idx = np.stack([data[i:i + args.block] for i in at])
            tgt = np.stack([data[i + 1:i + args.block + 1] for i in at])
            ctx.step_begin()
            loss = gpt.loss(ctx.tensor(idx), ctx.tensor(tgt))
            loss.backward()
            rg.optim.clip_grad_norm(ctx, 1.0)
            opt.step()
            opt.zero_grad()
            if step % 50 == 0 or step == args.steps:
                ms = (time.perf_counter() - t0) / step * 1e3
                print(f"step {step:5d}  loss {float(loss):.4f}  {ms:.1f} ms/step",
                      file=sys.stderr)

        ctx.eval()
        out = list(data[:args.block // 2])
        for _ in range(args.sample):  # greedy-free sampling: one barrier per character
            ctx.step_begin()
            window = np.array([out[-args.block:]], np.int32)
            logits = gpt(ctx.tensor(window)).numpy()[0, -1].astype(np.float64)
            p = np.exp(logits - logits.max())
            out.append(int(rng.choice(len(chars), p=p / p.sum())))
        print("".join(chars[i] for i in out))
        if args.save:
            ctx.save(args.save, opt)
            print(f"saved {args.save}", file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(main())
