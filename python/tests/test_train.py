"""Training from Python: an MLP to a stated accuracy, the GPT, optimizers, schedules,
clipping and checkpoints."""
import math

import numpy as np
import pytest

import resgrad as rg
from conftest import open_ctx


def quadrants(rng, n):
    x = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    return x, (x[:, 0] * x[:, 1] > 0).astype(np.int32)


def test_mlp_learns_quadrants(rng):
    """A 2-32-2 MLP with AdamW reaches >= 95% accuracy on held-out points."""
    x, y = quadrants(rng, 512)
    xt, yt = quadrants(rng, 512)
    with open_ctx(seed=1) as ctx:
        model = rg.nn.MLP(ctx, (2, 32, 2), std=0.5)
        opt = rg.optim.AdamW(ctx, lr=0.02)
        for _ in range(300):
            ctx.step_begin()
            loss = rg.cross_entropy(model(ctx.tensor(x)), ctx.tensor(y))
            loss.backward()
            opt.step()
            opt.zero_grad()
        assert float(loss) < 0.2
        ctx.step_begin()
        pred = rg.argmax(model(ctx.tensor(xt)), -1).numpy()
        assert (pred == yt).mean() >= 0.95
        assert [n for n, _ in model.named_parameters()] == [
            "mlp0.0.weight", "mlp0.0.bias", "mlp0.1.weight", "mlp0.1.bias"]


def test_gpt_loss_falls(rng):
    with open_ctx(seed=3) as ctx:
        gpt = rg.nn.GPT(ctx, vocab=16, block=8, layers=2, width=32, heads=4)
        assert gpt.param_count == 16 * 32 + 8 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32
        assert "wte.weight" in dict(gpt.named_parameters())
        opt = rg.optim.AdamW(ctx, lr=3e-3)
        seq = np.tile(np.arange(16, dtype=np.int32), 2)  # a cycle: each token predicts the next
        idx = np.stack([seq[i:i + 8] for i in range(8)])
        tgt = np.stack([seq[i + 1:i + 9] for i in range(8)])
        first = None
        for _ in range(60):
            ctx.step_begin()
            loss = gpt.loss(ctx.tensor(idx), ctx.tensor(tgt))
            loss.backward()
            opt.step()
            opt.zero_grad()
            first = first or float(loss)
        assert first > 2.0 and float(loss) < 0.5 * first
        ctx.step_begin()
        assert gpt(ctx.tensor(idx)).shape == (8, 8, 16)


def test_sgd_momentum_matches_formula():
    with open_ctx() as ctx:
        w = ctx.param("w", (1,), init=np.array([1.0]))
        opt = rg.optim.SGD(ctx, lr=0.1, momentum=0.9)
        want, v = 1.0, 0.0
        for _ in range(4):
            ctx.step_begin()
            (w * w).sum().backward()  # d/dw w^2 = 2w
            opt.step()
            opt.zero_grad()
            v = 0.9 * v + 2 * want
            want -= 0.1 * v
        assert math.isclose(w.item(), want, rel_tol=1e-5)
        assert opt.steps == 4


def test_schedule_and_lr():
    with open_ctx() as ctx:
        ctx.param("w", (2,), init="ones")
        opt = rg.optim.AdamW(ctx, lr=1e-3)
        assert math.isclose(opt.lr, 1e-3, rel_tol=1e-6)
        opt.lr = 5e-4
        assert math.isclose(opt.lr, 5e-4, rel_tol=1e-6)
        opt.set_schedule("cosine", lr=1.0, min_lr=0.1, warmup=2, total=10)
        rates = []
        for _ in range(12):
            ctx.step_begin()
            rg.sum(ctx.params()["w"] * 1.0).backward()
            opt.step()
            opt.zero_grad()
            rates.append(opt.lr)
        want = [(s + 1) / 2 if s < 2 else
                0.1 + 0.9 * (1 + math.cos(math.pi * (s - 2) / 8)) / 2 if s < 10 else 0.1
                for s in range(12)]
        np.testing.assert_allclose(rates, want, rtol=1e-5, atol=1e-6)
        with pytest.raises(rg.UsageError):
            opt.lr = 0.5  # refused while a schedule is set
        opt.set_schedule(None)
        with pytest.raises(rg.UsageError, match="total"):
            opt.set_schedule("cosine", lr=1.0, warmup=5, total=3)


def test_clipping():
    with open_ctx() as ctx:
        w = ctx.param("w", (2,), init=np.array([3.0, 4.0]))
        (w * w).sum().backward()  # grad 6, 8: norm 10
        rg.optim.clip_grad_norm(ctx, 1.0)
        np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-5)
        ctx.zero_grad()
        (w * w).sum().backward()
        rg.optim.clip_grad_value(ctx, 7.0)
        np.testing.assert_allclose(w.grad.numpy(), [6.0, 7.0])


def test_checkpoint_round_trip(tmp_path, rng):
    path = tmp_path / "m.safetensors"
    with open_ctx(seed=5) as ctx:
        model = rg.nn.Linear(ctx, 4, 3, name="fc")
        opt = rg.optim.AdamW(ctx)
        rg.sum(model(ctx.tensor(rng.standard_normal((2, 4)).astype(np.float32)))).backward()
        opt.step()
        ctx.set_meta("note", "hello")
        rg.save(ctx, path, opt)
        saved = {n: t.numpy() for n, t in ctx.params().items()}
    with open_ctx(seed=99) as ctx:
        model = rg.nn.Linear(ctx, 4, 3, name="fc")
        opt = rg.optim.AdamW(ctx)
        rg.load(ctx, str(path), opt)
        for n, t in ctx.params().items():
            np.testing.assert_array_equal(t.numpy(), saved[n])
        assert opt.steps == 1 and ctx.get_meta("note") == "hello"
    with open_ctx() as ctx:
        rg.nn.Linear(ctx, 4, 5, name="fc")  # another shape: refused, nothing changed
        with pytest.raises(rg.InputOutputError, match="fc.weight"):
            ctx.load(path)


def test_gradcheck_from_python():
    with open_ctx() as ctx:
        w = ctx.param("w", (3,), init=np.array([0.5, -1.0, 2.0]))
        r = ctx.gradcheck(lambda c: rg.sum(rg.tanh(w) * rg.exp(w)), eps=1e-2)
        assert r["max_abs_err"] < 1e-3
        with pytest.raises(ZeroDivisionError):
            ctx.gradcheck(lambda c: 1 / 0)
        with pytest.raises(TypeError):
            ctx.gradcheck(lambda c: 3.0)
