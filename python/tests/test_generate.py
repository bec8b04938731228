"""resgrad.nn.GPT.generate (rg_gpt_generate: a KV cache on the device) on the Hugging Face
GPT-2 fixture: greedy tokens are argmax over forward of the growing sequence (and
PyTorch's, where the fixture holds them), a seed reproduces its draw, stop ends a row,
and bad prompts raise naming the problem."""
import os

import numpy as np
import pytest

import resgrad as rg
from conftest import open_ctx
from test_hf import EXPECTED, MODEL

PROMPTS = [[3, 14, 15, 9, 26], [7, 1]]


def slow_greedy(ctx, gpt, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        ctx.step_begin()
        logits = gpt(ctx.tensor(np.array([seq], dtype=np.int32))).numpy()
        seq.append(int(np.argmax(logits[0, -1])))
    return seq[len(prompt):]


def test_greedy_is_argmax_of_forward():
    ctx = open_ctx()
    gpt = rg.nn.GPT.from_hf(ctx, MODEL)
    got = gpt.generate(PROMPTS, 8)
    assert got == [slow_greedy(ctx, gpt, p, 8) for p in PROMPTS]
    if "greedy_0" in EXPECTED:  # PyTorch's continuation (tools/hf_gpt2_fixture.py)
        assert got == [EXPECTED["greedy_0"].tolist(), EXPECTED["greedy_1"].tolist()]
    # an int array of equal-length prompts is the same as the list
    arr = np.array([PROMPTS[0], PROMPTS[0]], dtype=np.int64)
    assert gpt.generate(arr, 8) == [got[0], got[0]]
    ctx.close()


def test_sampling_seed_and_stop():
    ctx = open_ctx()
    gpt = rg.nn.GPT.from_hf(ctx, MODEL)
    a = gpt.generate(PROMPTS, 8, temperature=1.2, top_k=20, top_p=0.95, seed=9)
    b = gpt.generate(PROMPTS, 8, temperature=1.2, top_k=20, top_p=0.95, seed=9)
    c = gpt.generate(PROMPTS, 8, temperature=1.2, top_k=20, top_p=0.95, seed=10)
    assert a == b and a != c
    assert all(len(r) == 8 and all(0 <= t < 50 for t in r) for r in a)
    greedy = gpt.generate(PROMPTS, 8)
    stop = greedy[0][2]
    cut = greedy[0][:greedy[0].index(stop) + 1]
    assert gpt.generate(PROMPTS[:1], 8, stop=stop) == [cut]
    ctx.close()


def test_generate_errors():
    ctx = open_ctx()
    gpt = rg.nn.GPT.from_hf(ctx, MODEL)
    with pytest.raises(rg.UsageError, match="outside the vocabulary"):
        gpt.generate([[1, 50]], 4)
    with pytest.raises(rg.UsageError, match="block size"):
        gpt.generate([list(range(12))], 8)
    with pytest.raises(rg.UsageError, match="top_p"):
        gpt.generate(PROMPTS, 4, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError):
        gpt.generate([[]], 4)
    assert gpt.generate(PROMPTS, 2) == [r[:2] for r in gpt.generate(PROMPTS, 8)]
    ctx.close()
