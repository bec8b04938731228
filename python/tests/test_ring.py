"""resgrad.Ring: a ring buffer on the device, its order with the queue, bounds, stale
handles, device-side samples and a replay loop's transfers."""
import numpy as np
import pytest

import resgrad as rg


def entries(first, k, rows=3):
    e = np.arange(first, first + k, dtype=np.float32)[:, None]
    return e * np.array([1, 10, 100][:rows], dtype=np.float32)


def test_push_gather_wrap_and_order(ctx):
    ring = rg.Ring(ctx, 4, 3)
    assert (ring.capacity, ring.rows, ring.dtype, ring.count) == (4, 3, rg.float32, 0)
    assert ring.tensor.shape == (4, 3) and ring.tensor.pool == "persistent"
    ctx.step_begin()
    ring.push(entries(1, 3))
    before = ring.gather([0, 2])  # recorded before the next push: sees entries 1 and 3
    ring.push(ctx.tensor(entries(4, 3)))  # wraps: entries 1 and 2 go
    after = ring.gather(np.array([0, 1, 2, 3], dtype=np.int32))
    np.testing.assert_array_equal(before.numpy(), entries(1, 3)[[0, 2]])
    np.testing.assert_array_equal(after.numpy(), entries(3, 4))
    assert ring.count == 4
    np.testing.assert_array_equal(ring.tensor.numpy()[:, 0], [5, 6, 3, 4])  # raw slots
    ring.push(entries(9, 1)[0])  # one entry as [rows]
    np.testing.assert_array_equal(ring.gather([3]).numpy(), entries(9, 1))


def test_bounds_and_misuse(ctx):
    ring = rg.Ring(ctx, 4, 3)
    ctx.step_begin()
    with pytest.raises(rg.UsageError, match="empty"):
        ring.sample(2).numpy()
    ring.push(entries(0, 2))
    with pytest.raises(rg.UsageError, match=r"index 5 at position 1 is outside \[0, 2\)"):
        ring.gather([1, 5]).numpy()
    with pytest.raises(rg.UsageError, match="do not fit"):
        ring.push(np.zeros((2, 5), np.float32))
    with pytest.raises(rg.UsageError, match="1 <= k <= 4"):
        ring.push(np.zeros((5, 3), np.float32))
    with pytest.raises(rg.UsageError, match="dtype I32"):
        ring.push(ctx.tensor(np.zeros(3, np.int32)))
    with pytest.raises(rg.UsageError, match="capacity 0"):
        rg.Ring(ctx, 0, 3)
    other = rg.Context("cpu", quiet=True)
    with pytest.raises(rg.Error, match="another context"):
        ring.push(other.tensor(entries(0, 1)))
    other.close()


def test_stale_after_reset_and_free(ctx):
    ring = rg.Ring(ctx, 4, 3, dtype="int32")
    assert ring.dtype == rg.int32
    ctx.step_begin()
    ring.push(np.array([[1, 2, 3]], np.int32))
    queued = ring.gather([0])
    ring.free()  # queued work still reads it
    np.testing.assert_array_equal(queued.numpy(), [[1, 2, 3]])
    with pytest.raises(rg.StaleHandleError, match="rg_ring_free"):
        ring.push(np.zeros((1, 3), np.int32))
    with pytest.raises(rg.StaleHandleError):
        _ = ring.tensor
    ring2 = rg.Ring(ctx, 4, 3)
    ctx.reset("persistent")
    with pytest.raises(rg.StaleHandleError, match="reset"):
        _ = ring2.count


def test_samples_on_the_device_and_a_replay_loop(ctx):
    ring = rg.Ring(ctx, 64, 3)
    w = ctx.param("w", (1, 2))
    opt = rg.optim.AdamW(ctx, lr=0.05)
    gen = np.random.default_rng(0)
    for step in range(120):
        if step == 10:
            s0 = ctx.stats()
        ctx.step_begin()
        x = gen.uniform(-1, 1, (4, 2)).astype(np.float32)
        ring.push(np.concatenate([x, x @ np.array([[2.0], [-3.0]], np.float32)], 1))
        idx = ring.sample(16)
        batch = ring.gather(idx)
        loss = rg.mse(rg.linear(rg.slice(batch, 1, 0, 2), w), rg.slice(batch, 1, 2, 1))
        loss.backward()
        opt.step()
        ctx.zero_grad()
        value = float(loss)
    s1 = ctx.stats()
    steps = 110
    assert s1["up"]["count"] - s0["up"]["count"] == steps  # the pushed entries only
    assert s1["down"]["count"] - s0["down"]["count"] == steps
    assert s1["down"]["bytes"] - s0["down"]["bytes"] == 4 * steps  # the loss only
    assert value < 0.01  # from about 4.3
    drawn = ring.sample(1000).numpy()
    assert drawn.min() >= 0 and drawn.max() < 64 and len(np.unique(drawn)) > 50
