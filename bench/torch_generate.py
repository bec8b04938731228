#!/usr/bin/env python3
"""PyTorch's side of bench/generate.c: greedy generation with a KV cache at a GPT's
shape, random weights, the same JSON line per batch size.

    python3 bench/torch_generate.py [--device cuda|cpu] [--mode f32|tf32]
        [--gpt V,T,L,C,H] [--batch 1,16] [--prompt 64] [--new 128] [--reps 5] [--warm 2]
        [--impl eager,compile,transformers]

The model is GPT-2's computation written here (the structure of resgrad's rg_gpt: tied
head, pre-norm blocks, GELU's tanh form), F32 parameters. One call: the prompt in one
pass (prefill) fills a cache K, V [B, H, prompt + new - 1, D] per layer, then one decode
step per new token; each step takes the argmax and copies the batch's ids to the host,
as rg_gpt_generate reads them every step. Implementations:
  eager         each step in eager mode, attention by F.scaled_dot_product_attention over
                the filled prefix of the cache
  compile       the decode step through torch.compile(mode="reduce-overhead", fullgraph):
                a static shape (attention over the whole cache, masked past the
                position) replayed as a CUDA graph; the prefill stays eager
  transformers  GPT2LMHeadModel.generate (greedy, max_new_tokens = min_new_tokens = new),
                when the transformers package is installed (skipped otherwise)
ms_per_step = (a call of --new tokens - a call of 1) / (new - 1), as generate.c.

--weights DIR loads a Hugging Face GPT-2 folder's model.safetensors instead (with
--tokens "1,2,3;4,5" and --double: prints the greedy continuation of each prompt, the
reference tests/data/hf_gpt2_tiny's expected greedy ids come from).
"""
import argparse
import json
import math
import os
import re
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attend(self, x, kc, vc, pos, mask):
        """x [B, T, C] at positions pos.. pos + T - 1; kc, vc [B, H, S, D] the cache.
        pos an int (eager: attention over the prefix) or a tensor [1] (static shape:
        the whole cache, mask [1, 1, T, S])."""
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if mask is None:
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            a = F.scaled_dot_product_attention(q, kc[:, :, :pos + T], vc[:, :, :pos + T],
                                               is_causal=T > 1)
        else:
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
            a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
        x = x + self.attn_proj(a.transpose(1, 2).reshape(B, T, C))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp_proj(h)


class GPT(nn.Module):
    def __init__(self, V, T, L, C, H):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for n, p in self.named_parameters():  # GPT-2's initialisation
            if n.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        self.H = H

    def new_cache(self, B, S):
        """K, V [B, H, S, D] of every layer, as buffers (static addresses for a CUDA
        graph), made again only when the shape changes."""
        C, H, p = self.wte.weight.shape[1], self.H, self.wte.weight
        shape = (B, H, S, C // H)
        if getattr(self, "kv", None) and tuple(self.kv[0][0].shape) == shape and \
                self.kv[0][0].dtype == p.dtype:
            return
        for i in range(len(self.h)):
            for kind in "kv":
                self.register_buffer(f"{kind}{i}", torch.zeros(shape, dtype=p.dtype,
                                                              device=p.device))
        self.kv = [(getattr(self, f"k{i}"), getattr(self, f"v{i}")) for i in range(len(self.h))]

    def logits(self, idx, pos, mask=None, last=True):
        """The logits of idx [B, T] fed at pos (of its last position only, if last)."""
        T = idx.shape[1]
        where = pos + torch.arange(T, device=idx.device) if mask is not None else \
            torch.arange(pos, pos + T, device=idx.device)
        x = self.wte(idx) + self.wpe(where)
        for blk, (kc, vc) in zip(self.h, self.kv):
            x = blk.attend(x, kc, vc, pos, mask)
        return self.ln_f(x[:, -1] if last else x) @ self.wte.weight.t()

    def step(self, idx, pos, mask=None):
        """The next ids (argmax of the last position's logits) of idx [B, T] fed at pos."""
        return self.logits(idx, pos, mask).argmax(-1)


@torch.no_grad()
def generate(model, prompts, new, compiled=None, S=None):
    """Greedy: prompts [B, P] -> the new ids [B, new] on the host. The cache holds S
    positions (default P + new - 1; a larger one serves calls of any new up to it)."""
    B, P = prompts.shape
    S = S or P + new - 1
    model.new_cache(B, S)
    nxt = model.step(prompts, 0)
    out = [nxt.cpu()]
    ar = torch.arange(S, device=prompts.device)
    for q in range(P, P + new - 1):
        if compiled is None:
            nxt = model.step(nxt[:, None], q)
        else:
            pos = torch.tensor([q], device=prompts.device)
            nxt = compiled(nxt[:, None], pos, (ar <= pos).view(1, 1, 1, S)).clone()
        out.append(nxt.cpu())
    return torch.stack(out, 1)


def hf_generate(hf, prompts, new):
    with torch.no_grad():
        y = hf.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                        max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                        use_cache=True)
    return y[:, prompts.shape[1]:].cpu()


def timed(fn, reps, warm, sync):
    ts = []
    for i in range(warm + reps):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        if i >= warm:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts), out


def read_safetensors(path, ints=None):
    """{name: numpy array} of a safetensors file (F32, F16, BF16 widened to F32; I32
    as ints)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[b:e]
        if t["dtype"] == "I32":
            out[name] = np.frombuffer(raw, np.int32).astype(ints).reshape(t["shape"])
            continue
        if t["dtype"] == "BF16":
            a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, {"F32": np.float32, "F16": np.float16}[t["dtype"]])
        out[name] = a.astype(np.float32).reshape(t["shape"])
    return out


def load_hf(folder):
    """A GPT with the weights of a Hugging Face GPT-2 folder (model.safetensors and
    config.json): Conv1D's [in, out] projections transposed to nn.Linear's layout."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    w = {k.removeprefix("transformer."): v
         for k, v in read_safetensors(os.path.join(folder, "model.safetensors")).items()}
    m = GPT(cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"], cfg["n_embd"],
            cfg["n_head"])
    rename = {"attn.c_proj": "attn_proj", "mlp.c_proj": "mlp_proj", "attn.c_attn": "c_attn",
              "mlp.c_fc": "c_fc"}
    state = {}
    for k, v in w.items():
        if re.fullmatch(r"h\.\d+\.attn\.(masked_)?bias", k) or k == "lm_head.weight":
            continue  # the causal mask's buffers; the tied head
        for a, b in rename.items():
            if f".{a}." in k:
                k = k.replace(a, b)
                v = v.T if k.endswith("weight") else v
        state[k] = torch.from_numpy(np.ascontiguousarray(v))
    m.load_state_dict(state)
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--mode", default="f32", choices=["f32", "tf32"])
    ap.add_argument("--gpt", default="50257,1024,12,768,12")
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--impl", default=None,
                    help="eager,compile,transformers (default: all three on CUDA, eager on "
                         "the CPU)")
    ap.add_argument("--weights", help="a Hugging Face GPT-2 folder instead of random weights")
    ap.add_argument("--tokens", help="with --weights: prompts '1,2,3;4,5' to continue")
    ap.add_argument("--double", action="store_true", help="compute in float64")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = a.mode == "tf32"
    torch.backends.cudnn.allow_tf32 = a.mode == "tf32"
    torch.manual_seed(0)

    if a.weights:
        m = load_hf(a.weights).to(dev).eval()
        if a.double:
            m = m.double()
        rows, err = [], None
        expected = os.path.join(a.weights, "expected.safetensors")
        if os.path.exists(expected):  # the fixture's logits, which transformers computed
            e = read_safetensors(expected, np.int32)
            idx = torch.from_numpy(e["tokens"].astype(np.int64)).to(dev)
            m.new_cache(*idx.shape)
            with torch.no_grad():
                got = m.logits(idx, 0, last=False).float().cpu().numpy()
            err = float(np.abs(got - e["logits"]).max())
        for p in (a.tokens or "0").split(";"):
            ids = torch.tensor([[int(t) for t in p.split(",")]], device=dev)
            rows.append(generate(m, ids, a.new)[0].tolist())
        print(json.dumps({"weights": a.weights, "new": a.new, "greedy": rows,
                          "max_logit_error_vs_expected": err}))
        return 0

    V, T, L, C, H = (int(x) for x in a.gpt.split(","))
    impls = (a.impl or ("eager,compile,transformers" if dev.type == "cuda" else "eager"))
    model = GPT(V, T, L, C, H).to(dev).eval()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for B in (int(b) for b in a.batch.split(",")):
        g = torch.Generator().manual_seed(12345)
        prompts = torch.randint(0, V, (B, a.prompt), generator=g).to(dev)
        S = a.prompt + a.new - 1
        for impl in impls.split(","):
            if impl == "transformers":
                try:
                    from transformers import GPT2Config, GPT2LMHeadModel
                except ImportError:
                    print(f"torch_generate: transformers is not installed: {impl} skipped",
                          file=sys.stderr)
                    continue
                hf = GPT2LMHeadModel(GPT2Config(
                    vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H,
                    activation_function="gelu_new", resid_pdrop=0, embd_pdrop=0,
                    attn_pdrop=0, bos_token_id=V - 1, eos_token_id=V - 1)).to(dev).eval()
                run = lambda n: hf_generate(hf, prompts, n)  # noqa: E731
            elif impl == "compile":
                step = torch.compile(model.step, mode="reduce-overhead", fullgraph=True)
                run = lambda n: generate(model, prompts, n, step, S)  # noqa: E731
            elif impl == "eager":
                run = lambda n: generate(model, prompts, n, None, S)  # noqa: E731
            else:
                ap.error(f"unknown --impl {impl}")
            med, mn, out = timed(lambda: run(a.new), a.reps, a.warm, sync)
            med1, _, _ = timed(lambda: run(1), a.reps, a.warm, sync)
            print(json.dumps({
                "bench": "generate", "impl": f"torch-{impl}" if impl != "transformers"
                else "transformers", "dev": torch.cuda.get_device_name(dev)
                if dev.type == "cuda" else "cpu", "mode": a.mode, "torch": torch.__version__,
                "gpt": f"{V}x{T}x{L}x{C}x{H}", "batch": B, "prompt": a.prompt, "new": a.new,
                "ms_median": round(1e3 * med, 3), "ms_min": round(1e3 * mn, 3),
                "tokens_per_s": round(B * a.new / med, 1),
                "ms_per_step": round(1e3 * (med - med1) / (a.new - 1), 4),
                "first_ids": out[0, :3].tolist()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
