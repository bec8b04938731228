"""Optimizers over every parameter of a context, updated on the device in one fused step.

    opt = resgrad.optim.AdamW(ctx, lr=3e-4, weight_decay=0.1)
    opt.set_schedule("cosine", lr=3e-4, warmup=100, total=5000, min_lr=3e-5)
    ...
    loss.backward(); resgrad.optim.clip_grad_norm(ctx, 1.0); opt.step(); opt.zero_grad()

The optimizer covers the parameters that exist when it is made (rg_optim_adamw): make the
model first. Learning rates and step counts live on the device, so a step replays as one
captured graph; reading opt.lr or opt.steps is a barrier.
"""
from . import _resgrad
from ._resgrad import Optimizer

__all__ = ["AdamW", "SGD", "Optimizer", "clip_grad_norm", "clip_grad_value"]


def _ctx(x):
    """A Context, or the context of a model (anything with a .ctx)."""
    return getattr(x, "ctx", x) if not isinstance(x, _resgrad.Context) else x


def AdamW(ctx, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    """AdamW (decoupled weight decay) over every parameter of ctx (or of model.ctx)."""
    return _resgrad.adamw(_ctx(ctx), lr, tuple(betas), eps, weight_decay)


def SGD(ctx, lr=1e-2, momentum=0.0, weight_decay=0.0):
    """SGD, with momentum when momentum > 0, over every parameter of ctx (or model.ctx)."""
    return _resgrad.sgd(_ctx(ctx), lr, momentum, weight_decay)


def clip_grad_norm(ctx, max_norm):
    """Records scaling every gradient so that their total L2 norm is at most max_norm.
    A non-finite norm makes the next step skip its update (rg_clip_grad_norm)."""
    _ctx(ctx).clip_grad_norm(max_norm)


def clip_grad_value(ctx, max_abs):
    """Records clamping every gradient element to [-max_abs, max_abs]."""
    _ctx(ctx).clip_grad_value(max_abs)
