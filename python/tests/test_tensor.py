"""Tensors from Python: creation from host data, attributes that never wait, reads that
are the barrier, operators, dtypes, scalars, labels and the counters."""
import numpy as np
import pytest

import resgrad as rg


def test_tensor_from_numpy_and_back(ctx):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ctx.tensor(a)
    assert t.shape == (3, 4) and t.ndim == 2 and len(t) == 3
    assert t.dtype == rg.float32 and t.pool == "pass" and t.is_live
    assert t.device in ("cpu", "cuda:0")
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert t.tolist() == a.tolist()


def test_dtype_inference_and_conversion(ctx):
    assert ctx.tensor([1, 2, 3]).dtype == rg.int32
    assert ctx.tensor([1.5, 2]).dtype == rg.float32
    assert ctx.tensor(np.zeros(3, np.float64)).dtype == rg.float32
    assert ctx.tensor([True, False]).dtype == rg.int32
    assert ctx.tensor([1, 2], dtype="float32").dtype == rg.float32
    b = ctx.tensor([1.0, 1.00390625, 3.14159], dtype=rg.bfloat16)
    assert b.dtype == rg.bfloat16
    np.testing.assert_array_equal(b.numpy(), np.array([1.0, 1.0, 3.140625], np.float32))
    with pytest.raises(OverflowError):
        ctx.tensor(np.array([2**40]))
    with pytest.raises(TypeError):
        ctx.tensor(np.array(["a"]))
    with pytest.raises(ValueError):
        ctx.tensor([1.0], dtype="float16")


def test_item_float_int(ctx):
    s = rg.sum(ctx.tensor([1.0, 2.0, 3.5]))
    assert s.item() == 6.5 and float(s) == 6.5 and int(s) == 6
    i = rg.argmax(ctx.tensor([1.0, 5.0, 2.0]), 0)
    assert i.item() == 1 and isinstance(i.item(), int)
    with pytest.raises(rg.Error, match="one element"):
        ctx.tensor([1.0, 2.0]).item()


def test_operators(ctx, rng):
    a_h = rng.standard_normal((2, 3)).astype(np.float32)
    b_h = rng.standard_normal((3,)).astype(np.float32)
    a, b = ctx.tensor(a_h), ctx.tensor(b_h)
    close = np.testing.assert_allclose
    close((a + b).numpy(), a_h + b_h, rtol=1e-6)
    close((a - b).numpy(), a_h - b_h, rtol=1e-6)
    close((a * b).numpy(), a_h * b_h, rtol=1e-6)
    close((a / (b * b + 1)).numpy(), a_h / (b_h * b_h + 1), rtol=1e-5)
    close((-a).numpy(), -a_h)
    close((+a).numpy(), a_h)
    close((a @ ctx.tensor(a_h.T)).numpy(), a_h @ a_h.T, rtol=1e-5)
    close((a ** 2).numpy(), a_h ** 2, rtol=1e-6)
    # numbers on either side, NumPy arrays on either side
    close((a + 1).numpy(), a_h + 1, rtol=1e-6)
    close((1 - a).numpy(), 1 - a_h, rtol=1e-6)
    close((2 * a).numpy(), 2 * a_h, rtol=1e-6)
    close((a / 4).numpy(), a_h / 4, rtol=1e-6)
    close((2 / (a * a + 1)).numpy(), 2 / (a_h * a_h + 1), rtol=1e-5)
    close((b_h + a).numpy(), a_h + b_h, rtol=1e-6)
    close((a_h @ ctx.tensor(a_h.T)).numpy(), a_h @ a_h.T, rtol=1e-5)
    assert isinstance(b_h * a, rg.Tensor)
    with pytest.raises(TypeError):
        a + "x"


def test_indexing(ctx):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = ctx.tensor(a)
    for k in [0, -1, (1, 2), (slice(None), 1), (0, slice(1, 3)), slice(0, 1), (1, 2, 3),
              (slice(None), slice(None), 2)]:
        np.testing.assert_array_equal(t[k].numpy(), a[k])
    with pytest.raises(IndexError):
        t[2]
    with pytest.raises(IndexError):
        t[::2]
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]
    w = ctx.param("w", (3,), init=np.array([1.0, 2.0, 3.0]))
    (w[1:] * 2).sum().backward()  # gradients flow through indexing
    np.testing.assert_array_equal(w.grad.numpy(), [0, 2, 2])


def test_no_truth_value(ctx):
    with pytest.raises(TypeError, match="barrier"):
        bool(ctx.tensor([1.0]))
    t = ctx.tensor([1.0])
    assert ctx.tensor(t) is t  # already a tensor of this context: no copy


def test_scalars_are_uploaded_once(ctx):
    x = ctx.tensor(np.ones(4, np.float32))
    (x + 3.0).numpy()
    before = ctx.stats()["up"]["count"]
    for _ in range(5):
        (x + 3.0).numpy()
    assert ctx.stats()["up"]["count"] == before  # the scalar 3.0 is a persistent constant
    ctx.step_begin()
    x = ctx.tensor(np.ones(4, np.float32))
    np.testing.assert_array_equal((x + 3.0).numpy(), np.full(4, 4.0))


def test_attributes_do_not_wait(ctx):
    x = ctx.tensor(np.ones((2, 2), np.float32))
    y = rg.relu(x * 2)
    assert y.pending and "pending" in repr(y) and "rg_relu" in y.describe()
    assert y.shape == (2, 2) and y.dtype == rg.float32
    assert y.pending  # none of the above ran the queue
    y.numpy()
    assert not y.pending


def test_params_grad_and_write(ctx):
    w = ctx.param("w", (3,), init="ones")
    assert w.name == "w" and w.pool == "persistent"
    assert list(ctx.params()) == ["w"]
    x = ctx.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    (w * x).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1, 2, 3])
    w.write(np.array([4.0, 5.0, 6.0]))
    np.testing.assert_array_equal(w.numpy(), [4, 5, 6])
    v = ctx.param("v", 2, init=np.array([7.0, 8.0]))
    np.testing.assert_array_equal(v.numpy(), [7, 8])
    n = ctx.param("n", (1000,), init="normal", a=2.0)
    assert 1.7 < n.numpy().std() < 2.3


def test_retain_grad(ctx):
    x = ctx.param("x", (2,), init=np.array([1.0, -2.0]))
    h = (x * 3).retain_grad()
    rg.sum(h * h).backward()
    np.testing.assert_allclose(h.grad.numpy(), [6.0, -12.0])
    np.testing.assert_allclose(x.grad.numpy(), [18.0, -36.0])


def test_labels_name_errors(ctx):
    a = ctx.tensor(np.ones((2, 3), np.float32))
    with ctx.label("block7"):
        with pytest.raises(rg.UsageError, match="block7"):
            a @ a


def test_stats_count_one_upload_and_one_download(ctx):
    w = ctx.param("w", (4, 4), init="normal", a=0.1)
    opt = rg.optim.SGD(ctx, lr=0.1)
    x = np.ones((2, 4), np.float32)
    for _ in range(3):
        ctx.step_begin()
        ctx.reset_stats()
        loss = rg.mse(ctx.tensor(x) @ w, ctx.tensor(x))
        loss.backward()
        opt.step()
        opt.zero_grad()
        float(loss)
        s = ctx.stats()
        assert s["down"]["count"] == 1 and s["down"]["bytes"] == 4
        assert s["up_site"]["input"]["count"] == 2
        assert s["drains"] == 1


def test_dump_handles_and_generation(ctx):
    ctx.param("p", (2,))
    ctx.tensor([1.0])
    lines = ctx.dump_handles()
    assert any("p" in line and "persistent" in line for line in lines)
    assert any("pass" in line for line in lines)
    g = ctx.generation("pass")
    ctx.step_begin()
    assert ctx.generation("pass") == g + 1


def test_metadata_and_memory(ctx):
    ctx.set_meta("model", "mlp")
    assert ctx.get_meta("model") == "mlp" and ctx.get_meta("nope") is None
    avail, total = ctx.memory()
    assert 0 < avail <= total


def test_trace_file(tmp_path):
    import json

    import resgrad as rg
    from conftest import DEVICE

    path = tmp_path / "run.json"
    with rg.Context(DEVICE, quiet=True, trace=path) as ctx:
        x = ctx.tensor(np.ones((4, 4), np.float32))
        float(rg.sum(rg.relu(x @ x)))
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e.get("name") for e in events}
    assert {"drain", "matmul", "relu", "sum", "transfer up", "transfer down"} <= names, names
