"""resgrad: training neural networks with every value resident on the device.

Ops look eager but record; the first read (numpy(), item(), float()) is a barrier that
runs everything recorded as one graph. A training step is one upload, one graph and one
small download:

    import resgrad as rg
    with rg.Context() as ctx:
        w = ctx.param("w", (10, 784), init="normal", a=0.01)
        for x, y in batches:
            ctx.step_begin()
            loss = rg.cross_entropy(rg.linear(ctx.tensor(x), w), ctx.tensor(y))
            loss.backward()
            opt.step()
            print(float(loss))

Every op of the C library is a function here and, where its first argument is a tensor,
a Tensor method; see docs/python.md.
"""
import contextlib as _contextlib

from . import _resgrad
from ._helpers import dtype
from ._resgrad import (ALL_AXES, OP_TABLE, OPS, DeviceError, DrainFailedError, Error,
                       InputOutputError, NonFiniteError, OutOfMemoryError, Ring,
                       StaleHandleError, Tensor, Tokenizer, UnsupportedError, UsageError,
                       from_dlpack, version)

float32 = dtype.float32
bfloat16 = dtype.bfloat16
int32 = dtype.int32

for _name in OPS:
    globals()[_name] = getattr(_resgrad, _name)
del _name

__version__ = version()


class Context(_resgrad.Context):
    __doc__ = _resgrad.Context.__doc__

    @_contextlib.contextmanager
    def label(self, name):
        """Names the work recorded inside the with block (it appears in error messages)."""
        self.label_push(name)
        try:
            yield self
        finally:
            self.label_pop()

    def __repr__(self):
        return "<resgrad.Context closed>" if self.closed else \
            f"<resgrad.Context {self.device_name}>"


def save(ctx, path, optim=None):
    """ctx.save(path, optim): every parameter (and optim's state) as safetensors."""
    ctx.save(path, optim)


def load(ctx, path, optim=None):
    """ctx.load(path, optim): a checkpoint written by save."""
    ctx.load(path, optim)


from . import data, nn, optim, text  # noqa: E402  (they use the names above)
