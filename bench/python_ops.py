#!/usr/bin/env python3
"""python_ops.py - the host cost of recording one op from Python, next to C's.

Records `--ops` (default 1,000,000) one-element adds on a CPU context, chained (acc =
acc + one, so the drain computes something checkable), in batches of 10,000 per step as
bench/op_overhead.c does, three ways: the operator (`acc + one`), the function
(`rg.add(acc, one)`) and the method (`acc.add(one)`). Only the recording loops are timed;
each batch's result is read back and must equal the batch size. With --c-bin it also runs
bench/op_overhead (the C API's figure) with the same op count.

usage:  PYTHONPATH=build/python python3 bench/python_ops.py [--ops N] [--c-bin build/op_overhead]
output: one JSON line per way, e.g. {"bench":"python_ops","way":"operator","ns_per_op":...}
"""
import argparse
import json
import subprocess
import sys
import time

import numpy as np

import resgrad as rg

BATCH = 10_000


def run(ctx, way, ops):
    one = ctx.constant(np.ones(1, np.float32))
    zero = np.zeros(1, np.float32)
    record = 0.0
    for b in range(ops // BATCH + 1):  # batch 0 warms up, untimed
        ctx.step_begin()
        acc = ctx.tensor(zero)
        t = time.perf_counter_ns()
        if way == "operator":
            for _ in range(BATCH):
                acc = acc + one
        elif way == "function":
            add = rg.add
            for _ in range(BATCH):
                acc = add(acc, one)
        else:
            for _ in range(BATCH):
                acc = acc.add(one)
        if b:
            record += time.perf_counter_ns() - t
        if acc.item() != BATCH:
            sys.exit(f"python_ops: {way}: the batch computed {acc.item()}, not {BATCH}")
    return record / (ops // BATCH * BATCH)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--c-bin", help="bench/op_overhead of the same build, for C's figure")
    a = ap.parse_args()
    with rg.Context("cpu", threads=1, quiet=True) as ctx:
        for way in ("operator", "function", "method"):
            ns = run(ctx, way, a.ops)
            print(json.dumps({"bench": "python_ops", "way": way, "ns_per_op": round(ns, 1),
                              "ops": a.ops // BATCH * BATCH, "python": sys.version.split()[0]}),
                  flush=True)
    if a.c_bin:
        out = subprocess.run([a.c_bin, str(a.ops)], capture_output=True, text=True, check=True)
        print(out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
