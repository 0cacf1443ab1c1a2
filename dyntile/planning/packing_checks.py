"""The checks of packing's inputs, shared by the packer and the row-length search.

:mod:`dyntile.planning.packing` (the packer) and
:mod:`dyntile.planning.packing_cost` (the search for ``T``) both read lengths, a
token budget, shapes and an overflow policy; each rule and its message lives here
once, so the two modules import it and not each other.
"""

from __future__ import annotations

import numpy as np

from dyntile.dtypes import as_int64
from dyntile.overflow import PACKING_OVERFLOWS, PACKING_RENAMED, check_overflow
from dyntile.shapes import as_index

__all__ = [
    "as_lengths",
    "as_size",
    "check_batch_tokens",
    "check_budget",
    "check_packing_overflow",
    "check_packing_shapes",
    "check_pool_size",
]


_INT64_MAX = 2**63 - 1


def as_size(value, name: str) -> int:
    """A size (``max_tokens``, ``seq_len``, ``batch_rows``) as an ``int`` that int64
    holds: the batch's token counts and offsets are int64.

    >>> as_size(2**63, "max_tokens")
    Traceback (most recent call last):
    ValueError: max_tokens=9223372036854775808 is past int64's range: it should be at most 2**63 - 1
    """
    v = as_index(value, name)
    if v > _INT64_MAX:
        raise ValueError(f"{name}={v} is past int64's range: it should be at most 2**63 - 1")
    return v


def check_batch_tokens(B: int, T: int) -> None:
    """Refuse ``B`` rows of ``T`` tokens whose product int64 cannot hold."""
    if B * T > _INT64_MAX:
        raise ValueError(
            f"batch_rows={B} rows of seq_len={T} tokens make {B * T} tokens a batch, past int64's "
            f"range (2**63 - 1): give fewer rows or shorter ones"
        )


def as_lengths(lengths) -> np.ndarray:
    """``lengths`` as int64 ``(n,)``, every entry ``>= 0`` (an empty list is accepted).

    >>> as_lengths([3, 0, 5]).tolist()
    [3, 0, 5]
    >>> as_lengths([3, -1])
    Traceback (most recent call last):
    ValueError: lengths should be non-negative integers, but got lengths[1]=-1
    """
    arr = np.asarray(lengths)
    if arr.size == 0 and arr.dtype == np.float64:
        arr = arr.astype(np.int64)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"lengths should be non-negative integers, but got an array of dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"lengths should have shape (n,), but got shape {arr.shape}")
    arr = as_int64(arr)
    neg = np.flatnonzero(arr < 0)
    if neg.size:
        raise ValueError(f"lengths should be non-negative integers, but got lengths[{neg[0]}]={arr[neg[0]]}")
    return arr


def check_packing_overflow(overflow) -> str:
    """``overflow`` as one of :data:`~dyntile.overflow.PACKING_OVERFLOWS`."""
    return check_overflow(overflow, PACKING_OVERFLOWS, PACKING_RENAMED)


def check_pool_size(pool_size) -> int | None:
    """``pool_size`` as a positive ``int``, or ``None`` (one pool)."""
    if pool_size is None:
        return None
    if isinstance(pool_size, bool):
        raise TypeError(f"pool_size should be a positive integer or None, but got {pool_size!r}")
    n = as_index(pool_size, "pool_size")
    if n < 1:
        raise ValueError(f"pool_size should be a positive integer or None, but got {n}")
    return n


def check_budget(max_tokens, batch_rows) -> int | None:
    """``max_tokens`` as a positive ``int`` (``None`` when only ``batch_rows`` is given)."""
    if max_tokens is None and batch_rows is None:
        raise ValueError("packing needs a token budget: pass max_tokens (tokens per batch) or batch_rows")
    budget = None if max_tokens is None else as_size(max_tokens, "max_tokens")
    if budget is not None and budget < 1:
        raise ValueError(f"max_tokens should be a positive integer, but got {budget}")
    return budget


def check_packing_shapes(shapes) -> tuple[tuple[int, int], ...]:
    """``shapes`` as one or two ``(B, T)`` pairs of ints, the second with longer rows."""
    try:
        out = tuple((as_size(b, "batch_rows"), as_size(t, "seq_len")) for b, t in shapes)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"shapes should be one or two pairs (B, T) of positive integers, but got {shapes!r}"
        ) from e
    if not 1 <= len(out) <= 2 or any(b < 1 or t < 1 for b, t in out):
        raise ValueError(f"shapes should be one or two pairs (B, T) of positive integers, but got {shapes!r}")
    for b, t in out:
        check_batch_tokens(b, t)
    if len(out) == 2 and out[1][1] <= out[0][1]:
        raise ValueError(f"the second shape should have longer rows than the first, but got shapes={out}")
    return out
