#!/usr/bin/env python3
"""Writes tests/data/bpe/: a miniature GPT-2 tokenizer and the token ids that reference
implementations give for a varied set of texts, so that the C tokenizer's test needs no
Python package.

    python3 -m venv /tmp/tokvenv
    /tmp/tokvenv/bin/pip install tokenizers tiktoken regex
    /tmp/tokvenv/bin/python tools/bpe_fixture.py [OUT_DIR]

GPT-2's own vocabulary (50257 tokens, about 1.5 MB) is too large to commit as a test
fixture. This script instead trains a small byte-level BPE with the tokenizers package
(its ByteLevel pre-tokenizer cuts with GPT-2's pattern, its initial alphabet is GPT-2's
256 byte characters) on the corpus below, then lays its files out exactly as GPT-2's
are: ids 0..255 the byte tokens in GPT-2's order (the printable bytes first), then one id
per merge in merge order, then "<|endoftext|>" last. It writes

  vocab.json, merges.txt    GPT-2's two-file format (encoder.json / vocab.bpe);
  tokenizer.json            Hugging Face tokenizers' format, as that package saves it;
  legacy/tokenizer.json     the same with merges as "a b" strings (older tokenizers);
  expected.json             [{"text": ..., "ids": [...]}, ...] for the texts below.

Every expected id list is checked to be the same from three independent encoders before
it is written: the tokenizers package (Rust; Oniguruma regex) loading tokenizer.json,
tiktoken (Rust; OpenAI's encoder, given the ranks through its own GPT-2 file reader
data_gym_to_mergeable_bpe_ranks) and GPT-2's published algorithm written out in plain
Python below with the regex module. A text on which they disagree stops the script.
"""
import json
import os
import sys

import regex
import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOT = "<|endoftext|>"
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
MERGES = 700

CORPUS = """\
The quick brown fox jumps over the lazy dog. It's a classic pangram; they've used it
for years, and we'll keep using it. I'm sure you'd agree that it isn't going away.
THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG! Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100
1000 2024 3.14159 2.71828 1,000,000 -17 +23 50% $19.99 #1 @user a=b+c*d/e (x) [y] {z}
Punctuation runs: ... !!! ??? --- *** ;;; ::: ,,, ''' \"\"\" ~~~ ``` ((())) <<>> ==> <=
    Indented line with four spaces.
\tTabbed line.\t\tTwo tabs.
Trailing spaces here.    
Blank lines follow.


Café, naïve, résumé, façade, jalapeño, Zürich, São Paulo, Kraków, Øresund, Ærø.
Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.
Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.
日本語のテキスト：東京は日本の首都です。中文：我爱自然语言处理。한국어 문장입니다.
Emoji: 🙂 🚀 🎉 👍🏽 ❤️ 🇩🇪 👨‍👩‍👧 and combining marks: é ñ (e + U+0301, n + U+0303).
def encode(text):  # Python code with    aligned   comments
    return [ord(c) for c in text if c != ' ']
if (x >= 10 && y <= 20) { return x->next; } else { printf("%d\\n", y); }
Contractions again: she's, don't, you're, we've, I'm, they'll, he'd, It'S, DON'T.
"""

TEXTS = [
    # one long, varied text, the main case
    "Hello world! It's a test: they're here, we've seen it, I'm sure they'll go, he'd say.\n"
    "Numbers 123 4567 89.01 1,234,567 and ½ ¾ Ⅻ ٣٤٥ ①②.\n"
    "Punctuation runs!!! ... ?!?! --- \"quoted\" 'single' (parens) [brackets] {braces}\n"
    "Whitespace:   three spaces,\ttab,\t\ttwo tabs, trailing   \n\n\nthree newlines\r\n"
    "Accents: café naïve Zürich Øre ß ÆØÅ ç ğ ş ł ő ű.\n"
    "Greek: Καλημέρα κόσμε. Cyrillic: Привет, мир! Ёжик.\n"
    "CJK: 你好，世界。日本語のテキスト。한국어.\n"
    "Emoji: 😀👍🏿🏳️‍🌈👩‍💻 🇯🇵 combining: é ñ ö (e\u0301 n\u0303 o\u0308) a\u20dd.\n"
    "Code: for (int i = 0; i < n; i++) { s += a[i] * b[i]; }  // sum\n"
    f"Special{EOT}token, twice {EOT}{EOT} and half <|endof text|> <|endoftext.\n"
    "Odd spaces: a\u00a0b\u2003c\u3000d\u2028e\u0085f x\u200by end   ",
    # edge cases, each encoded alone
    "",
    " ",
    "   ",
    "\n",
    "\n\n",
    " \n ",
    "a",
    "a ",
    "a  ",
    "  a",
    " a b  c   d",
    "trailing\t",
    "\t\tx",
    "it's",
    "IT'S",
    "'s",
    "'",
    "''",
    "x'",
    "don't'll've",
    "''re",
    "' s",
    "12345678901234567890",
    " 3.14",
    "x2y3z",
    "!!!",
    " !!!",
    "a!b?c.",
    "ab\r\ncd\r\n",
    "é",
    "e\u0301",
    "\U0001f600",
    " \U0001f600\U0001f600",
    "東京",
    EOT,
    EOT + EOT,
    " " + EOT + " ",
    "a" + EOT + "b",
    "<|endoftext|",
    "<|" + EOT,
    # characters on which whitespace definitions differ (U+001C..U+001F are
    # str.isspace() but not White_Space; U+180E and U+200B are neither; U+0085 is both)
    "a\x1c\x1d b\x1f\n",
    "x\u180e y\u200b\u2060 z\ufeff",
    "\x0b\x0c a\x0b",
    "\u1680x \u205f y\u0085",
]


def byte_chars():
    """GPT-2's byte -> character table, and its bytes in GPT-2's id order."""
    order = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    chars = {b: chr(b) for b in order}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
            order.append(b)
    return chars, order


def train():
    """The merges of a byte-level BPE trained on CORPUS, as (left, right) strings."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=256 + MERGES, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    # the corpus several times over, so that the pairs worth a merge recur
    tok.train_from_iterator([CORPUS] * 4, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def reference_bpe(vocab, ranks, chars):
    """GPT-2's published algorithm: cut by PATTERN, then within each piece merge the pair
    of lowest rank, all of its occurrences, until no pair has a rank."""
    pat = regex.compile(PATTERN)

    def piece(word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(ranks.get((a, b), None), i) for i, (a, b) in
                     enumerate(zip(parts, parts[1:]))]
            best = min((r for r, _ in pairs if r is not None), default=None)
            if best is None:
                break
            a, b = next((parts[i], parts[i + 1]) for r, i in pairs if r == best)
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        return [vocab[p] for p in parts]

    def encode(text):
        ids = []
        for k, chunk in enumerate(text.split(EOT)):
            if k:
                ids.append(vocab[EOT])
            for word in pat.findall(chunk):
                ids += piece("".join(chars[b] for b in word.encode("utf-8")))
        return ids

    return encode


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "bpe")
    os.makedirs(os.path.join(out, "legacy"), exist_ok=True)
    chars, order = byte_chars()
    merges = train()
    vocab = {chars[b]: i for i, b in enumerate(order)}
    for a, b in merges:
        assert a + b not in vocab, f"merge {a} {b} makes a token twice"
        vocab[a + b] = len(vocab)
    vocab[EOT] = len(vocab)

    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])
    doc = json.loads(tok.to_str())
    if isinstance(doc["model"]["merges"][0], str):
        sys.exit("this tokenizers version writes merges as strings: install a newer one")
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
    doc["model"]["merges"] = [f"{a} {b}" for a, b in doc["model"]["merges"]]
    with open(os.path.join(out, "legacy", "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)

    hf = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(out, "merges.txt"),
                                            os.path.join(out, "vocab.json"))
    tk = tiktoken.Encoding("fixture", pat_str=PATTERN, mergeable_ranks=ranks,
                           special_tokens={EOT: vocab[EOT]})
    plain = reference_bpe(vocab, {m: r for r, m in enumerate(merges)}, chars)

    cases = []
    for text in TEXTS:
        a = hf.encode(text).ids
        b = tk.encode(text, allowed_special="all")
        c = plain(text)
        if not a == b == c:
            sys.exit(f"the references disagree on {text!r}:\n tokenizers {a}\n"
                     f" tiktoken   {b}\n plain      {c}")
        assert hf.decode(a, skip_special_tokens=False) == text, text
        cases.append({"text": text, "ids": a})
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n]\n")
    n = sum(len(c["ids"]) for c in cases)
    print(f"{out}: {len(vocab)} tokens, {len(merges)} merges, {len(cases)} texts, "
          f"{n} ids; tokenizers, tiktoken and the plain algorithm agree")


if __name__ == "__main__":
    main()
