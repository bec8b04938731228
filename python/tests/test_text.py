"""resgrad.Tokenizer on the miniature GPT-2 tokenizer of tests/data/bpe
(tools/bpe_fixture.py): every text's ids equal to those of the reference encoders
(expected.json), in both file formats, the round trip, and errors that name the problem."""
import json
import os
import threading

import pytest

import resgrad as rg

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "bpe")
FORMATS = [DATA, os.path.join(DATA, "tokenizer.json"), os.path.join(DATA, "legacy")]

with open(os.path.join(DATA, "expected.json"), encoding="utf-8") as _f:
    CASES = json.load(_f)


@pytest.mark.parametrize("path", FORMATS)
def test_reference_ids(path):
    tok = rg.Tokenizer(path)
    assert tok.vocab_size == 957
    assert tok.token_id("<|endoftext|>") == 956
    assert len(CASES) >= 40
    for case in CASES:
        ids = tok.encode(case["text"])
        assert ids == case["ids"], case["text"]
        assert tok.encode(case["text"].encode("utf-8")) == ids
        assert tok.decode(ids) == case["text"]
        assert tok.decode_bytes(ids) == case["text"].encode("utf-8")


def test_tokens_and_partial_characters():
    tok = rg.Tokenizer(DATA)
    assert tok.token_str(tok.token_id("\u0120the")) == "\u0120the"
    assert tok.token_str(100000) is None and tok.token_id("no such token") is None
    ids = tok.encode("\U0001f600")            # one character (4 bytes), several tokens
    head = tok.decode_bytes(ids[:1])
    assert len(ids) > 1 and 0 < len(head) < 4 and "\U0001f600".encode("utf-8").startswith(head)
    assert tok.decode(ids[:1]) == "\ufffd"    # cut inside the character: replaced
    with pytest.raises(UnicodeDecodeError):
        tok.decode(ids[:1], errors="strict")
    assert tok.unicode_version.count(".") == 2


def test_threads_share_one_tokenizer():
    tok = rg.Tokenizer(DATA)
    text = CASES[0]["text"]
    want = CASES[0]["ids"]
    results = []

    def work():
        results.append(all(tok.encode(text) == want for _ in range(50)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4


def test_errors(tmp_path):
    tok = rg.Tokenizer(DATA)
    with pytest.raises(ValueError, match="byte 1"):
        tok.encode(b"a\xff")
    with pytest.raises(TypeError):
        tok.encode(12)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([5, 957])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.decode([-1])
    with pytest.raises(FileNotFoundError, match="missing"):
        rg.Tokenizer(tmp_path / "nowhere")
    bad = tmp_path / "tokenizer.json"
    doc = json.loads(open(os.path.join(DATA, "tokenizer.json"), encoding="utf-8").read())
    doc["normalizer"] = {"type": "NFC"}
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match="normalizer is NFC"):
        rg.Tokenizer(bad)
    bad.write_text('{"model": ', encoding="utf-8")
    with pytest.raises(ValueError, match="line 1"):
        rg.Tokenizer(tmp_path)
