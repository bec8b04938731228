#!/usr/bin/env python3
"""Writes tests/data/hf_gpt2_tiny/: a tiny random GPT-2 made with Hugging Face's
transformers (model.safetensors and config.json, as save_pretrained writes them) and
expected.safetensors, the model's logits for a fixed batch of tokens.

The files are committed, so the tests (tests/test_hf.c, test_cuda.c, python/tests/
test_hf.py) need neither transformers nor torch; run this again only to remake them:

    python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch transformers \\
        safetensors numpy
    /tmp/hfenv/bin/python tools/hf_gpt2_fixture.py [OUT_DIR]

expected.safetensors also holds greedy_0 and greedy_1, I32 [8]: transformers' greedy
continuation (generate, do_sample=False, float64) of the prompts GREEDY_PROMPTS, which
tests/test_generate_cli.c and python/tests/test_generate.py compare with resgrad's.
With --add-greedy DIR it computes only those for the model already in DIR and rewrites
DIR/expected.safetensors with them added (the rest unchanged).

With --check DIR it instead loads DIR (a folder rg_gpt_save_hf wrote: model.safetensors
and config.json) with GPT2LMHeadModel.from_pretrained and prints the largest difference
of its logits from the fixture's expected ones (0 for the fixture exported unchanged).

Every parameter is drawn at random (seeded) rather than left at GPT-2's initialisation,
so biases and layer norms are not zeros and ones and a mistake in any of them shows in
the logits. The logits are computed in float64 from the float32 weights that the file
holds, then rounded once to float32.
"""
import os
import sys

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB, BLOCK, LAYERS, WIDTH, HEADS = 50, 16, 2, 24, 3
BATCH = 2
GREEDY_PROMPTS, GREEDY_NEW = [[3, 14, 15, 9, 26], [7, 1]], 8


def greedy(model):
    """{greedy_i: int32 [GREEDY_NEW]}: model's greedy continuation of each prompt."""
    out = {}
    model = model.double().eval()
    for i, p in enumerate(GREEDY_PROMPTS):
        ids = torch.tensor([p])
        with torch.no_grad():
            y = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=GREEDY_NEW, min_new_tokens=GREEDY_NEW,
                               pad_token_id=0)
        out[f"greedy_{i}"] = y[0, len(p):].to(torch.int32).numpy()
    return out


def add_greedy(folder):
    path = os.path.join(folder, "expected.safetensors")
    exp = {k: v for k, v in load_file(path).items() if not k.startswith("greedy_")}
    exp.update(greedy(GPT2LMHeadModel.from_pretrained(folder)))
    save_file(exp, path, metadata={"format": "np"})
    print(f"{path}: " + ", ".join(f"{k} {v.tolist()}" for k, v in exp.items()
                                   if k.startswith("greedy_")))
    return 0


def check(folder, expected):
    model = GPT2LMHeadModel.from_pretrained(folder).eval().double()
    exp = load_file(expected)
    with torch.no_grad():
        logits = model(torch.from_numpy(exp["tokens"]).long()).logits.to(torch.float32)
    err = float(np.abs(logits.numpy() - exp["logits"]).max())
    print(f"{folder}: max |logit - expected| {err:.3g}")
    return 0 if err <= 1e-4 else 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "data",
                                                              "hf_gpt2_tiny")
    if len(sys.argv) == 3 and sys.argv[1] == "--add-greedy":
        return add_greedy(sys.argv[2])
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        return check(sys.argv[2], os.path.join(here, "..", "tests", "data", "hf_gpt2_tiny",
                                               "expected.safetensors"))
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=BLOCK, n_embd=WIDTH, n_layer=LAYERS,
                     n_head=HEADS, activation_function="gelu_new", resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                     tie_word_embeddings=True, bos_token_id=VOCAB - 1,
                     eos_token_id=VOCAB - 1)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                    name.endswith("ln_f.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    tokens = torch.randint(0, VOCAB, (BATCH, BLOCK), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = model.double()(tokens).logits
    save_file({"tokens": tokens.to(torch.int32).numpy(),
               "logits": logits.to(torch.float32).numpy(), **greedy(model)},
              os.path.join(out, "expected.safetensors"), metadata={"format": "np"})
    print(f"wrote {out}: logits {tuple(logits.shape)}, |max| {logits.abs().max().item():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
