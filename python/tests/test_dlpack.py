"""Zero-copy exchange through DLPack: NumPy on the CPU, PyTorch (and CuPy) on CUDA. Every
test checks that both sides see one piece of memory: the same data pointer, and a write
on one side seen by the other."""
import gc
import sys

import numpy as np
import pytest

import resgrad as rg
from conftest import DEVICE, cuda_available, open_ctx

cpu_only = pytest.mark.skipif(DEVICE != "cpu", reason="NumPy shares host memory only")


@cpu_only
def test_export_to_numpy_shares_memory(ctx):
    t = rg.relu(ctx.tensor(np.array([-1.0, 2.0, 3.0], np.float32)))
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, [0, 2, 3])
    b = np.from_dlpack(t)
    assert a.ctypes.data == b.ctypes.data  # the tensor's own bytes, twice
    a[0] = 42.0  # the borrower writes: resgrad reads the same memory
    assert t.numpy()[0] == 42.0
    assert rg.sum(t).item() == 47.0


@cpu_only
def test_a_lent_tensor_pins_its_pool(ctx):
    t = ctx.tensor(np.ones(4, np.float32))
    a = np.from_dlpack(t)
    with pytest.raises(rg.UsageError, match="export"):
        ctx.step_begin()
    with pytest.raises(rg.Error, match="DLPack"):
        ctx.close()
    assert a.sum() == 4  # refused: nothing was freed
    del a
    gc.collect()
    ctx.step_begin()
    assert not t.is_live


@cpu_only
def test_import_from_numpy_shares_memory(ctx):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    refs = sys.getrefcount(x)
    t = rg.from_dlpack(x, ctx)
    assert t.shape == (3, 4) and t.dtype == rg.float32
    back = np.from_dlpack(t)
    assert back.ctypes.data == x.ctypes.data  # one piece of memory, both ways
    del back
    x[0, 0] = 100.0
    assert rg.sum(t).item() == 100.0 + sum(range(1, 12))
    assert sys.getrefcount(x) > refs  # resgrad holds x until the pass pool resets
    ctx.step_begin()
    gc.collect()
    assert sys.getrefcount(x) == refs and not t.is_live


@cpu_only
def test_import_refuses_what_it_cannot_share(ctx):
    with pytest.raises(TypeError, match="dtype"):
        rg.from_dlpack(np.zeros(3, np.float64), ctx)
    with pytest.raises(TypeError, match="contiguous"):
        rg.from_dlpack(np.zeros((4, 4), np.float32)[:, ::2], ctx)
    i = rg.from_dlpack(np.array([1, 2], np.int32), ctx)
    assert i.dtype == rg.int32 and i.tolist() == [1, 2]
    assert rg.from_dlpack(i, ctx) is i


@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_torch_cuda_both_ways():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    with rg.Context("cuda", quiet=True) as ctx:
        x = torch.arange(8, dtype=torch.float32, device="cuda") * 0.5
        t = rg.from_dlpack(x, ctx)
        assert t.device.startswith("cuda") and t.shape == (8,)
        y = torch.from_dlpack(t)
        assert y.data_ptr() == x.data_ptr()
        np.testing.assert_allclose((t * 2).numpy(), (x * 2).cpu().numpy())
        del y
        r = rg.gelu(ctx.tensor(np.linspace(-2, 2, 16, dtype=np.float32)))
        z = torch.from_dlpack(r)  # computed by resgrad, read by torch on its own stream
        np.testing.assert_allclose(z.cpu().numpy(), r.numpy(), rtol=1e-6)
        z.add_(1.0)  # torch writes resgrad's memory
        torch.cuda.synchronize()
        np.testing.assert_allclose(r.numpy(), z.cpu().numpy(), rtol=1e-6)
        del z
        gc.collect()
        ctx.step_begin()


@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_cupy_cuda_both_ways():
    cp = pytest.importorskip("cupy")
    with rg.Context("cuda", quiet=True) as ctx:
        x = cp.arange(6, dtype=cp.float32)
        t = rg.from_dlpack(x, ctx)
        y = cp.from_dlpack(t)
        assert y.data.ptr == x.data.ptr
        assert rg.sum(t).item() == 15.0
        del y
        gc.collect()
        ctx.step_begin()
