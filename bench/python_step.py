#!/usr/bin/env python3
"""python_step.py - the reference training steps written in Python, next to C and PyTorch.

Runs mlp-small (784-256-256-10, batch 64) and gpt-char (V 96, T 128, L 4, C 256, H 4,
batch 32) - or any shape, named as workloads.c and torch_ref.py name them
(mlp=784x256x10/b64, gpt=96x128x4x256x4/b32) - exactly as bench/workloads.c does - the same data, the batch resident on the
device, fused linear+ReLU, AdamW (lr 1e-3, weight decay 0.01), one float(loss) per step -
but recorded from Python, and prints one JSON line per workload and mode in workloads'
format (ms_median over --steps after --warm). With --c-bin it runs bench/workloads on the
same workloads and modes, with --torch-ref torch_ref.py PyTorch eager and
torch.compile(mode="reduce-overhead") in the same precision, and then prints a table.

usage:  PYTHONPATH=build/python python3 bench/python_step.py [--device cuda] [--modes f32,tf32]
            [--workloads mlp-small,gpt-char,mlp=784x256x10/b64,...]
            [--steps 50] [--warm 10] [--c-bin build/workloads] [--torch-ref torch_ref.py]
"""
import argparse
import json
import subprocess
import sys
import time

import numpy as np

import resgrad as rg

WORK = {"mlp-small": dict(dims=(784, 256, 256, 10), B=64),
        "gpt-char": dict(V=96, T=128, L=4, C=256, H=4, B=32)}
TORCH_MODES = {"f32": ["eager-fp32"], "tf32": ["eager-tf32", "compile-ro"],
               "bf16": ["eager-bf16", "compile-ro-bf16"]}
M64 = (1 << 64) - 1


def workload(name):
    """A named workload, or a shape as workloads.c and torch_ref.py take it:
    mlp=784x256x10/b64 or gpt=96x128x4x256x4/b32."""
    if name in WORK:
        return WORK[name]
    kind, _, rest = name.partition("=")
    dims, _, batch = rest.partition("/b")
    try:
        d, b = [int(v) for v in dims.split("x")], int(batch)
    except ValueError:
        d, b = [], 0
    if kind == "mlp" and len(d) >= 2 and b > 0:
        return dict(dims=tuple(d), B=b)
    if kind == "gpt" and len(d) == 5 and b > 0:
        return dict(V=d[0], T=d[1], L=d[2], C=d[3], H=d[4], B=b)
    sys.exit(f"python_step: unknown workload {name!r}: one of {', '.join(WORK)}, "
             "mlp=AxB.../bN or gpt=VxTxLxCxH/bN")


def lcg_data(w):
    """bench/workloads.c's batch, value for value (its 64-bit LCG)."""
    r = 12345
    if "dims" in w:
        n = w["B"] * w["dims"][0]
        x = np.empty(n, np.float32)
        for i in range(n):
            r = (r * 6364136223846793005 + 1442695040888963407) & M64
            x[i] = np.float32((r >> 11) / 9007199254740992.0 * 2 - 1)
        y = np.empty(w["B"], np.int32)
        for i in range(w["B"]):
            y[i] = (r >> 33) % w["dims"][-1]
            r = (r * 6364136223846793005 + 1) & M64
        return x.reshape(w["B"], -1), y
    n = w["B"] * w["T"]
    xi, y = np.empty(n, np.int32), np.empty(n, np.int32)
    for i in range(n):
        r = (r * 6364136223846793005 + 1442695040888963407) & M64
        xi[i] = (r >> 33) % w["V"]
        y[i] = (r >> 13) % w["V"]
    return xi.reshape(w["B"], w["T"]), y.reshape(w["B"], w["T"])


def run(name, device, mode, steps, warm):
    w = workload(name)
    with rg.Context(device, quiet=True, tf32=mode != "f32", bf16=mode == "bf16") as ctx:
        x, y = lcg_data(w)
        bx, by = ctx.constant(x), ctx.constant(y)
        if "dims" in w:
            d = w["dims"]
            layers = []
            for i in range(len(d) - 1):
                k = 1 / d[i] ** 0.5
                layers.append((ctx.param(f"ls.{i}.weight", (d[i + 1], d[i]), "uniform", -k, k),
                               ctx.param(f"ls.{i}.bias", (d[i + 1],), "uniform", -k, k)))
            last = len(layers) - 1

            def loss_of():
                h = bx
                for i, (wt, b) in enumerate(layers):
                    h = rg.linear_act(h, wt, b, "relu" if i < last else "none")
                return rg.cross_entropy(h, by)
        else:
            gpt = rg.nn.GPT(ctx, w["V"], w["T"], w["L"], w["C"], w["H"])

            def loss_of():
                return gpt.loss(bx, by)
        opt = rg.optim.AdamW(ctx, lr=1e-3, weight_decay=0.01)
        times, rec = [], []
        for i in range(warm + steps):
            t = time.perf_counter()
            ctx.step_begin()
            loss = loss_of()
            loss.backward()
            opt.step()
            opt.zero_grad()
            t1 = time.perf_counter()
            value = float(loss)
            if i >= warm:
                times.append(time.perf_counter() - t)
                rec.append(t1 - t)
        s = ctx.stats()
        return {"work": name, "mode": mode, "lang": "python", "dev": ctx.device_name,
                "ms_median": round(float(np.median(times)) * 1e3, 4),
                "ms_min": round(min(times) * 1e3, 4),
                "record_ms_median": round(float(np.median(rec)) * 1e3, 4),
                "graph_replays": s["graph_replays"], "steps": steps, "loss_last": value}


def rows_of(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        print(p.stderr, file=sys.stderr)
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workloads", default="mlp-small,gpt-char")
    ap.add_argument("--modes", default="f32,tf32")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warm", type=int, default=10)
    ap.add_argument("--c-bin")
    ap.add_argument("--torch-ref")
    a = ap.parse_args()
    works, modes = a.workloads.split(","), a.modes.split(",")
    py, c, torch = {}, {}, {}
    for m in modes:
        for wname in works:
            r = run(wname, a.device, m, a.steps, a.warm)
            print(json.dumps(r), flush=True)
            py[(wname, m)] = r
    if a.c_bin:
        for m in modes:
            for r in rows_of([a.c_bin, "--device", a.device, "--mode", m, "--steps",
                              str(a.steps), "--warm", str(a.warm)] + works):
                print(json.dumps(r), flush=True)
                c[(r["work"], r["mode"])] = r
    if a.torch_ref:
        plan = ["%s:%s" % (wn, ",".join(t for m in modes for t in TORCH_MODES[m]))
                for wn in works]
        for r in rows_of([sys.executable, a.torch_ref] + plan):
            print(json.dumps(r), flush=True)
            if "ms_median" in r:
                torch[(r["work"], r["mode"])] = r
    print("\n| workload | mode | Python ms | C ms | Python/C | PyTorch mode | PyTorch ms | "
          "PyTorch/Python |")
    print("|---|---|---|---|---|---|---|---|")
    for wname in works:
        for m in modes:
            p = py[(wname, m)]["ms_median"]
            cm = c.get((wname, m), {}).get("ms_median")
            for tm in TORCH_MODES[m] if a.torch_ref else [None]:
                t = torch.get((wname, tm), {}).get("ms_median")
                print(f"| {wname} | {m} | {p:.4f} | {cm if cm else '-'} | "
                      f"{p / cm:.3f} | " if cm else f"| {wname} | {m} | {p:.4f} | - | - | ",
                      end="")
                print(f"{tm or '-'} | {t if t else '-'} | {t / p:.2f} |" if t else
                      f"{tm or '-'} | - | - |")


if __name__ == "__main__":
    main()
