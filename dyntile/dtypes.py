"""Dtype rules for ragged batches: which dtypes may share a batch, and what they become.

A batch takes the dtype of its array samples (NumPy arrays, tensors); samples given
as Python lists are *weakly* typed and must fit that dtype exactly. Mixed array
dtypes promote only when every value of every input is representable in the result
(int16 + float32 -> float32 is fine; int64 + float64, or int64 + uint64, is not:
large integers would be rounded) -- stricter than NumPy's ``can_cast(..., "safe")``.
Datetimes and timedeltas join only their own kind and unit (a unit change can
overflow: days in seconds), records only their own layout, and neither joins numbers.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = [
    "as_int64",
    "check_exact_cast",
    "check_round_trip",
    "exactly_representable",
    "promote_samples",
    "KERNEL_KINDS",
    "moved_by_kernels",
]

#: dtype kinds the width-typed copy kernels move as raw bits (itemsize 1, 2, 4 or 8)
KERNEL_KINDS = frozenset("biufcmM")


def moved_by_kernels(dtype: np.dtype) -> bool:
    """True if the copy kernels move ``dtype`` (a fixed-width, non-object type)."""
    return dtype.kind in KERNEL_KINDS and dtype.itemsize in (1, 2, 4, 8)


def _mantissa_bits(dtype: np.dtype) -> int:
    return np.finfo(dtype).nmant + 1


def exactly_representable(src: np.dtype, dst: np.dtype) -> bool:
    """True if every value of ``src`` is stored exactly in ``dst``."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src.kind in "mM" or dst.kind in "mM":
        if src.kind != dst.kind:
            return False
        unit = np.datetime_data(src)  # (unit, count); a generic unit holds no unit to change
        return unit[0] == "generic" or unit == np.datetime_data(dst)
    if src == dst or src.kind == "b":
        return dst.kind in "biufc" if src.kind == "b" else True
    if src.kind in "iu" and dst.kind in "iu":
        return bool(np.can_cast(src, dst, "safe"))
    if src.kind in "iu" and dst.kind in "fc":
        bits = src.itemsize * 8 - (src.kind == "i")
        real = np.dtype(dst.char.lower()) if dst.kind == "f" else np.finfo(dst).dtype
        return bits <= _mantissa_bits(real)
    if src.kind in "fc" and dst.kind in "fc":
        return bool(np.can_cast(src, dst, "safe"))
    return False


def promote_samples(
    strong: list[tuple[int, np.dtype]], weak: list[tuple[int, np.ndarray]], dtype=None
) -> np.dtype:
    """The batch dtype for samples ``strong`` (index, dtype) and list samples ``weak``.

    ``dtype`` given: every sample must cast to it with ``same_kind`` casting, and
    every value of a list must fit it (as ``numpy.array(list, dtype)`` takes them:
    ints in range, also into unsigned dtypes; floats that round, not overflow).
    List samples are weakly typed (bool, int64 or float64 by their values, as
    ``numpy.asarray`` reads them; an empty list has no type) and must fit the dtype
    of the array samples exactly.
    Raises ``TypeError`` naming the first sample that cannot join the batch.
    """
    if dtype is not None:
        dtype = np.dtype(dtype)
        lists = [(i, a.dtype) for i, a in weak if a.size and not (a.dtype.kind == "i" and dtype.kind == "u")]
        for i, d in strong + lists:  # a list's ints go into unsigned dtypes by value
            if not np.can_cast(d, dtype, "same_kind"):
                raise TypeError(
                    f"sample {i} has dtype {d}, which cannot be cast to dtype={dtype} (same_kind casting)"
                )
        for i, a in weak:
            _check_list_fits(a, dtype, i)
        return dtype
    if strong:
        result = _result_type(strong)
        for i, d in strong:
            if not exactly_representable(d, result):
                others = sorted({str(x) for _, x in strong})
                raise TypeError(
                    f"samples have dtypes {others} that do not promote safely: sample {i} ({d}) "
                    f"{_change(d, result)}; cast the samples to one dtype or pass dtype="
                )
    else:  # lists only: empty lists carry no type; a batch of only empty lists is int64
        result = np.result_type(*[a.dtype for _, a in weak if a.size] or [np.int64])
    for i, a in weak:
        if a.dtype != result:
            check_exact_cast(a, result, f"sample {i} (a list)")
    return result


def _result_type(strong: list[tuple[int, np.dtype]]) -> np.dtype:
    """NumPy's common dtype of the samples ``strong`` (index, dtype); ``TypeError``
    naming the first sample that has none with the samples before it."""
    result = strong[0][1]
    for i, d in strong[1:]:
        try:
            result = np.result_type(result, d)
        except (TypeError, OverflowError):  # DTypePromotionError; time units without a common one (years
            # and days; picoseconds and two days, whose divisor overflows)
            before = sorted({str(x) for j, x in strong if j < i})
            raise TypeError(
                f"sample {i} has dtype {d}, which has no common dtype with the samples before it "
                f"({', '.join(before)}); cast the samples to one dtype or pass dtype="
            ) from None
    return result


def _change(src: np.dtype, dst: np.dtype) -> str:
    """What storing ``src`` values in ``dst`` would do to them, for a message."""
    if src.kind in "mM" and dst.kind == src.kind:
        return f"would change unit to {dst}, which can overflow or round its values"
    if src.kind in "mMV" or dst.kind in "mMV":
        return f"would become {dst}, another kind of value (records and times join only their own dtype)"
    return f"would be rounded in {dst}"


def as_int64(arr: np.ndarray, name: str = "lengths") -> np.ndarray:
    """An integer array as int64 (a view when it is one); ``ValueError`` naming the
    first uint64 value of 2**63 or more, which the cast would wrap to a negative."""
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        pos = np.unravel_index(int(np.argmax(arr.reshape(-1))), arr.shape)
        raise ValueError(
            f"{name} should be below 2**63, but got {name}[{', '.join(map(str, pos))}]={int(arr[pos])}"
        )
    return arr.astype(np.int64, copy=False)


def _check_list_fits(a: np.ndarray, dtype: np.dtype, i: int) -> None:
    """``ValueError`` naming a value of list sample ``i`` (``a``, as NumPy read it) that
    ``dtype=`` cannot hold, as ``numpy.array(list, dtype)`` refuses it: an integer out of
    range (300 in int8), or a finite number past the largest float (70000.0 in float16);
    a float that merely rounds is taken."""
    if not a.size or a.dtype == dtype or dtype.kind not in "iufc":
        return
    with np.errstate(all="ignore"):
        cast = a.astype(dtype)
        bad = cast.astype(a.dtype) != a if dtype.kind in "iu" else np.isfinite(a) & ~np.isfinite(cast)
    if bad.any():
        j = int(np.flatnonzero(bad.reshape(-1))[0])
        raise ValueError(
            f"sample {i} (a list) holds {a.reshape(-1)[j].item()!r}, which dtype={dtype} cannot hold "
            f"({'out of range' if dtype.kind in 'iu' else 'it overflows to inf'})"
        )


def check_exact_cast(a: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """``a`` cast to ``dtype``, or ``TypeError`` naming ``what`` and a value it would change.

    Exact means the cast and back gives every value (NaN as NaN): comparing the cast
    with ``a`` itself would compare in the wider type, where an int64 rounded to
    float64 (2**53 + 1) looks equal to itself."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # complex back to ints: judged below
        cast = a.astype(dtype)
        back = cast.astype(a.dtype)
    check_round_trip(a, back, dtype, what)
    return cast


def check_round_trip(a: np.ndarray, back: np.ndarray, dtype, what: str) -> None:
    """``TypeError`` naming ``what`` unless ``back`` (``a`` cast to ``dtype`` and back)
    holds every value of ``a`` (NaN as NaN)."""
    nan = a.dtype.kind in "fc"
    if not np.array_equal(back, a, equal_nan=nan):
        flat, changed = a.reshape(-1), back.reshape(-1)
        bad = (changed != flat) & ~(np.isnan(flat) & np.isnan(changed)) if nan else changed != flat
        raise TypeError(
            f"{what} holds values that {dtype} cannot store exactly, e.g. {flat[np.argmax(bad)]!r}"
        )
