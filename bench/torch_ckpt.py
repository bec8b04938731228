#!/usr/bin/env python3
"""torch_ckpt.py - a resgrad-train checkpoint, opened by Python's safetensors package and
loaded by name into the PyTorch GPT of the reference workloads (torch_ref.py, given
with --torch-ref), gives the loss that
resgrad computes from the same file on the same batch.

usage: python3 bench/torch_ckpt.py --torch-ref PATH --ckpt FILE [--gpt-loss BIN]
           [--device cpu|cuda] [--tol 1e-4]

The file's "resgrad-train.config" metadata gives the model's shape. resgrad's loss comes
from examples/gpt_loss.c (BIN, default build/gpt_loss), which builds the same batch from
the same formula. PyTorch runs in full f32 (TF32 off). Names map as follows (resgrad's
names are GPT-2's; torch_ref.py's are its own; its head is tied to wte as ours is):

    wte.weight, wpe.weight       -> wte.weight, wpe.weight (and head.weight = wte.weight)
    h.{i}.ln_1 / ln_2            -> blocks.{i}.ln1 / ln2
    h.{i}.attn.c_attn / c_proj   -> blocks.{i}.qkv / proj
    h.{i}.mlp.c_fc / c_proj      -> blocks.{i}.fc / fc2
    ln_f                         -> lnf
Weights are [out, in] on both sides, so nothing is transposed. Tensors whose names start
with "optim." (AdamW's moments) are not the model's and are skipped.

Prints one JSON line; exit 0 when |loss_torch - loss_resgrad| <= tol * max(1, |loss|).
"""
import argparse, importlib.util, json, re, subprocess, sys

import torch, torch.nn.functional as F
from safetensors import safe_open

RENAME = [(r"^h\.(\d+)\.ln_1\.", r"blocks.\1.ln1."), (r"^h\.(\d+)\.ln_2\.", r"blocks.\1.ln2."),
          (r"^h\.(\d+)\.attn\.c_attn\.", r"blocks.\1.qkv."),
          (r"^h\.(\d+)\.attn\.c_proj\.", r"blocks.\1.proj."),
          (r"^h\.(\d+)\.mlp\.c_fc\.", r"blocks.\1.fc."),
          (r"^h\.(\d+)\.mlp\.c_proj\.", r"blocks.\1.fc2."), (r"^ln_f\.", "lnf.")]


def torch_name(name):
    for pat, rep in RENAME:
        name, n = re.subn(pat, rep, name)
        if n:
            break
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch-ref", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--gpt-loss", default="build/gpt_loss")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    spec = importlib.util.spec_from_file_location("torch_ref", a.torch_ref)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)

    with safe_open(a.ckpt, framework="pt") as f:
        meta = f.metadata()
        cfg = dict(kv.split("=") for kv in meta["resgrad-train.config"].split())
        L, C, H, V, T = (int(cfg[k]) for k in ("layers", "width", "heads", "vocab", "block"))
        state = {torch_name(k): f.get_tensor(k) for k in f.keys() if not k.startswith("optim.")}
    state["head.weight"] = state["wte.weight"]
    model = ref.GPT(V, T, L, C, H)
    model.load_state_dict(state, strict=True)  # every name present, every shape right
    model = model.to(a.device).eval()

    b = torch.arange(4).view(4, 1)
    t = torch.arange(T).view(1, T)
    idx = (131 * b + 31 * t + (b * t) % 7) % V
    tgt = (7 * idx + 3) % V
    with torch.no_grad():
        out = model(idx.to(a.device))
        lt = F.cross_entropy(out.view(-1, V).float(), tgt.view(-1).to(a.device)).item()

    p = subprocess.run([a.gpt_loss, "--device", a.device, str(L), str(C), str(H), str(V),
                        str(T), a.ckpt], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("torch_ckpt: %s failed: %s" % (a.gpt_loss, p.stderr.strip()))
    ours = json.loads(p.stdout)
    diff = abs(lt - ours["loss"])
    ok = diff <= a.tol * max(1.0, abs(lt))
    print(json.dumps(dict(ckpt=a.ckpt, config=meta["resgrad-train.config"], tensors=len(state) - 1,
                          loss_torch=lt, loss_resgrad=ours["loss"], resgrad_device=ours["device"],
                          abs_diff=diff, tol=a.tol, ok=ok)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
