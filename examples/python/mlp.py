#!/usr/bin/env python3
"""Train an MLP on three interleaved spirals with resgrad, and report its accuracy.

    python3 examples/python/mlp.py [--device cpu|cuda|auto] [--steps N]

A 2-64-64-3 MLP (ReLU) learns which of three spiral arms a point of the plane lies on;
with the defaults it reaches at least 95% accuracy on points it never saw (printed at the
end; the exit status is 1 below that). The whole dataset lives on the device
(ctx.constant), so a training step uploads nothing and reads back the 4-byte loss.
"""
import argparse
import math
import sys

import numpy as np

import resgrad as rg


def spirals(n, rng):
    """n points on each of three spiral arms with a little noise; labels 0, 1, 2."""
    t = rng.uniform(0.25, 1, (3, n))
    angle = 4 * t + np.arange(3)[:, None] * 2 * math.pi / 3 + rng.normal(0, 0.15, (3, n))
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], -1).reshape(-1, 2)
    return x.astype(np.float32), np.repeat(np.arange(3, dtype=np.int32), n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    ap.add_argument("--steps", type=int, default=600, help="training steps (600)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    rng = np.random.default_rng(args.seed)
    x, y = spirals(300, rng)
    xt, yt = spirals(300, rng)

    with rg.Context(args.device, seed=args.seed) as ctx:
        print(f"resgrad {rg.__version__} on {ctx.device_name}", file=sys.stderr)
        model = rg.nn.MLP(ctx, (2, 64, 64, 3))
        opt = rg.optim.AdamW(ctx, lr=1e-2)
        opt.set_schedule("cosine", lr=1e-2, min_lr=1e-3, warmup=args.steps // 10,
                         total=args.steps)
        data, labels = ctx.constant(x), ctx.constant(y)  # uploaded once, used every step
        for step in range(1, args.steps + 1):
            ctx.step_begin()
            loss = rg.cross_entropy(model(data), labels)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step % 100 == 0 or step == args.steps:
                print(f"step {step:5d}  loss {float(loss):.4f}", file=sys.stderr)
        ctx.step_begin()
        pred = rg.argmax(model(ctx.tensor(xt)), -1).numpy()
        acc = float((pred == yt).mean())
        s = ctx.stats()
        print(f"held-out accuracy {acc:.3f} ({len(yt)} points); "
              f"{s['up']['count']} uploads and {s['down']['count']} downloads in all")
        return 0 if acc >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
