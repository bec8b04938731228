#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_api (tests/fuzz/corpus/api/).

An input of fuzz_api is a 16-byte header (rg_open's options) followed by 16-byte records,
one call each: byte 0 names the call family (the OP_* enum of fuzz_api.c, which this
script reads, so the two cannot drift apart), bytes 1..15 are its arguments. Each seed
here sets up a few values (a training step, inputs, parameters, the sentinel, an
optimizer) and then calls one family several times with arguments from a seeded
generator, so every family starts out reachable; a few "story" seeds combine families
the way a program does (train / save / load, stale handles, budgets, check modes,
injected allocation failures). The output is deterministic.

The corpus also holds found-* files: inputs libFuzzer found, chosen greedily for the
coverage they add to these seeds (about 40 of them, a few hundred more edges); this
script leaves them alone.

    python3 tests/fuzz/gen_corpus_api.py            # rewrites tests/fuzz/corpus/api/
"""
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "fuzz_api.c")
OUT = os.path.join(HERE, "corpus", "api")


def ops():
    text = open(SRC).read()
    body = re.search(r"enum \{\n((?:  OP_\w+,\n)+)  OP_COUNT\n\};", text)
    if not body:
        sys.exit("gen_corpus_api.py: the OP_ enum of fuzz_api.c was not found")
    return [n.strip().rstrip(",") for n in body.group(1).splitlines()]


OPS = ops()
OP = {name: i for i, name in enumerate(OPS)}


def header(check=0, check_finite=0, threads2=0, inject=0, eval_mode=0, pass_b=20,
           pers_b=20, max_queued=0, seed=1, inject_at=0, free_mask=0xff, bf16=0):
    """pass_b / pers_b: budget selectors (<16: 256 B << b%8; else 64 KB << b%7, so 20 is
    4 MB); max_queued: 0 = default, else the guard's limit (1..56)."""
    flags = check | check_finite << 1 | threads2 << 3 | inject << 4 | eval_mode << 5 | bf16 << 6
    mq = 0 if not max_queued else 199 + max_queued
    h = [flags, pass_b, pers_b, mq, seed & 255, seed >> 8 & 255, inject_at >> 8 & 255,
         inject_at & 255, free_mask]
    return bytes(h + [0] * (16 - len(h)))


def rec(name, args=None, rng=None):
    """One record: the family and 15 argument bytes (given ones first, then random)."""
    args = list(args or [])
    while len(args) < 15:
        args.append(rng.randrange(256) if rng else 0)
    return bytes([OP[name]] + args[:15])


def setup(rng):
    """A small model and some values to operate on."""
    r = b""
    r += rec("OP_OPTIM_NEW", [0, 1, 1, 1, 1, 1, 0, 0, 0, 0], rng)   # AdamW, defaults
    for _ in range(2):
        r += rec("OP_TRAIN_STEP", [1, 1, 1, 0, 0, 0, 0], rng)
    r += rec("OP_SENTINEL", [1, 3], rng)
    for _ in range(3):
        r += rec("OP_INPUT", [0], rng)
    r += rec("OP_PARAM", [0, 0], rng)
    return r


def family(name, n, seed, hdr=None):
    rng = random.Random(seed)
    data = (hdr or header(seed=seed)) + setup(rng)
    for _ in range(n):
        data += rec(name, None, rng)
    data += rec("OP_READ", None, rng) + rec("OP_STEP_BEGIN", None, rng)
    return data


def story(names, seed, hdr=None, reps=1):
    rng = random.Random(seed)
    data = (hdr or header(seed=seed)) + setup(rng)
    for _ in range(reps):
        for name in names:
            data += rec(name, None, rng)
    return data


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):  # found-* are inputs the fuzzer found (kept)
        if f.startswith(("family-", "story-")):
            os.remove(os.path.join(OUT, f))
    seeds = {}
    for i, name in enumerate(OPS):
        seeds["family-" + name[3:].lower()] = family(name, 10, 1000 + i)
    seeds["story-train"] = story(["OP_TRAIN_STEP", "OP_CLIP", "OP_OPTIM_STEP", "OP_ITEM",
                                  "OP_ZERO_GRAD", "OP_STEP_BEGIN"], 1, reps=6)
    seeds["story-ops-backward"] = story(["OP_BINARY", "OP_UNARY", "OP_REDUCE", "OP_MATMUL",
                                         "OP_BACKWARD", "OP_GRAD", "OP_READ"], 2, reps=5)
    seeds["story-stale"] = story(["OP_INPUT", "OP_UNARY", "OP_STEP_BEGIN", "OP_READ",
                                  "OP_WRITE", "OP_BINARY", "OP_QUERY", "OP_RESET"], 3, reps=4)
    seeds["story-forged"] = story(["OP_FORGE", "OP_UNARY", "OP_READ", "OP_BACKWARD",
                                   "OP_QUERY", "OP_WRITE", "OP_GRAD"], 4, reps=5)
    seeds["story-save-load"] = story(["OP_META", "OP_SAVE", "OP_TRAIN_STEP", "OP_LOAD",
                                      "OP_ROUNDTRIP", "OP_CORRUPT", "OP_LOAD"], 5, reps=4)
    seeds["story-labels-errors"] = story(["OP_LABEL", "OP_BINARY", "OP_RAISE", "OP_CLEAR",
                                          "OP_LABEL", "OP_SLICE"], 6, reps=5)
    seeds["story-reset-persistent"] = story(["OP_TRAIN_STEP", "OP_RESET", "OP_OPTIM_STEP",
                                             "OP_SENTINEL", "OP_OPTIM_NEW", "OP_PARAMS"], 7,
                                            reps=4)
    seeds["story-gradcheck"] = story(["OP_PARAM", "OP_GRADCHECK", "OP_SENTINEL"], 8, reps=4)
    seeds["story-nn-gpt"] = story(["OP_NN", "OP_NN", "OP_GPT", "OP_GPT", "OP_BACKWARD",
                                   "OP_SYNC"], 9, reps=5)
    seeds["story-check-mode"] = story(["OP_BINARY", "OP_EMBEDDING", "OP_XENT", "OP_READ"], 10,
                                      hdr=header(check=1, check_finite=1, seed=10), reps=6)
    seeds["story-small-budgets"] = story(["OP_INPUT", "OP_MATMUL", "OP_PARAM", "OP_OPTIM_NEW",
                                          "OP_CLIP", "OP_STEP_BEGIN"], 11,
                                         hdr=header(pass_b=3, pers_b=5, seed=11), reps=5)
    seeds["story-guard"] = story(["OP_UNARY", "OP_BINARY", "OP_EMBEDDING", "OP_UNARY"], 12,
                                 hdr=header(max_queued=2, seed=12), reps=6)
    seeds["story-alloc-fail"] = story(["OP_TRAIN_STEP", "OP_ALLOC_FAIL", "OP_BACKWARD",
                                       "OP_SAVE", "OP_LABEL", "OP_META"], 13,
                                      hdr=header(inject=1, inject_at=40, seed=13), reps=5)
    seeds["story-threads-eval"] = story(["OP_UNARY", "OP_MATMUL", "OP_ATTENTION",
                                         "OP_NORM", "OP_READ"], 14,
                                        hdr=header(threads2=1, eval_mode=1, seed=14), reps=5)
    seeds["story-bf16-train"] = story(["OP_TRAIN_STEP", "OP_NN", "OP_GPT", "OP_OPTIM_STEP",
                                       "OP_ZERO_GRAD", "OP_WRITE", "OP_EMBEDDING", "OP_XENT",
                                       "OP_STEP_BEGIN"], 16, hdr=header(bf16=1, seed=16),
                                      reps=5)
    seeds["story-bf16-ops"] = story(["OP_MATMUL", "OP_UNARY", "OP_BINARY", "OP_NORM",
                                     "OP_ATTENTION", "OP_BACKWARD", "OP_READ"], 17,
                                    hdr=header(bf16=1, check=1, seed=17), reps=5)
    seeds["story-null"] = story(["OP_NULL_CTX", "OP_STATS", "OP_MODE"], 15, reps=8)
    total = 0
    for name, data in sorted(seeds.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        total += len(data)
    print("gen_corpus_api.py: %d seeds, %d bytes in %s" % (len(seeds), total, OUT))


if __name__ == "__main__":
    main()
