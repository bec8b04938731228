#!/usr/bin/env python3
"""llmc_tokens.py - writes a token file in llm.c's format, for rg_data and resgrad-train.

The format: a header of 256 little-endian int32 (header[0] = 20240520, the magic;
header[1] = 1, the version; header[2] = the number of tokens; the rest 0), then the
tokens as little-endian uint16.

  llmc_tokens.py OUT --from FILE        every byte of FILE one token (vocabulary 256)
  llmc_tokens.py OUT --count N --vocab V
                                        token i = (i * 7919 + 13) mod V, the pattern
                                        tests/test_data.c checks
"""
import argparse
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--from", dest="src", help="a file whose bytes are the tokens")
    ap.add_argument("--count", type=int, help="tokens of the test pattern")
    ap.add_argument("--vocab", type=int, default=65536, help="the pattern's vocabulary")
    a = ap.parse_args()
    if (a.src is None) == (a.count is None):
        ap.error("give exactly one of --from FILE and --count N")
    if a.src is not None:
        with open(a.src, "rb") as f:
            tokens = list(f.read())
    else:
        if not 1 <= a.vocab <= 65536:
            ap.error("--vocab must be in [1, 65536]")
        tokens = [(i * 7919 + 13) % a.vocab for i in range(a.count)]
    if not 1 <= len(tokens) < 2**31:
        sys.exit("llmc_tokens.py: %d tokens; a file holds 1 to 2^31 - 1" % len(tokens))
    header = [MAGIC, VERSION, len(tokens)] + [0] * (HEADER_INTS - 3)
    with open(a.out, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


if __name__ == "__main__":
    main()
