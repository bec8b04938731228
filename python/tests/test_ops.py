"""Every op of the library from Python, driven by the op table: the forward result
against NumPy (float64) and the gradient against central differences (ctx.gradcheck, the
library's rg_gradcheck) through a loss sum(op(params) * W).

CASES has one entry per generated op function (resgrad.OPS). An op added to the C header
is bound automatically and then fails test_every_op_has_a_case until it gets a case here;
a row added to the op table fails test_every_table_row_is_reachable until its call is an
op function or one of the calls tested elsewhere (NON_OP_CALLS).
"""
import math

import numpy as np
import pytest

import resgrad as rg
from conftest import open_ctx

class In:
    """A tensor input: differentiable (a parameter in the gradient check) or fixed."""

    def __init__(self, v, diff):
        self.v, self.diff = np.asarray(v), diff


def P(v):
    return In(v, True)


def C(v):
    return In(v, False)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def layernorm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def attention(q, k, v, causal, key_padding=None, bias=None):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    if key_padding is not None:
        s = np.where(key_padding[:, None, None, :] != 0, -np.inf, s)
    if causal:
        t, n = s.shape[-2:]
        s = np.where(np.arange(n)[None, :] > np.arange(t)[:, None], -np.inf, s)
    return softmax(s) @ v


def attention_qkv(qkv, heads, causal):
    b, t, c3 = qkv.shape
    c = c3 // 3
    d = c // heads
    q, k, v = (qkv[..., i * c:(i + 1) * c].reshape(b, t, heads, d).transpose(0, 2, 1, 3)
               for i in range(3))
    return attention(q, k, v, causal).transpose(0, 2, 1, 3).reshape(b, t, c)


def xent(logits, targets, ignore=None):
    lp = np.log(softmax(logits))
    picked = np.take_along_axis(lp, targets[..., None].clip(0), -1)[..., 0]
    keep = targets != ignore if ignore is not None else np.ones_like(targets, bool)
    return -(picked * keep).sum() / max(keep.sum(), 1)


def bf16_round(x):
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)


def away_from(x, points, gap=0.05):
    """x with values closer than gap to a kink moved away (finite differences span it)."""
    for p in points:
        near = np.abs(x - p) < gap
        x = np.where(near, p + np.sign(x - p + 1e-9) * gap * 2, x)
    return x


def case(args, ref, grad=True, tol=1e-5, gtol=2e-3):
    return dict(args=args, ref=ref, grad=grad, tol=tol, gtol=gtol)


def n(r, *shape):
    return r.standard_normal(shape)


CASES = {
    "add": case(lambda r: [P(n(r, 2, 3)), P(n(r, 3))], np.add),
    "sub": case(lambda r: [P(n(r, 2, 1)), P(n(r, 2, 3))], np.subtract),
    "mul": case(lambda r: [P(n(r, 2, 3)), P(n(r, 2, 3))], np.multiply),
    "div": case(lambda r: [P(n(r, 2, 3)), P(r.uniform(1, 2, (2, 3)))], np.divide),
    "scale": case(lambda r: [P(n(r, 3, 2)), 0.5], lambda x, s: x * s),
    "pow": case(lambda r: [P(r.uniform(0.5, 2, (3,))), 3.0], np.power),
    "neg": case(lambda r: [P(n(r, 4))], np.negative),
    "exp": case(lambda r: [P(n(r, 4))], np.exp),
    "log": case(lambda r: [P(r.uniform(0.5, 2, (4,)))], np.log),
    "sqrt": case(lambda r: [P(r.uniform(0.5, 2, (4,)))], np.sqrt),
    "relu": case(lambda r: [P(away_from(n(r, 2, 4), [0]))], lambda x: np.maximum(x, 0)),
    "gelu": case(lambda r: [P(n(r, 2, 4))], gelu),
    "silu": case(lambda r: [P(n(r, 2, 4))], lambda x: x * sigmoid(x)),
    "sigmoid": case(lambda r: [P(n(r, 2, 4))], sigmoid),
    "tanh": case(lambda r: [P(n(r, 2, 4))], np.tanh),
    "clamp": case(lambda r: [P(away_from(n(r, 2, 4), [-0.5, 0.5])), -0.5, 0.5],
                  np.clip),
    "sum": case(lambda r: [P(n(r, 2, 3)), 1, True],
                lambda x, a, k: x.sum(a, keepdims=k)),
    "mean": case(lambda r: [P(n(r, 2, 3)), None, False], lambda x, a, k: x.mean()),
    "max": case(lambda r: [P(np.array([[0.0, 1, -1], [3, 2, 1]])), 1, False],
                lambda x, a, k: x.max(a)),
    "argmax": case(lambda r: [C(n(r, 3, 4)), -1, False], lambda x, a, k: x.argmax(a),
                   grad=False, tol=0),
    "softmax": case(lambda r: [P(n(r, 2, 5))], softmax),
    "log_softmax": case(lambda r: [P(n(r, 2, 5))], lambda x: np.log(softmax(x))),
    "matmul": case(lambda r: [P(n(r, 2, 3, 4)), P(n(r, 4, 2))], np.matmul),
    "linear": case(lambda r: [P(n(r, 3, 4)), P(n(r, 2, 4)), P(n(r, 2))],
                   lambda x, w, b: x @ w.T + b),
    "linear_act": case(lambda r: [P(n(r, 3, 4)), P(n(r, 2, 4)), P(n(r, 2)), "gelu"],
                       lambda x, w, b, a: gelu(x @ w.T + b)),
    "layernorm": case(lambda r: [P(n(r, 3, 6)), P(n(r, 6)), P(n(r, 6)), 1e-5],
                      layernorm, tol=1e-4),
    "rmsnorm": case(lambda r: [P(n(r, 3, 6)), P(n(r, 6)), 1e-5],
                    lambda x, g, e: x / np.sqrt((x * x).mean(-1, keepdims=True) + e) * g,
                    tol=1e-4),
    "embedding": case(lambda r: [P(n(r, 5, 3)), C(np.array([[0, 4], [2, 2]]))],
                      lambda t, i: t[i]),
    "attention": case(lambda r: [P(n(r, 1, 2, 3, 4)), P(n(r, 1, 2, 3, 4)),
                                 P(n(r, 1, 2, 3, 4)), True], attention, tol=1e-4),
    "attention_mask": case(lambda r: [P(n(r, 2, 2, 3, 4)), P(n(r, 2, 2, 3, 4)),
                                      P(n(r, 2, 2, 3, 4)), False,
                                      C(np.array([[0, 0, 1], [0, 1, 0]], np.int32)),
                                      C(n(r, 3, 3))], attention, tol=1e-4),
    "attention_qkv": case(lambda r: [P(n(r, 2, 3, 12)), 2, True], attention_qkv,
                          tol=1e-4),
    "cross_entropy": case(lambda r: [P(n(r, 4, 5)), C(np.array([0, 4, 2, 2]))], xent,
                          tol=1e-4),
    "cross_entropy_ignore": case(lambda r: [P(n(r, 4, 5)), C(np.array([0, -1, 2, 2])),
                                            -1], xent, tol=1e-4),
    "mse": case(lambda r: [P(n(r, 2, 3)), P(n(r, 2, 3))],
                lambda a, b: ((a - b) ** 2).mean()),
    "reshape": case(lambda r: [P(n(r, 2, 6)), (3, -1)], lambda x, d: x.reshape(d)),
    "transpose": case(lambda r: [P(n(r, 2, 3, 4)), 0, 2], np.swapaxes),
    "permute": case(lambda r: [P(n(r, 2, 3, 4)), (1, 2, 0)], np.transpose),
    "slice": case(lambda r: [P(n(r, 3, 5)), 1, 1, 3], lambda x, a, s, ln: x[:, s:s + ln]),
    "concat": case(lambda r: [P(n(r, 2, 3)), P(n(r, 2, 1)), 1],
                   lambda a, b, ax: np.concatenate([a, b], ax)),
    "dropout": case(lambda r: [P(n(r, 3, 4)), 0.25], None),  # forward: test_dropout
    "cast": case(lambda r: [C(n(r, 3, 4)), "bf16"], lambda x, d: bf16_round(x),
                 grad=False, tol=0),
    "detach": case(lambda r: [C(n(r, 3))], lambda x: x, grad=False, tol=0),
}

# Calls of op-table rows that are not op functions, and the test that covers each.
NON_OP_CALLS = {
    "rg_kv_write": "C only for now: tests/test_generate.c (rg_gpt_generate)",
    "rg_attention_cached": "C only for now: tests/test_generate.c (rg_gpt_generate)",
    "rg_sample": "C only for now: tests/test_generate.c",
    "rg_input": "test_tensor.py (ctx.tensor)",
    "rg_copy": "reshape and detach record COPY",
    "rg_zero_grad": "test_train.py",
    "rg_clip_grad_norm": "test_train.py",
    "rg_clip_grad_value": "test_train.py",
    "rg_optim_step": "test_train.py",
    "rg_ring_push": "test_ring.py (resgrad.Ring)",
    "rg_ring_gather": "test_ring.py (resgrad.Ring)",
    "rg_ring_sample": "test_ring.py (resgrad.Ring)",
}


def test_every_op_has_a_case():
    assert set(rg.OPS) == set(CASES), \
        f"ops without a case: {set(rg.OPS) - set(CASES)}; cases of no op: {set(CASES) - set(rg.OPS)}"


def test_every_table_row_is_reachable():
    for kernel, call, nin, nout, flags in rg.OP_TABLE:
        if "BWD" in flags.split():
            continue  # recorded by backward(): checked through the gradients below
        assert call[3:] in rg.OPS or call in NON_OP_CALLS, \
            f"op table row {kernel} ({call}) has no Python function and no test"


def host(a):
    """The float64 value the reference sees (float inputs rounded to float32 first)."""
    if not isinstance(a, In):
        return a
    return a.v.astype(np.float32).astype(np.float64) if a.v.dtype.kind == "f" else a.v


def forward_inputs(ctx, args):
    return [ctx.tensor(a.v) if isinstance(a, In) else a for a in args]


@pytest.mark.parametrize("name", sorted(k for k, c in CASES.items() if c["ref"]))
def test_forward(name, ctx, rng):
    c = CASES[name]
    args = c["args"](rng)
    got = getattr(rg, name)(*forward_inputs(ctx, args)).numpy()
    want = np.asarray(c["ref"](*[host(a) for a in args]))
    assert got.shape == want.shape, f"{name}: shape {got.shape}, want {want.shape}"
    err = np.max(np.abs(got - want) / np.maximum(1, np.abs(want)), initial=0)
    assert err <= c["tol"], f"{name}: forward error {err}"


@pytest.mark.parametrize("name", sorted(k for k, c in CASES.items() if c["grad"]))
def test_gradient(name, rng):
    c = CASES[name]
    args = c["args"](rng)
    with open_ctx(seed=7) as ctx:
        ins = []
        for k, a in enumerate(args):
            if isinstance(a, In) and a.diff:
                v = a.v.astype(np.float32)
                ins.append(ctx.param(f"in{k}", v.shape, init=v))
            elif isinstance(a, In):
                ins.append(ctx.constant(a.v))
            else:
                ins.append(a)
        f = getattr(rg, name)
        probe = f(*ins)
        w = ctx.constant(rng.uniform(0.25, 1, probe.shape) * rng.choice([-1, 1], probe.shape))
        ctx.step_begin()
        r = ctx.gradcheck(lambda cx: (f(*ins) * w).sum(), eps=1e-2)
        assert r["max_abs_err"] <= c["gtol"], f"{name}: gradient error {r}"


def test_dropout(ctx, rng):
    x = rng.standard_normal((64, 64)).astype(np.float32)
    y = rg.dropout(ctx.tensor(x), 0.25).numpy()
    kept = y != 0
    assert 0.6 < kept.mean() < 0.9  # 4096 draws of p = 0.75
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    ctx.eval()
    np.testing.assert_array_equal(rg.dropout(ctx.tensor(x), 0.25).numpy(), x)


def test_methods_match_functions(ctx, rng):
    x = ctx.tensor(rng.standard_normal((2, 3)).astype(np.float32))
    np.testing.assert_array_equal(x.relu().numpy(), rg.relu(x).numpy())
    np.testing.assert_array_equal(x.sum(axis=0).numpy(), rg.sum(x, 0).numpy())
    np.testing.assert_array_equal(x.reshape((3, 2)).numpy(), rg.reshape(x, dims=(3, 2)).numpy())


def test_docstrings_come_from_the_header():
    assert "numerically stable" in rg.softmax.__doc__
    assert "d: q, k and v" in rg.attention.__doc__
    assert "numerically stable" in rg.Tensor.softmax.__doc__
