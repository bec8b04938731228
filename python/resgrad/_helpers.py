"""Conversions between host data and resgrad's dtypes, used by the C extension.

NumPy has no bfloat16: bfloat16 values travel as their 16-bit patterns (rounded to nearest
even from float32, as the library rounds) and come back widened to float32.
"""
import enum

import numpy as np


class dtype(enum.IntEnum):
    """A tensor's element type; the values are the C library's rg_dtype."""

    float32 = 0
    bfloat16 = 1
    int32 = 2

    def __repr__(self):
        return f"resgrad.{self.name}"

    __str__ = __repr__


DTYPES = (dtype.float32, dtype.bfloat16, dtype.int32)
_NAMES = {"float32": 0, "f32": 0, "float": 0, "bfloat16": 1, "bf16": 1, "int32": 2,
          "i32": 2, "int": 2}


def dtype_code(d):
    """The rg_dtype value of d: a resgrad dtype, its name, or a NumPy float32/int32."""
    if isinstance(d, str):
        if d in _NAMES:
            return _NAMES[d]
    elif isinstance(d, int) and not isinstance(d, bool):
        if 0 <= d <= 2:
            return int(d)
    else:
        try:
            nd = np.dtype(d)
        except TypeError:
            nd = None
        if nd == np.float32:
            return 0
        if nd == np.int32:
            return 2
    raise ValueError(f"unknown dtype {d!r}: use resgrad.float32, resgrad.bfloat16 or "
                     "resgrad.int32")


def _to_bf16_bits(a):
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)


def as_array(x, want=None):
    """(array, rg_dtype): x as a C-contiguous array of the dtype wanted, or of the one its
    values imply (floats: float32; integers and booleans: int32)."""
    a = np.asarray(x)
    code = None if want is None else dtype_code(want)
    if code is None:
        if a.dtype.kind == "f":
            code = 0
        elif a.dtype.kind in "iub":
            code = 2
        else:
            raise TypeError(f"cannot make a tensor of {a.dtype} values; resgrad holds "
                            "float32, bfloat16 and int32")
    if code == 0:
        return np.ascontiguousarray(a, np.float32), 0
    if code == 1:
        return _to_bf16_bits(a), 1
    if a.dtype.kind in "iu" and a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise OverflowError("integer values outside int32's range")
    return np.ascontiguousarray(a, np.int32), 2


def empty(shape, code):
    """An uninitialised array to read a tensor of rg_dtype code into."""
    return np.empty(shape, np.int32 if code == 2 else np.float32)
