"""Token files from Python: llm.c's format and raw bytes, batches by number, errors."""
import numpy as np
import pytest

import resgrad as rg


def test_llmc_batches(ctx, tmp_path):
    path = tmp_path / "t.bin"
    tokens = np.arange(1000) % 97
    rg.data.write_llmc(path, tokens)
    d = rg.data.TokenData(ctx, path, vocab=97, seed=3)
    assert d.tokens == 1000 and d.format == "llmc" and d.next == 0
    idx, tgt = d.batch(4, 16)
    assert idx.shape == (4, 16) and idx.dtype == rg.int32
    i, t = idx.numpy(), tgt.numpy()
    np.testing.assert_array_equal(t[:, :-1], i[:, 1:])  # targets are the next tokens
    np.testing.assert_array_equal((i + 1) % 97, t)  # the file counts up modulo 97
    assert d.next == 1
    d.seek(0)
    ctx.step_begin()
    again, _ = d.batch(4, 16)
    np.testing.assert_array_equal(again.numpy(), i)  # batch 0 again, the same rows
    seq, _ = d.batch(2, 8, random=False)
    assert seq.shape == (2, 8)


def test_raw_bytes_and_errors(ctx, tmp_path):
    raw = tmp_path / "t.txt"
    raw.write_bytes(b"hello world, hello tokens")
    d = rg.data.TokenData(ctx, raw)
    assert d.format == "raw" and d.tokens == 25
    idx, _ = d.batch(1, 5, random=False)
    assert bytes(idx.numpy()[0].astype(np.uint8)) == b"hello"
    with pytest.raises(rg.UsageError):
        d.batch(8, 100)  # more than the file holds
    with pytest.raises(rg.InputOutputError, match="missing|No such"):
        rg.data.TokenData(ctx, tmp_path / "missing.bin")
    bad = tmp_path / "bad.bin"
    rg.data.write_llmc(bad, [1, 2, 300])
    with pytest.raises(rg.InputOutputError, match="300"):
        rg.data.TokenData(ctx, bad, vocab=256)
    trunc = tmp_path / "trunc.bin"
    trunc.write_bytes(bad.read_bytes()[:-2])
    with pytest.raises(rg.InputOutputError):
        rg.data.TokenData(ctx, trunc, format="llmc")
    d.close()
    with pytest.raises(rg.Error, match="closed"):
        d.batch(1, 2)


def test_dataset_outlives_a_closed_context(tmp_path):
    raw = tmp_path / "t.txt"
    raw.write_bytes(b"0123456789" * 10)
    ctx = rg.Context("cpu", quiet=True)
    d = rg.data.TokenData(ctx, raw)
    ctx.close()  # frees the dataset with the context
    with pytest.raises(rg.Error, match="closed"):
        d.batch(1, 2)
    del d  # and letting the object go frees nothing twice
