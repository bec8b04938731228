"""Layers on resgrad's ops, named and initialised as the C library's (resgrad_nn.h).

A layer's parameters live in its context's persistent pool under names that checkpoints
use ("fc1.weight"); a layer made without a name gets one from its kind and a counter
("linear0"). Calling a layer records its ops and returns a pending tensor.
"""
import itertools
import math
import weakref

import numpy as np

from . import _resgrad
from ._resgrad import Tensor

__all__ = ["Module", "Linear", "Embedding", "LayerNorm", "RMSNorm", "MLP", "Sequential",
           "ReLU", "GELU", "Tanh", "Dropout", "GPT"]

_counters = weakref.WeakKeyDictionary()


def _name(ctx, kind, name):
    if name is not None:
        return name
    counts = _counters.setdefault(ctx, {})
    n = counts.get(kind, 0)
    counts[kind] = n + 1
    return f"{kind}{n}"


class Module:
    """A layer: a context, parameters and child layers as attributes, and forward()."""

    ctx = None

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    def named_parameters(self):
        """(name, Tensor) of every parameter of this layer and its children, in order."""
        seen = set()
        for value in self.__dict__.values():
            items = value if isinstance(value, (list, tuple)) else (value,)
            for v in items:
                if isinstance(v, Tensor) and v.pool == "persistent" and v.name:
                    if v.name not in seen:
                        seen.add(v.name)
                        yield v.name, v
                elif isinstance(v, Module):
                    for n, p in v.named_parameters():
                        if n not in seen:
                            seen.add(n)
                            yield n, p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def train(self, mode=True):
        self.ctx.train(mode)
        return self

    def eval(self):
        return self.train(False)


class Linear(Module):
    """y = x w^T + b with w [out, in] (PyTorch's layout). std None: PyTorch's default
    U(-1/sqrt(in), 1/sqrt(in)) for weight and bias; std > 0: N(0, std), bias zero."""

    def __init__(self, ctx, in_features, out_features, bias=True, name=None, std=None,
                 act=None):
        self.ctx, self.act = ctx, act
        name = _name(ctx, "linear", name)
        if std is None:
            k = 1 / math.sqrt(in_features)
            w_init, b_init = dict(init="uniform", a=-k, b=k), dict(init="uniform", a=-k, b=k)
        else:
            w_init, b_init = dict(init="normal", a=std), dict(init="zeros")
        self.weight = ctx.param(f"{name}.weight", (out_features, in_features), **w_init)
        self.bias = ctx.param(f"{name}.bias", (out_features,), **b_init) if bias else None

    def forward(self, x):
        if self.act:
            return _resgrad.linear_act(x, self.weight, self.bias, self.act)
        return _resgrad.linear(x, self.weight, self.bias)


class Embedding(Module):
    """Rows of a table [num, dim], N(0, std), by int32 index."""

    def __init__(self, ctx, num, dim, name=None, std=1.0):
        self.ctx = ctx
        name = _name(ctx, "embedding", name)
        self.weight = ctx.param(f"{name}.weight", (num, dim), init="normal", a=std)

    def forward(self, idx):
        return _resgrad.embedding(self.weight, idx)


class LayerNorm(Module):
    """Normalisation over the last axis with a weight (ones) and a bias (zeros)."""

    def __init__(self, ctx, dim, eps=1e-5, name=None):
        self.ctx, self.eps = ctx, eps
        name = _name(ctx, "layernorm", name)
        self.weight = ctx.param(f"{name}.weight", (dim,), init="ones")
        self.bias = ctx.param(f"{name}.bias", (dim,), init="zeros")

    def forward(self, x):
        return _resgrad.layernorm(x, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight (ones)."""

    def __init__(self, ctx, dim, eps=1e-5, name=None):
        self.ctx, self.eps = ctx, eps
        name = _name(ctx, "rmsnorm", name)
        self.weight = ctx.param(f"{name}.weight", (dim,), init="ones")

    def forward(self, x):
        return _resgrad.rmsnorm(x, self.weight, self.eps)


class Sequential(Module):
    """Layers applied in order."""

    def __init__(self, *layers):
        self.layers = list(layers)
        self.ctx = next((m.ctx for m in layers if getattr(m, "ctx", None)), None)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class _Function(Module):
    def __init__(self, fn):
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def ReLU():
    return _Function(_resgrad.relu)


def GELU():
    return _Function(_resgrad.gelu)


def Tanh():
    return _Function(_resgrad.tanh)


def Dropout(p):
    """Zeroes elements with probability p in training mode (identity in eval mode)."""
    return _Function(lambda x: _resgrad.dropout(x, p))


class MLP(Module):
    """Linear layers with an activation between them: sizes (784, 256, 10) makes two."""

    def __init__(self, ctx, sizes, act="relu", name=None, std=None):
        self.ctx = ctx
        name = _name(ctx, "mlp", name)
        n = len(sizes) - 1
        self.layers = [Linear(ctx, a, b, name=f"{name}.{i}", std=std,
                              act=act if i < n - 1 else None)
                       for i, (a, b) in enumerate(itertools.pairwise(sizes))]

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class GPT(Module):
    """GPT-2's architecture with a tied head, as the C library's rg_gpt (resgrad_nn.h):
    parameters named as GPT-2's state dict ("wte.weight", "h.0.attn.c_attn.weight", ...)
    after prefix. forward(idx int32 [B, T]) gives logits [B, T, vocab]; loss(idx, targets)
    the mean cross-entropy, computed in one fused node, or in row chunks of the head when
    the logits would exceed 2^26 elements (rg_gpt_loss). checkpoint=True makes each block
    an activation checkpoint region (Context.checkpoint), and each chunk of the head: less
    memory, the same gradients."""

    def __init__(self, ctx, vocab, block, layers, width, heads, dropout=0.0, prefix=None,
                 checkpoint=False):
        self.ctx = ctx
        self.prefix = prefix or ""
        self._gpt = _resgrad.GPT(ctx, vocab, block, layers, width, heads, dropout, prefix,
                                 checkpoint)

    @classmethod
    def from_hf(cls, ctx, path, heads=0, prefix=None):
        """A GPT made from a GPT-2 checkpoint in Hugging Face's safetensors layout
        (model.safetensors, e.g. transformers' save_pretrained), its sizes from the
        tensors; heads=0 reads n_head from the config.json beside it (rg_gpt_load_hf).
        Raises resgrad.IOError naming what is wrong for a file that is not a GPT-2."""
        self = cls.__new__(cls)
        self.ctx = ctx
        self.prefix = prefix or ""
        self._gpt = _resgrad.GPT.from_hf(ctx, path, heads, prefix)
        return self

    def save_hf(self, path):
        """Writes the model as Hugging Face's GPT-2 (path: model.safetensors, and the
        config.json beside it), which transformers' GPT2LMHeadModel.from_pretrained
        loads from that folder (rg_gpt_save_hf)."""
        self._gpt.save_hf(path)

    @property
    def config(self):
        return self._gpt.config

    @property
    def param_count(self):
        return self._gpt.param_count

    def named_parameters(self):
        return ((n, t) for n, t in self.ctx.params().items() if n.startswith(self.prefix))

    def forward(self, idx):
        return self._gpt.forward(idx)

    def loss(self, idx, targets, ignore_index=None):
        return self._gpt.loss(idx, targets, ignore_index)

    def generate(self, prompts, max_new, *, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 stop=None):
        """Continues each prompt (a list of token-id lists, of any lengths, or an int
        array [B, P]) by up to max_new tokens with a KV cache on the device
        (rg_gpt_generate, docs/generate.md); returns a list of B lists of new ids, each
        ending at stop (included) when it was drawn. temperature 0 is greedy; else the
        draw is from softmax(logits / temperature) cut to top_k tokens (0: all) and to
        the smallest set of probability top_p (1: all), a function of (seed, position,
        row). Raises resgrad.UsageError naming what is wrong (a prompt longer than the
        model's block, an id outside the vocabulary, ...); pass-pool tensors of the
        context become stale (each step begins with Context.step_begin)."""
        rows = [np.asarray(p, dtype=np.int64).ravel() for p in prompts]
        if not rows or any(r.size == 0 for r in rows):
            raise ValueError("generate: give at least one prompt of at least one token")
        lens = np.array([r.size for r in rows], dtype=np.int64)
        ids = np.zeros((len(rows), int(lens.max())), dtype=np.int32)
        for i, r in enumerate(rows):
            if r.min() < 0 or r.max() > np.iinfo(np.int32).max:
                raise ValueError(f"generate: prompt {i} holds an id outside [0, 2^31)")
            ids[i, :r.size] = r
        out = self._gpt.generate(ids, lens, ids.shape[0], ids.shape[1], int(max_new),
                                 float(temperature), int(top_k), float(top_p), int(seed),
                                 -1 if stop is None else int(stop))
        out = np.frombuffer(out, dtype=np.int32).reshape(ids.shape[0], int(max_new))
        return [[int(t) for t in row if t >= 0] for row in out]
