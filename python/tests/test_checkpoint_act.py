"""Activation checkpoint regions from Python: Context.checkpoint around a function,
checkpoint_begin/checkpoint_end, and GPT(checkpoint=True) give the gradients of the same
steps without regions bit for bit, and a lower pass-pool peak; misuse raises."""
import numpy as np
import pytest

import resgrad as rg
from conftest import open_ctx


def block(x, w, b):
    """x + tanh(dropout(gelu(x w^T + b)))"""
    return rg.add(x, rg.tanh(rg.dropout(rg.gelu(rg.linear(x, w, b)), 0.25)))


def mlp_grads(xs, ys, regions, begin_end=False):
    with open_ctx(seed=4) as ctx:
        ws = [ctx.param(f"w{i}", (32, 32), init="normal", a=0.3) for i in range(4)]
        bs = [ctx.param(f"b{i}", (32,)) for i in range(4)]
        head = ctx.param("head", (3, 32), init="normal", a=0.3)
        ctx.step_begin()
        x = ctx.tensor(xs)
        for w, b in zip(ws, bs):
            if not regions:
                x = block(x, w, b)
            elif begin_end:
                ctx.checkpoint_begin()
                x = ctx.checkpoint_end(block(x, w, b))
            else:
                x = ctx.checkpoint(block, x, w, b=b)
        loss = rg.cross_entropy(rg.linear(x, head), ctx.tensor(ys))
        loss.backward()
        out = [float(loss)] + [p.grad.numpy() for p in ws + bs + [head]]
        return out, ctx.stats()["pass_peak"]


def test_mlp_regions_same_gradients(rng):
    xs = rng.standard_normal((64, 32)).astype(np.float32)
    ys = (np.arange(64) % 3).astype(np.int32)
    plain, peak_plain = mlp_grads(xs, ys, False)
    for begin_end in (False, True):
        got, peak = mlp_grads(xs, ys, True, begin_end)
        assert got[0] == plain[0]
        for a, b in zip(got[1:], plain[1:]):
            assert a.tobytes() == b.tobytes()
        assert peak < peak_plain


def gpt_run(checkpoint):
    with open_ctx(seed=5) as ctx:
        gpt = rg.nn.GPT(ctx, vocab=16, block=8, layers=2, width=32, heads=4, dropout=0.1,
                        checkpoint=checkpoint)
        assert gpt.config["checkpoint"] is checkpoint
        opt = rg.optim.AdamW(ctx, lr=3e-3)
        idx = (np.arange(32, dtype=np.int32) % 16).reshape(4, 8)
        losses = []
        for _ in range(3):
            ctx.step_begin()
            loss = gpt.loss(ctx.tensor(idx), ctx.tensor((idx + 1) % 16))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss))
        return losses, [t.numpy().tobytes() for _, t in gpt.named_parameters()]


def test_gpt_checkpoint_same_training():
    assert gpt_run(True) == gpt_run(False)


def test_checkpoint_misuse(ctx):
    x = ctx.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(rg.UsageError, match="no region is open"):
        ctx.checkpoint_end()
    inner = []

    def f(t):
        inner.append(rg.exp(t))
        return rg.tanh(inner[0])

    y = ctx.checkpoint(f, x)
    assert y.shape == (2, 3)
    with pytest.raises(rg.UsageError, match="checkpoint region"):
        inner[0].numpy()
    with pytest.raises(ZeroDivisionError):  # the region is closed, nothing given back
        ctx.checkpoint(lambda t: 1 / 0, x)
    with pytest.raises(TypeError):
        ctx.checkpoint(lambda t: 3, x)
    ctx.checkpoint_begin()
    with pytest.raises(rg.UsageError, match="do not nest"):
        ctx.checkpoint_begin()
    with pytest.raises(rg.UsageError, match="end the region first"):
        ctx.step_begin()
    assert ctx.checkpoint_end() is None
