"""The examples run as a user runs them and do what their documentation says."""
import os
import re
import subprocess
import sys

import resgrad as rg
from conftest import DEVICE, open_ctx

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, script), "--device", DEVICE,
                           *args], capture_output=True, text=True, timeout=600)


def test_mlp_example_reaches_its_stated_accuracy():
    p = run("mlp.py")
    assert p.returncode == 0, p.stderr
    acc = float(re.search(r"held-out accuracy ([0-9.]+)", p.stdout).group(1))
    assert acc >= 0.95


def test_char_gpt_example_trains_samples_and_saves(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20)
    ckpt = tmp_path / "gpt.safetensors"
    p = run("char_gpt.py", "--text", str(text), "--steps", "20", "--batch", "4", "--block",
            "16", "--layers", "1", "--width", "16", "--heads", "2", "--sample", "30",
            "--save", str(ckpt))
    assert p.returncode == 0, p.stderr
    assert "loss" in p.stderr and len(p.stdout.strip()) >= 30
    with open_ctx() as ctx:  # the checkpoint opens in a model of the same shape
        rg.nn.GPT(ctx, vocab=len(set(text.read_text())), block=16, layers=1, width=16, heads=2)
        ctx.load(ckpt)


def test_char_gpt_example_refuses_a_short_text(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("tiny")
    p = run("char_gpt.py", "--text", str(text))
    assert p.returncode != 0 and "needs more than" in p.stderr
