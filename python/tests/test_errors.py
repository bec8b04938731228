"""Errors: every library failure is a resgrad.Error subclass carrying the status and the
library's message, raised at the call that fails or at the barrier; nothing crashes the
interpreter and the context keeps working afterwards."""
import numpy as np
import pytest

import resgrad as rg
from conftest import open_ctx


def test_stale_handle(ctx):
    x = ctx.tensor([1.0, 2.0])
    ctx.step_begin()
    assert not x.is_live and x.pool is None
    with pytest.raises(rg.StaleHandleError) as e:
        rg.relu(x)
    assert e.value.status == -2 and "rg_step_begin" in e.value.message
    assert isinstance(e.value, rg.Error) and str(e.value) == e.value.message
    with pytest.raises(rg.StaleHandleError):
        x.numpy()
    with pytest.raises(rg.StaleHandleError):
        x.shape
    assert "stale" in repr(x)
    np.testing.assert_array_equal(rg.relu(ctx.tensor([-1.0, 1.0])).numpy(), [0, 1])


def test_bad_shapes_and_dtypes(ctx):
    a = ctx.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(rg.UsageError, match="rg_matmul"):
        a @ a
    with pytest.raises(ValueError):  # UsageError is a ValueError
        rg.add(a, ctx.tensor(np.ones((4,), np.float32)))
    with pytest.raises(rg.UsageError):
        rg.embedding(a, ctx.tensor([0.5]))
    with pytest.raises(rg.UsageError):
        rg.reshape(a, (4, 2))
    with pytest.raises(ValueError):
        rg.permute(a, (0, 1, 2))
    with pytest.raises(TypeError):
        rg.sum(a, 0.5)
    with pytest.raises(TypeError):
        rg.add(a)
    with pytest.raises(TypeError):
        rg.add(a, a, c=1)
    with pytest.raises(ValueError, match="'relu'"):
        rg.linear_act(a, ctx.tensor(np.ones((2, 3), np.float32)), None, "swish")
    assert (a + a).numpy().sum() == 12  # the context still works


def test_errors_at_the_barrier(ctx):
    table = ctx.tensor(np.ones((3, 2), np.float32))
    e = rg.embedding(table, ctx.tensor([0, 7]))  # 7 is out of range: found when it runs
    with pytest.raises(rg.UsageError, match="7"):
        e.numpy()
    with pytest.raises(rg.DrainFailedError):
        e.numpy()  # its drain failed earlier
    ctx.step_begin()
    assert rg.sum(ctx.tensor([1.0, 2.0])).item() == 3.0


def test_out_of_memory(rng):
    with open_ctx(pass_budget=1 << 16) as ctx:
        with pytest.raises(rg.OutOfMemoryError) as e:
            ctx.tensor(np.zeros((1 << 16,), np.float32))
        assert isinstance(e.value, MemoryError) and e.value.status == -3
        assert ctx.tensor(np.zeros(16, np.float32)).numpy().sum() == 0


def test_tensors_of_two_contexts(ctx):
    with open_ctx() as other:
        with pytest.raises(rg.Error, match="two contexts"):
            ctx.tensor([1.0]) + other.tensor([1.0])


def test_no_tensor_no_context():
    with pytest.raises(TypeError, match="no argument is a resgrad.Tensor"):
        rg.add(np.ones(2), np.ones(2))


def test_closed_context():
    ctx = open_ctx()
    x = ctx.tensor([1.0])
    ctx.close()
    assert ctx.closed and not x.is_live
    with pytest.raises(rg.Error, match="closed"):
        x + x
    with pytest.raises(rg.Error, match="closed"):
        ctx.tensor([1.0])
    ctx.close()  # closing twice is fine


def test_nonfinite_checkpoint_refused(ctx, tmp_path):
    p = ctx.param("p", (2,), init=np.array([1.0, np.nan]))
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"user data")
    with pytest.raises(rg.NonFiniteError, match="p"):
        ctx.save(path)
    assert path.read_bytes() == b"user data"
    with pytest.raises(rg.InputOutputError):
        ctx.load(tmp_path / "missing.safetensors")
    assert p.numpy()[0] == 1.0


def test_unsupported_device():
    try:
        rg.Context("cuda", quiet=True).close()
    except rg.UnsupportedError as e:
        assert isinstance(e, NotImplementedError) and e.status == -7
    with pytest.raises(ValueError):
        rg.Context("tpu")


def test_dry_run():
    with rg.Context("cpu", dry_run=True, quiet=True) as ctx:
        x = ctx.tensor(np.ones((1000, 1000), np.float32))
        (x @ x).numpy()
        assert ctx.stats()["pass_peak"] >= 2 * 4_000_000  # x and x @ x, never allocated
        with pytest.raises(rg.UnsupportedError):
            ctx.save("never-written.safetensors")
