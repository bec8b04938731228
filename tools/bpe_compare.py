#!/usr/bin/env python3
"""Compares resgrad's BPE tokenizer with the tokenizers library and tiktoken on one
tokenizer folder: random text drawn from awkward characters, and any text files given.

    PYTHONPATH=build/python python3 tools/bpe_compare.py DIR [--random N] [--seed S] [FILE...]

DIR holds vocab.json, merges.txt and tokenizer.json (GPT-2's folder as transformers saves
it, or tests/data/bpe). Needs the resgrad package (build/python) and
`pip install tokenizers tiktoken`. Every text is encoded by resgrad from both formats,
by tokenizers from tokenizer.json and by tiktoken from the two-file format (the ranks
read by tiktoken's own GPT-2 reader); all four id lists must be equal, and resgrad's
decode must give the text back. Prints the first few differences and a count; exits 1
if any text differs. Not part of the test suite: it needs Python packages and, for
GPT-2's own files, a download.
"""
import argparse
import json
import os
import random
import sys

import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tokenizers import Tokenizer

import resgrad as rg
from bpe_fixture import EOT, PATTERN  # beside this file

# Characters where tokenizers tend to part ways: whitespace of every kind (with the ones
# only str.isspace() counts), contractions, numbers of other scripts, marks, emoji
# sequences, unassigned and private-use code points, the special token.
POOLS = [
    " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2005\u200a\u2028\u2029\u202f"
    "\u205f\u3000\u180e\u200b\ufeff",
    "abcdefghijklmnopqrstuvwxyzABCXYZ'sStTreRvemlld",
    "0123456789\u0660\u0661\u0662\u0969\u096a\u00bd\u00be\u216b\u216f\u2460\u2473\U0001d7d8",
    "!?.,;:-_()[]{}<>|@#$%^&*+=~`\"'/\\",
    "\u00e9\u00e8\u00ea\u00eb\u00f1\u00e7\u00df\u00f8\u00e5\u00e6\u0153\u0301\u0303\u0308"
    "\u20dd\u064b",
    "\u03b1\u03b2\u03b3\u03b4\u03a9\u0416\u0436\u0449\u0401\u0451\u042f",
    "\u6771\u4eac\u65e5\u672c\u8a9e\u4e2d\u6587\ud55c\uad6d\uc5b4\u30c6\u30ad\u30b9\u30c8",
    "\U0001f600\U0001f44d\U0001f3ff\U0001f3f3\ufe0f\u200d\U0001f308\U0001f469\u200d\U0001f4bb"
    "\U0001f1ef\U0001f1f5",
    "\u0378\u0379\U000e0001\U0010fffd\ue000\U0001fbf0\U00016fe4\u08c8",
    EOT, "\r\n", "   ", "'", "ll", "ve",
]


def random_text(rnd):
    parts = []
    for _ in range(rnd.randint(0, 40)):
        pool = rnd.choice(POOLS)
        parts.append(rnd.choice(pool) if rnd.random() < 0.8 else pool)
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("files", nargs="*")
    ap.add_argument("--random", type=int, default=20000, help="random texts (default 20000)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_intermixed_args()
    hf = Tokenizer.from_file(os.path.join(a.dir, "tokenizer.json"))
    with open(os.path.join(a.dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(a.dir, "merges.txt"),
                                            os.path.join(a.dir, "vocab.json"))
    special = {EOT: vocab[EOT]} if EOT in vocab else {}
    tk = tiktoken.Encoding("compare", pat_str=PATTERN, mergeable_ranks=ranks,
                           special_tokens=special)
    ours = [rg.Tokenizer(a.dir), rg.Tokenizer(os.path.join(a.dir, "tokenizer.json"))]

    rnd = random.Random(a.seed)
    texts = ((f"random #{i}", random_text(rnd)) for i in range(a.random))
    files = []
    for p in a.files:
        with open(p, encoding="utf-8", errors="replace") as f:
            files.append((p, f.read()))
    n = bad = ids = 0
    for name, text in list(texts) + files:
        want = hf.encode(text).ids
        got = [tk.encode(text, allowed_special="all")] + [t.encode(text) for t in ours]
        n += 1
        ids += len(want)
        if any(g != want for g in got) or ours[0].decode(got[1]) != text:
            bad += 1
            if bad <= 5:
                print(f"DIFF {name}: {text[:80]!r}\n tokenizers {want[:40]}\n"
                      f" tiktoken   {got[0][:40]}\n resgrad    {got[1][:40]}\n"
                      f" resgrad (tokenizer.json) {got[2][:40]}")
    print(f"{a.dir}: {n} texts, {ids} ids, {bad} differ (Unicode {ours[0].unicode_version})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
