"""Fill values: check that a dtype can hold them, and encode them for the kernels."""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from dyntile.dtypes import moved_by_kernels

__all__ = ["fill_bits", "fill_key", "check_fill", "check_integral_exact", "kernel_fill_bits"]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def check_fill(fill, dtype: np.dtype, what: str = "fill") -> np.ndarray:
    """``fill`` as a 0-d array of ``dtype``; ``ValueError`` if the dtype cannot hold it.

    Integers and bools accept only integral values in range (no NaN, no 300 into
    uint8, no 0.5); floats accept any real number that does not overflow to inf
    (inf and NaN themselves are fine) and an integral one only when they hold it
    exactly (see :func:`check_integral_exact`); bool accepts 0, 1, True, False.
    """
    dtype = np.dtype(dtype)
    if isinstance(fill, np.ndarray) and fill.ndim == 0:
        fill = fill.item()
    if not isinstance(fill, (numbers.Number, np.generic)) or isinstance(fill, (str, bytes)):
        raise TypeError(f"{what} should be a number, but got {fill!r} of type {type(fill).__name__}")
    kind = dtype.kind
    if kind in "biu":
        if isinstance(fill, complex) or (isinstance(fill, np.generic) and np.iscomplexobj(fill)):
            raise ValueError(f"{what}={fill!r} cannot be stored in {dtype}: it is complex")
        f = float(fill) if not isinstance(fill, (int, np.integer)) else None
        if f is not None and (math.isnan(f) or math.isinf(f) or f != int(f)):
            raise ValueError(
                f"{what}={fill!r} cannot be stored in {dtype}: integer arrays need an integral fill"
            )
        v = int(fill)
        lo, hi = (0, 1) if kind == "b" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
        if not lo <= v <= hi:
            raise ValueError(f"{what}={fill!r} is out of range for {dtype} (accepted: {lo} to {hi})")
        return np.array(v, dtype=dtype)
    if kind in "fc":
        if kind == "f" and (isinstance(fill, complex) or np.iscomplexobj(fill)):
            raise ValueError(f"{what}={fill!r} cannot be stored in {dtype}: it is complex")

        def overflows() -> str:
            return f"{what}={_shown(fill)} overflows {dtype} (max {str(np.finfo(dtype).max)})"

        python = float if kind == "f" else complex
        try:  # longdouble (wider than Python's float) takes the value itself: float() would round it
            value = fill if dtype.itemsize > np.dtype(python).itemsize else python(fill)
            with np.errstate(over="ignore", invalid="ignore"):
                arr = np.array(value, dtype=dtype)
        except (OverflowError, ValueError):  # ValueError: a Python int past str()'s digit limit
            raise ValueError(overflows()) from None
        parts = (np.real(value), np.imag(value)), (arr.real, arr.imag)
        if any(np.isfinite(x) and not np.isfinite(y) for x, y in zip(*parts)):
            raise ValueError(overflows())
        if kind == "f":
            check_integral_exact(fill, arr.item(), dtype, what)
        return arr
    if kind in "US":  # np.array(0, "<U2") is the string '0'
        raise TypeError(
            f"{dtype} is a string dtype; dyntile pads and tiles numbers (bool, integer, float, "
            f"complex, datetime) and records, not strings"
        )
    try:
        return np.array(fill, dtype=dtype)
    except OverflowError:
        raise ValueError(f"{what}={_shown(fill)} is out of range for {dtype}") from None
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}={fill!r} cannot be stored in {dtype}: {e}") from None


def check_integral_exact(fill, stored, dtype, what: str = "fill") -> None:
    """``ValueError`` when an integral ``fill`` (an int, or a float with no fraction)
    is ``stored`` in the float ``dtype`` as another number: a label fill of -100 in
    float8 would be -96, which a loss does not ignore. Other real fills round to the
    nearest value of the dtype, as any cast does.

    >>> check_integral_exact(-100, -96.0, "float8_e4m3fn")
    Traceback (most recent call last):
    ValueError: fill=-100 cannot be stored exactly in float8_e4m3fn (it would be -96.0); pass a fill it holds
    """
    if isinstance(fill, (bool, np.bool_)):
        return
    if isinstance(fill, (int, np.integer)):
        exact = int(fill) == stored if math.isfinite(stored) else False
    else:
        try:
            f = float(fill)
        except (TypeError, ValueError, OverflowError):
            return
        if not math.isfinite(f) or f != int(f):
            return
        exact = f == stored
    if not exact:
        raise ValueError(
            f"{what}={_shown(fill)} cannot be stored exactly in {dtype} (it would be {stored!r}); "
            f"pass a fill it holds"
        )


def _shown(fill) -> str:
    """``repr(fill)`` for a message, huge integers by their size."""
    if isinstance(fill, int) and fill.bit_length() > 200:
        return f"<an integer of {fill.bit_length()} bits>"
    return repr(fill)


def fill_key(fill):
    """A hashable key for caches of fills: ``fill`` with its type, and for anything but
    an int its ``repr`` too, which tells apart what ``==`` and ``hash`` do not
    (``-0.0`` and ``0.0``, ``-0j`` and ``0j``)."""
    return (type(fill), fill) if type(fill) is int else (type(fill), fill, repr(fill))


def fill_bits(fill, dtype: np.dtype, what: str = "fill") -> int:
    """The bit pattern of ``fill`` stored in ``dtype``, as the kernels take it."""
    try:
        return _cached_bits(fill_key(fill), fill, np.dtype(dtype))
    except TypeError as e:  # unhashable fill: check it uncached (raises the precise error)
        if "unhashable" not in str(e):
            raise
    return _bits(check_fill(fill, dtype, what))


def _bits(arr: np.ndarray) -> int:
    return int(arr.reshape(1).view(_UINT[arr.dtype.itemsize])[0])


@functools.lru_cache(maxsize=256)
def _cached_bits(key, fill, dtype: np.dtype) -> int:
    return _bits(check_fill(fill, dtype))


def kernel_fill_bits(fill, dtype: np.dtype, token=None):
    """Fill bits for the width-typed copy kernels, or ``None`` when ``dtype`` is not
    one they move (the caller then takes its NumPy path). ``token``: a torch-only
    dtype (bfloat16...) carried as same-width integers, whose fill torch encodes."""
    if token is not None:
        from dyntile.arrays import torch_fill_bits

        return torch_fill_bits(fill, token)
    if moved_by_kernels(dtype):
        return fill_bits(fill, dtype)
    return None
