"""GPT-2's byte-level BPE tokenizer (docs/text.md): text to token ids and back.

    tok = resgrad.Tokenizer("gpt2/")          # vocab.json + merges.txt, or tokenizer.json
    ids = tok.encode("Hello world")           # [15496, 995] with GPT-2's files
    assert tok.decode(ids) == "Hello world"

The tokenizer belongs to no context and is read-only once loaded: one may serve any
number of threads, and encode and decode release the GIL.
"""
from ._resgrad import Tokenizer

__all__ = ["Tokenizer"]
