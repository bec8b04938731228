"""resgrad.nn.GPT.from_hf and save_hf on the tiny GPT-2 that Hugging Face's transformers
made (tests/data/hf_gpt2_tiny, tools/hf_gpt2_fixture.py): its logits within 1e-4 of
transformers', an export that loads back to them, and errors that name the problem."""
import json
import os
import shutil
import struct

import numpy as np
import pytest

import resgrad as rg
from conftest import open_ctx

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "hf_gpt2_tiny")
MODEL = os.path.join(DATA, "model.safetensors")


def read_safetensors(path):
    """{name: array} of a safetensors file of F32 and I32 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        dtype = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
        out[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(t["shape"])
    return out


EXPECTED = read_safetensors(os.path.join(DATA, "expected.safetensors"))


def logits_error(ctx, gpt):
    ctx.step_begin()
    got = gpt(ctx.tensor(EXPECTED["tokens"])).numpy()
    return float(np.abs(got - EXPECTED["logits"]).max())


def test_from_hf_gives_transformers_logits():
    with open_ctx() as ctx:
        gpt = rg.nn.GPT.from_hf(ctx, MODEL)
        assert gpt.config == {"vocab": 50, "block": 16, "layers": 2, "width": 24, "heads": 3,
                              "dropout": 0.0, "checkpoint": False}
        assert logits_error(ctx, gpt) <= 1e-4


def test_save_hf_loads_back(tmp_path):
    with open_ctx() as ctx:
        gpt = rg.nn.GPT.from_hf(ctx, MODEL, heads=3, prefix="m.")
        assert "m.h.1.attn.c_attn.weight" in dict(gpt.named_parameters())
        gpt.save_hf(tmp_path / "model.safetensors")
    assert json.loads((tmp_path / "config.json").read_text())["n_head"] == 3
    mine, theirs = read_safetensors(tmp_path / "model.safetensors"), read_safetensors(MODEL)
    assert mine.keys() == theirs.keys()
    for name in theirs:
        assert np.array_equal(mine[name], theirs[name]), name
    with open_ctx() as ctx:
        assert logits_error(ctx, rg.nn.GPT.from_hf(ctx, tmp_path / "model.safetensors")) <= 1e-4


def test_from_hf_errors(tmp_path):
    shutil.copy(MODEL, tmp_path / "model.safetensors")  # no config.json beside it
    with open_ctx() as ctx:
        with pytest.raises(rg.InputOutputError, match="config.json"):
            rg.nn.GPT.from_hf(ctx, tmp_path / "model.safetensors")
        with pytest.raises(rg.UsageError, match="does not divide"):
            rg.nn.GPT.from_hf(ctx, tmp_path / "model.safetensors", heads=5)
        with pytest.raises(rg.InputOutputError, match="cannot open"):
            rg.nn.GPT.from_hf(ctx, tmp_path / "none.safetensors")
        assert ctx.params() == {}
