#!/usr/bin/env python3
"""compare.py - resgrad against PyTorch on the reference workloads, in one run.

Runs bench/workloads (resgrad) and torch_ref.py (PyTorch) on the same machine, one after
the other, and prints a table of step times and ratios (PyTorch time / resgrad time:
higher is better for resgrad). Every JSON line both programs print is kept in --log.

usage: python3 bench/compare.py --torch-ref PATH [--bin build-gpu/workloads]
           [--device cuda|cpu] [--threads N] [--workloads mlp-small,gpt-char]
           [--modes f32,tf32,bf16] [--steps 50] [--rounds 1] [--log FILE] [--tune]
           [--python PY]

Workloads: the named ones, or any shape as both programs take it: mlp=784x256x256x10/b64
(layer widths, then the batch) and gpt=96x128x4x256x4/b32 (vocabulary, block, layers,
width, heads, then the batch); each program names its rows by that string.

Modes: resgrad f32 is compared with PyTorch eager-fp32; resgrad tf32 with eager-tf32 and
compile-ro (torch.compile reduce-overhead, which runs TF32 as well); resgrad bf16 with
eager-bf16 and compile-ro-bf16 (torch.autocast to bfloat16, TF32 for the rest).

--device cpu: both on the CPU (PyTorch with no GPU visible), f32 only unless --modes says
otherwise, both given --threads threads (RG_THREADS for resgrad, OMP_NUM_THREADS for
PyTorch; default: every core).
--python: the interpreter that has PyTorch (e.g. a virtual environment's bin/python).
--rounds N: both programs N times, taking turns (resgrad, PyTorch, resgrad, ...), for a
machine whose speed drifts (a shared virtual machine): each cell is then the median of the
N runs' medians with their range, and the ratio the median of the N rounds' ratios, each
from two runs made one after the other.
"""
import argparse, json, os, statistics, subprocess, sys

TORCH_MODES = {"f32": ["eager-fp32"], "tf32": ["eager-tf32", "compile-ro"],
               "bf16": ["eager-bf16", "compile-ro-bf16"]}


def run(cmd, log, env=None):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    rows = []
    for line in p.stdout.splitlines():
        log.write(line + "\n")
        if line.startswith("{"):
            rows.append(json.loads(line))
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
    return rows


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch-ref", required=True)
    ap.add_argument("--bin", default="build-gpu/workloads")
    ap.add_argument("--workloads", default="mlp-small,gpt-char")
    ap.add_argument("--modes", default=None, help="default f32,tf32 (cuda), f32 (cpu)")
    ap.add_argument("--steps", default="50")
    ap.add_argument("--log", default="compare.jsonl")
    ap.add_argument("--tune", action="store_true", help="run workloads --tune (gemm_tune)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="CPU threads of both (--device cpu)")
    ap.add_argument("--python", default=sys.executable, help="the Python that has PyTorch")
    ap.add_argument("--rounds", type=int, default=1, help="runs of both, taking turns")
    a = ap.parse_args()
    cpu = a.device == "cpu"
    if a.modes is None:
        a.modes = "f32" if cpu else "f32,tf32"
    works, modes = a.workloads.split(","), a.modes.split(",")
    env = dict(os.environ)
    if cpu:
        env.update(RG_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
                   CUDA_VISIBLE_DEVICES="")
        print("machine: %d cores, %s; threads %d; load %.2f %.2f %.2f" % (
            (os.cpu_count(), cpu_name(), a.threads) + os.getloadavg()), flush=True)
    ours, theirs = [], []  # per round: (work, mode) -> ms_median
    plan = ["%s:%s" % (w, ",".join(t for m in modes for t in TORCH_MODES[m])) for w in works]
    with open(a.log, "w") as log:
        for _ in range(max(1, a.rounds)):
            ours.append({})
            for m in modes:
                for r in run([a.bin, "--device", a.device, "--mode", m, "--steps", a.steps,
                              "--warm", "10"] + ["--tune"] * a.tune + works, log, env):
                    ours[-1][(r["work"], r["mode"])] = r["ms_median"]
            theirs.append({})
            for r in run([a.python, a.torch_ref] + plan, log, env):
                if "work" in r and "ms_median" in r:
                    theirs[-1][(r["work"], r["mode"])] = r["ms_median"]

    def cell(runs, key):  # the median over rounds, and the range when there are several
        v = [r[key] for r in runs if key in r]
        if not v:
            return "-"
        return "%.3f" % statistics.median(v) + (
            " (%.3f-%.3f)" % (min(v), max(v)) if len(v) > 1 else "")

    print("| workload | mode | resgrad ms | PyTorch mode | PyTorch ms | ratio |")
    print("|---|---|---|---|---|---|")
    for w in works:
        for m in modes:
            for t in TORCH_MODES[m]:
                ratios = [th[(w, t)] / ou[(w, m)] for ou, th in zip(ours, theirs)
                          if (w, m) in ou and (w, t) in th]
                ratio = "%.2fx" % statistics.median(ratios) if ratios else "-"
                print("| %s | %s | %s | %s | %s | %s |" % (
                    w, m, cell(ours, (w, m)), t, cell(theirs, (w, t)), ratio))


if __name__ == "__main__":
    main()
