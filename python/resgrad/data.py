"""Token datasets: a file of tokens memory-mapped and checked once, and the batches of a
language model cut from it (docs/data.md).

    data = resgrad.data.TokenData(ctx, "train.bin", vocab=50257, seed=1)
    for step in range(steps):
        ctx.step_begin()
        idx, targets = data.batch(8, 1024)      # int32 [8, 1024] each, uploaded with the step
        loss = gpt.loss(idx, targets)

Formats: llm.c's token files (a 256-int32 header with magic 20240520 and version 1, then
uint16 tokens) and raw bytes (one token per byte). Batch n is a function of the seed and
n alone, so seek(n) resumes exactly; a worker thread gathers batch n + 1 while step n runs.
"""
from ._resgrad import TokenData

__all__ = ["TokenData", "write_llmc"]


def write_llmc(path, tokens):
    """Writes tokens (integers in [0, 65536)) as an llm.c token file."""
    import numpy as np

    t = np.asarray(tokens)
    if t.size and (t.min() < 0 or t.max() > 65535):
        raise ValueError("llm.c token files hold tokens in [0, 65536)")
    header = np.zeros(256, "<i4")
    header[:3] = (20240520, 1, t.size)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(t.astype("<u2").tobytes())
