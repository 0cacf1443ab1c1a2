"""Shape math: rounding, padded batch shapes and tile grids. No data is touched.

Everything here works on Python ints and tuples, so it is shared by the CPU and
CUDA backends, the planner and the loaders.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "as_index",
    "round_up",
    "padded_shape",
    "tile_grid",
    "tiled_shape",
    "check_multiple",
    "check_shape",
    "check_tile",
    "normalize_axis",
    "MatmulShapes",
    "matmul_shapes",
    "broadcast_batch",
]


def as_index(value, name: str) -> int:
    """``value`` as an ``int`` (``operator.index``: 3.7 is not truncated); ``TypeError`` naming
    ``name`` otherwise.

    >>> as_index(4, "n")
    4
    >>> as_index(3.0, "n")
    Traceback (most recent call last):
    TypeError: n should be an integer, but got 3.0 of type float
    """
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} should be an integer, but got {value!r} of type {type(value).__name__}"
        ) from None


def check_multiple(multiple, name: str = "multiple") -> int:
    """Validate a layout multiple (a positive integer) and return it as ``int``."""
    m = as_index(multiple, name)
    if not 1 <= m < 2**63:
        raise ValueError(f"{name} should be a positive integer below 2**63, but got {m}")
    return m


def check_shape(shape, name: str = "shape") -> tuple[int, ...]:
    """A shape (an int or a sequence of them, each ``>= 0``) as a tuple of ``int``;
    ``TypeError`` for non-integers (3.7 is not truncated to 3), ``ValueError`` below 0."""
    entries = (shape,) if _is_scalar(shape) else tuple(shape)
    out = tuple(as_index(s, f"{name}[{i}]") for i, s in enumerate(entries))
    if any(s < 0 for s in out):
        raise ValueError(f"{name} should hold sizes >= 0, but got {out}")
    return out


def _is_scalar(x) -> bool:
    """An int, or a 0-d array or tensor (``len`` fails on those, ``ndim`` says 0)."""
    ndim = getattr(x, "ndim", None)
    return ndim == 0 if ndim is not None else not hasattr(x, "__len__")


def round_up(n, multiple) -> int:
    """Smallest multiple of ``multiple`` that is ``>= n``.

    >>> round_up(13, 8), round_up(16, 8), round_up(0, 8)
    (16, 16, 0)
    """
    n = as_index(n, "n")
    m = check_multiple(multiple)
    if n < 0:
        raise ValueError(f"n should be non-negative, but got {n}")
    return -(-n // m) * m


def padded_shape(
    shapes: Sequence[Sequence[int]], multiple=1, axes: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Per-sample shape that holds every shape in ``shapes``.

    Along each axis in ``axes`` the size is the maximum over ``shapes`` rounded up
    to ``multiple``; every other axis must have the same size in every shape.
    ``axes=None`` pads every axis.

    >>> padded_shape([(3, 5), (7, 2)], multiple=4)
    (8, 8)
    >>> padded_shape([(3, 80), (7, 80)], multiple=8, axes=[0])
    (8, 80)
    """
    shapes = [check_shape(s, f"shapes[{i}]") for i, s in enumerate(shapes)]
    if not shapes:
        raise ValueError("padded_shape needs at least one shape, but got an empty list")
    ndim = len(shapes[0])
    for i, s in enumerate(shapes):
        if len(s) != ndim:
            raise ValueError(f"all shapes should have {ndim} dimensions, but shapes[{i}]={s} has {len(s)}")
    if axes is not None and _is_scalar(axes):
        axes = (axes,)
    axes = range(ndim) if axes is None else [normalize_axis(a, ndim) for a in axes]
    out = list(shapes[0])
    for a in axes:
        out[a] = round_up(max(s[a] for s in shapes), multiple)
    fixed = [a for a in range(ndim) if a not in set(axes)]
    for i, s in enumerate(shapes):
        for a in fixed:
            if s[a] != out[a]:
                raise ValueError(
                    f"axis {a} is not padded, so every sample needs size {out[a]} there, "
                    f"but sample {i} has shape {s}"
                )
    return tuple(out)


def normalize_axis(axis, ndim: int) -> int:
    """Map a possibly negative axis into ``range(ndim)``; ``ValueError`` if out of range."""
    a = as_index(axis, "axis")
    if not -ndim <= a < ndim:
        raise ValueError(f"axis {a} is out of bounds for samples of {ndim} dimensions")
    return a % ndim


def tile_grid(shape: Sequence[int], tile: Sequence[int]) -> tuple[int, int]:
    """Number of tiles ``(ceil(M/tm), ceil(N/tn))`` that cover the last two axes of ``shape``.

    >>> tile_grid((5, 33, 130), (8, 128))
    (5, 2)
    """
    shape = check_shape(shape)
    if len(shape) < 2:
        raise ValueError(f"tiling needs an array of at least 2 dimensions (..., M, N), but got shape {shape}")
    tm, tn = check_tile(tile)
    return -(-shape[-2] // tm), -(-shape[-1] // tn)


def tiled_shape(shape: Sequence[int], tile: Sequence[int]) -> tuple[int, ...]:
    """Shape of the tiled layout: ``(..., ceil(M/tm), ceil(N/tn), tm, tn)``.

    >>> tiled_shape((5, 33, 130), (8, 128))
    (5, 5, 2, 8, 128)
    """
    shape = check_shape(shape)
    gm, gn = tile_grid(shape, tile)
    tm, tn = check_tile(tile)
    return (*shape[:-2], gm, gn, tm, tn)


def check_tile(tile) -> tuple[int, int]:
    """Validate a tile size ``(tm, tn)`` of two positive integers."""
    try:
        tm, tn = tile
    except (TypeError, ValueError):
        raise ValueError(f"tile should be a pair (tm, tn) of positive integers, but got {tile!r}") from None
    return check_multiple(tm, "tile[0]"), check_multiple(tn, "tile[1]")


# ------------------------------------------------------------------ matmul's shapes

_SIGNATURE = "(n?,k),(k,m?)->(n?,m?)"


class MatmulShapes(NamedTuple):
    """What a matmul of two operand shapes computes.

    ``batch``: broadcast leading shape; ``m, k, n``: one product ``(m, k) @ (k, n)``
    (a 1-D ``a`` is a ``(1, k)`` row, a 1-D ``b`` a ``(k, 1)`` column);
    ``out_shape``: shape of the result (promoted 1-D axes removed);
    ``a_vector`` / ``b_vector``: whether that operand is 1-D.

    >>> matmul_shapes((4, 3), (3,))
    MatmulShapes(batch=(), m=4, k=3, n=1, out_shape=(4,), a_vector=False, b_vector=True)
    """

    batch: tuple
    m: int
    k: int
    n: int
    out_shape: tuple
    a_vector: bool
    b_vector: bool


def matmul_shapes(a_shape: Sequence[int], b_shape: Sequence[int]) -> MatmulShapes:
    """Shapes of ``matmul(a, b)`` from the operand shapes, with NumPy's rules and errors.

    >>> matmul_shapes((5, 1, 4, 3), (2, 3, 7))
    MatmulShapes(batch=(5, 2), m=4, k=3, n=7, out_shape=(5, 2, 4, 7), a_vector=False, b_vector=False)
    >>> matmul_shapes((3,), (3,)).out_shape
    ()
    """
    a_shape, b_shape = tuple(int(s) for s in a_shape), tuple(int(s) for s in b_shape)
    for i, shape in enumerate((a_shape, b_shape)):
        if len(shape) == 0:
            raise ValueError(
                f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc "
                f"core with signature {_SIGNATURE} requires 1); use * to multiply by a scalar"
            )
    a_vector, b_vector = len(a_shape) == 1, len(b_shape) == 1
    m, k = (1, a_shape[0]) if a_vector else a_shape[-2:]
    kb, n = (b_shape[0], 1) if b_vector else b_shape[-2:]
    if k != kb:
        raise ValueError(
            f"matmul: shapes {a_shape} and {b_shape} are not aligned: the last axis of a "
            f"(size {k}) must match the {'only' if b_vector else 'second-to-last'} axis of b "
            f"(size {kb})"
        )
    a_batch, b_batch = a_shape[:-2], b_shape[:-2]
    batch = broadcast_batch(a_batch, b_batch)
    if batch is None:
        raise ValueError(
            f"matmul: batch dimensions of shapes {a_shape} and {b_shape} do not broadcast: "
            f"{a_batch} vs {b_batch}"
        )
    out_shape = batch + (() if a_vector else (m,)) + (() if b_vector else (n,))
    return MatmulShapes(batch, m, k, n, out_shape, a_vector, b_vector)


def broadcast_batch(x: tuple, y: tuple):
    """NumPy broadcasting of two shapes, or None if they do not broadcast."""
    if len(x) < len(y):
        x, y = y, x
    y = (1,) * (len(x) - len(y)) + y
    out = []
    for p, q in zip(x, y):
        if p != q and p != 1 and q != 1:
            return None
        out.append(q if p == 1 else p)
    return tuple(out)
