"""Bucket plans: a few padded sizes per ragged axis, chosen from a sample of lengths.

A :class:`BucketPlan` holds, for each planned axis, sorted boundaries that are
positive multiples of ``multiple``; a size ``L`` pads up to the smallest boundary
``>= L``. :func:`plan_buckets` chooses the boundaries that minimise the expected
padding over a sample of lengths:

* ``cost="linear"``: padded slots, ``sum(L_pad - L)``;
* ``cost="quadratic"``: padded attention cost, ``sum(L_pad**2 - L**2)``.

For one axis the plan is exactly optimal: dynamic programming over the ``D``
distinct lengths rounded up to ``multiple``: each of the ``K`` layers is one pass of
the Cython kernel :func:`dyntile.cpu.bucket_dp.dp_layer` (a monotone-queue trick,
``O(D)`` per layer), so a million lengths plan in well under a second.

For 2-D samples (``lengths`` of shape ``(n, d)``: image ``H, W``; spectrogram
``frames, bins``) every axis gets its own boundaries and a sample pads to the
per-axis product shape. The objective is the padded *area* (linear) or squared area
(quadratic) of each sample, ``sum(prod_a pad_a(L_a)) ** p``, minimised by block
coordinate descent: starting from independent per-axis plans, each axis is re-planned
exactly (weighted DP, weights = padded size of the other axes) while the others are
held fixed, until the objective stops decreasing. Every step is exact, so the area
never increases; the result is a local optimum of the joint problem.

NumPy and that one Cython kernel; no torch.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import operator
import os
from collections.abc import Sequence

import numpy as np

from dyntile.cpu import bucket_dp as _bucket_dp
from dyntile.dtypes import as_int64
from dyntile.shapes import check_multiple

__all__ = ["plan_buckets", "BucketPlan"]

COSTS = ("linear", "quadratic")
_POWER = {"linear": 1, "quadratic": 2}
_JSON_FORMAT = "dyntile.BucketPlan"
_JSON_VERSION = 1
# rounds of coordinate descent for multi-axis plans (it converges in 2-3 in practice)
_MAX_ROUNDS = 20


# --------------------------------------------------------------------------- validation


def _check_cost(cost) -> str:
    if cost not in COSTS:
        raise ValueError(f"cost should be one of {COSTS}, but got {cost!r}")
    return cost


def _check_rounding(L: np.ndarray, multiple: int) -> None:
    """``ValueError`` naming the longest length if rounding it up to ``multiple`` (the
    largest boundary a plan would need) leaves int64's range."""
    longest = int(L.max())
    top = -(-longest // multiple) * multiple
    if top > np.iinfo(np.int64).max:
        pos = np.unravel_index(int(np.argmax(L.reshape(-1))), L.shape)
        raise ValueError(
            f"lengths[{', '.join(map(str, pos))}]={longest} rounded up to a multiple of {multiple} "
            f"is {top}, past int64's range: no boundary can hold it"
        )


def _as_lengths(lengths, name: str = "lengths") -> np.ndarray:
    """``lengths`` as an int64 array of shape ``(n,)`` or ``(n, d)``, validated."""
    arr = np.asarray(lengths)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer)):
        if arr.size == 0 and arr.dtype == np.float64:  # np.asarray([]) is float64
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name} should be non-negative integers, but got an array of dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise ValueError(f"{name} should have shape (n,) or (n, d), but got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} should be non-empty, but got shape {arr.shape}")
    if arr.ndim == 2 and arr.shape[1] == 0:
        raise ValueError(f"{name} of shape (n, d) needs d >= 1, but got shape {arr.shape}")
    arr = as_int64(arr, name)
    neg = np.flatnonzero(arr.reshape(-1) < 0)
    if neg.size:
        pos = np.unravel_index(neg[0], arr.shape)
        where = ", ".join(str(int(p)) for p in pos)
        raise ValueError(f"{name} should be non-negative integers, but got {name}[{where}]={int(arr[pos])}")
    return arr


def _check_boundaries(bounds, multiple: int, axis: int) -> tuple[int, ...]:
    try:
        b = tuple(operator.index(x) for x in bounds)
    except TypeError:
        raise TypeError(f"boundaries of axis {axis} should be integers, but got {bounds!r}") from None
    if not b:
        raise ValueError(f"boundaries of axis {axis} should be non-empty")
    for x in b:
        if x <= 0 or x % multiple:
            raise ValueError(
                f"boundaries of axis {axis} should be positive multiples of {multiple}, but got {x}"
            )
    if any(x >= y for x, y in zip(b, b[1:])):
        raise ValueError(f"boundaries of axis {axis} should be strictly increasing, but got {b}")
    return b


# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class BucketPlan:
    """Immutable bucket plan: sorted boundaries per planned axis.

    ``boundaries`` is a tuple of ints for a one-axis plan (token sequences), or a
    tuple of ``ndim`` tuples of ints for a multi-axis plan (made from lengths of
    shape ``(n, d)``; bucket ids then enumerate the per-axis product grid in C
    order). Boundaries are strictly increasing positive multiples of ``multiple``.
    ``cost`` is the objective the plan was made for and the default of
    :meth:`padding_ratio` and :meth:`batch_sizes`.

    >>> plan = BucketPlan((16, 64, 256), multiple=8)
    >>> plan.round_up(20), plan.num_buckets
    ((64,), 3)
    >>> plan.bucket_of([3, 17, 256]).tolist()
    [0, 1, 2]
    """

    boundaries: tuple
    multiple: int = 8
    cost: str = "linear"

    def __post_init__(self):
        m = check_multiple(self.multiple)
        _check_cost(self.cost)
        b = tuple(self.boundaries)
        if b and all(isinstance(x, (tuple, list, np.ndarray)) for x in b):
            b = tuple(_check_boundaries(axis_b, m, a) for a, axis_b in enumerate(b))
        else:
            b = _check_boundaries(b, m, 0)
        object.__setattr__(self, "boundaries", b)
        object.__setattr__(self, "multiple", m)
        # read per batch by the collate routes: kept rather than recomputed (not fields:
        # equality, hashing and repr see boundaries, multiple and cost only)
        object.__setattr__(self, "_ndim", len(b) if isinstance(b[0], tuple) else 1)

    # ---- structure

    @property
    def multi_axis(self) -> bool:
        """True when ``boundaries`` is a tuple of per-axis tuples."""
        return isinstance(self.boundaries[0], tuple)

    @property
    def ndim(self) -> int:
        """Number of planned axes."""
        return self._ndim

    @property
    def axis_boundaries(self) -> tuple[tuple[int, ...], ...]:
        """Boundaries as one tuple per planned axis (also for a one-axis plan)."""
        return self.boundaries if self.multi_axis else (self.boundaries,)

    @property
    def grid(self) -> tuple[int, ...]:
        """Number of boundaries along each planned axis."""
        return tuple(len(b) for b in self.axis_boundaries)

    @property
    def num_buckets(self) -> int:
        """Number of distinct padded shapes: the product of :attr:`grid`."""
        return int(np.prod(self.grid))

    @property
    def max_sizes(self) -> tuple[int, ...]:
        """Largest boundary along each axis."""
        return tuple(b[-1] for b in self.axis_boundaries)

    def bucket_shapes(self) -> list[tuple[int, ...]]:
        """Padded sizes of every bucket, in bucket-id order.

        >>> BucketPlan(((8, 16), (32,))).bucket_shapes()
        [(8, 32), (16, 32)]
        """
        return [
            tuple(self.axis_boundaries[a][i] for a, i in enumerate(idx)) for idx in np.ndindex(*self.grid)
        ]

    # ---- lookups

    def round_up(self, sizes) -> tuple[int, ...]:
        """Padded sizes for one sample: the smallest boundary ``>=`` each size.

        ``sizes`` is an int (one-axis plan) or ``ndim`` ints. Raises ``ValueError``
        naming the size and the largest boundary when a size is over it.

        >>> BucketPlan((16, 64)).round_up(17)
        (64,)
        >>> BucketPlan(((8, 16), (32, 64))).round_up((9, 3))
        (16, 32)
        """
        if isinstance(sizes, (int, np.integer)):
            sizes = (sizes,)
        sizes = tuple(sizes)
        if len(sizes) != self.ndim:
            raise ValueError(
                f"this plan has {self.ndim} planned axes, so round_up needs {self.ndim} sizes, but got "
                f"{sizes}"
            )
        out = []
        for a, (s, b) in enumerate(zip(sizes, self.axis_boundaries)):
            s = operator.index(s)
            if s < 0:
                raise ValueError(f"size {s} on axis {a} should be non-negative")
            i = bisect.bisect_left(b, s)
            if i == len(b):
                raise ValueError(
                    f"size {s} on axis {a} is over the largest boundary {b[-1]} of the plan; "
                    f"extend the plan (plan.extend) or slice the sample first"
                )
            out.append(b[i])
        return tuple(out)

    def _axis_index(self, lengths: np.ndarray) -> np.ndarray:
        """Per-axis bucket index, shape ``(n, ndim)``; ``ValueError`` naming the first overflow."""
        L = lengths.reshape(lengths.shape[0], -1)
        if L.shape[1] != self.ndim:
            raise ValueError(
                f"this plan has {self.ndim} planned axes, so lengths should have shape (n, {self.ndim}), "
                f"but got shape {lengths.shape}"
            )
        idx = np.empty(L.shape, dtype=np.int64)
        for a, b in enumerate(self.axis_boundaries):
            idx[:, a] = np.searchsorted(np.asarray(b), L[:, a], side="left")
            over = np.flatnonzero(idx[:, a] == len(b))
            if over.size:
                i = int(over[0])
                where = f"lengths[{i}]" if lengths.ndim == 1 else f"lengths[{i}, {a}]"
                raise ValueError(
                    f"{where}={int(L[i, a])} is over the largest boundary {b[-1]} of axis {a} of the plan "
                    f"(the samplers take overflow='truncate' or 'extend'; plan.extend grows a plan)"
                )
        return idx

    def bucket_of(self, lengths) -> np.ndarray:
        """Bucket id of every sample: ``(n,)`` or ``(n, ndim)`` lengths -> int64 ``(n,)``;
        one sample's length (an int, or ``ndim`` of them) -> an ``int``.

        Multi-axis ids enumerate the boundary grid in C order
        (``np.ravel_multi_index(per_axis_index, plan.grid)``).

        >>> BucketPlan((8, 32)).bucket_of([0, 8, 9, 32]).tolist(), BucketPlan((8, 32)).bucket_of(9)
        ([0, 0, 1, 1], 1)
        """
        one = np.ndim(lengths) == 0 or (self.ndim > 1 and np.ndim(lengths) == 1)
        if one:
            return int(self.bucket_of(np.asarray(lengths).reshape(1, -1) if self.ndim > 1 else [lengths])[0])
        L = self._lengths_for(lengths)
        idx = self._axis_index(L)
        if self.ndim == 1:
            return idx[:, 0]
        return np.ravel_multi_index(tuple(idx.T), self.grid).astype(np.int64)

    def padded_lengths(self, lengths) -> np.ndarray:
        """Padded sizes of every sample, same shape as ``lengths``.

        >>> BucketPlan((8, 32)).padded_lengths([3, 9]).tolist()
        [8, 32]
        """
        L = self._lengths_for(lengths)
        idx = self._axis_index(L)
        out = np.empty(idx.shape, dtype=np.int64)
        for a, b in enumerate(self.axis_boundaries):
            out[:, a] = np.asarray(b, dtype=np.int64)[idx[:, a]]
        return out.reshape(L.shape)

    def _lengths_for(self, lengths) -> np.ndarray:
        L = _as_lengths(lengths)
        if self.ndim > 1 and L.ndim == 1 and L.shape[0] == self.ndim:
            raise ValueError(
                f"this plan has {self.ndim} planned axes, so lengths should have shape (n, {self.ndim}), "
                f"but got shape {L.shape}; wrap one sample's sizes in a list"
            )
        return L

    def padding_ratio(self, lengths, cost: str | None = None) -> float:
        """Fraction of the padded cost that is padding, over a sample of lengths.

        ``1 - sum(c(L)) / sum(c(L_pad))`` with ``c`` the element count (linear) or
        its square (quadratic); per sample the element count is the product over
        planned axes. ``cost=None`` uses the plan's own cost.

        >>> BucketPlan((8, 32)).padding_ratio([8, 16])
        0.4
        """
        p = _POWER[_check_cost(cost or self.cost)]
        L = self._lengths_for(lengths)
        P = self.padded_lengths(L)
        real = np.prod(L.reshape(L.shape[0], -1).astype(np.float64), axis=1) ** p
        padded = np.prod(P.reshape(P.shape[0], -1).astype(np.float64), axis=1) ** p
        total = padded.sum()
        return float(1.0 - real.sum() / total) if total else 0.0

    # ---- batch sizes from a token budget

    def batch_sizes(
        self, max_tokens: int, cost: str | None = None, multiple: int = 8, required=None
    ) -> tuple[int, ...]:
        """Batch size of every bucket (bucket-id order) under a token budget.

        ``batch_size * tokens <= max_tokens`` where ``tokens`` is the bucket's
        padded element count (linear) or its square (quadratic). Each size is
        rounded down to a multiple of ``multiple`` when that keeps at least 7/8
        of the budget's batch (15 stays 15 rather than halving to 8; 62 becomes
        56), and is at least 1. Raises ``ValueError`` naming the first bucket
        in which not even one sample fits; ``required`` (bucket ids, default:
        all) limits that check to the buckets that hold samples, the others
        getting size 1.

        >>> BucketPlan((16, 64, 256)).batch_sizes(4096)
        (256, 64, 16)
        >>> BucketPlan((16, 64, 256)).batch_sizes(1000)
        (56, 15, 3)
        """
        budget = operator.index(max_tokens)
        if budget < 1:
            raise ValueError(f"max_tokens should be a positive integer, but got {budget}")
        p = _POWER[_check_cost(cost or self.cost)]
        m = check_multiple(multiple)
        out = []
        must_fit = None if required is None else {operator.index(b) for b in required}
        for bucket, shape in enumerate(self.bucket_shapes()):
            tokens = int(np.prod(shape, dtype=object)) ** p
            bs = budget // tokens
            if bs < 1:
                if must_fit is not None and bucket not in must_fit:  # no sample there: any size will do
                    out.append(1)
                    continue
                raise ValueError(
                    f"max_tokens={budget} is smaller than one sample of bucket {bucket} (padded shape "
                    f"{shape}, {tokens} tokens at cost={cost or self.cost!r}); raise max_tokens to at "
                    f"least {tokens}"
                )
            rounded = bs // m * m
            out.append(rounded if rounded >= 1 and 8 * rounded >= 7 * bs else bs)
        return tuple(out)

    # ---- changing a plan (returns a new plan)

    def extend(self, sizes) -> BucketPlan:
        """A new plan with a larger last boundary so that ``sizes`` fits.

        Each axis whose largest boundary is under its size gets one more boundary,
        the size rounded up to ``multiple``.

        >>> BucketPlan((8, 32)).extend(70).boundaries
        (8, 32, 72)
        """
        if isinstance(sizes, (int, np.integer)):
            sizes = (sizes,)
        sizes = tuple(operator.index(s) for s in sizes)
        if len(sizes) != self.ndim:
            raise ValueError(f"this plan has {self.ndim} planned axes, but got sizes {sizes}")
        m = self.multiple
        new = []
        for s, b in zip(sizes, self.axis_boundaries):
            top = max(-(-s // m) * m, m)
            new.append(b + (top,) if top > b[-1] else b)
        return dataclasses.replace(self, boundaries=tuple(new) if self.multi_axis else new[0])

    # ---- persistence

    def to_json(self) -> str:
        """JSON text; :meth:`from_json` reads it back.

        >>> print(BucketPlan((8, 32)).to_json())  # doctest: +NORMALIZE_WHITESPACE
        {"format": "dyntile.BucketPlan", "version": 1, "multiple": 8, "cost": "linear",
         "boundaries": [8, 32]}
        """
        b = [list(x) for x in self.boundaries] if self.multi_axis else list(self.boundaries)
        return json.dumps(
            {
                "format": _JSON_FORMAT,
                "version": _JSON_VERSION,
                "multiple": self.multiple,
                "cost": self.cost,
                "boundaries": b,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> BucketPlan:
        """Plan from the text of :meth:`to_json`."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a BucketPlan JSON text: {e}") from None
        if not isinstance(d, dict) or d.get("format") != _JSON_FORMAT:
            raise ValueError(f"not a BucketPlan JSON text: expected format {_JSON_FORMAT!r}")
        if d.get("version") != _JSON_VERSION:
            raise ValueError(
                f"unsupported BucketPlan JSON version {d.get('version')!r}; this dyntile reads "
                f"{_JSON_VERSION}"
            )
        b = d["boundaries"]
        b = tuple(tuple(x) for x in b) if b and isinstance(b[0], list) else tuple(b)
        return cls(b, multiple=d["multiple"], cost=d["cost"])

    def save(self, path: str | os.PathLike) -> None:
        """Write the plan as JSON to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> BucketPlan:
        """Read a plan written by :meth:`save`."""
        with open(path, encoding="utf-8") as f:
            return cls.from_json(f.read())


# --------------------------------------------------------------------------- the DP


def _optimal_boundaries(values: np.ndarray, weights: np.ndarray, k: int, p: int) -> np.ndarray:
    """Exact ``k``-bucket partition of sorted distinct ``values`` with ``weights``.

    Minimises ``sum_j w_j * c(boundary(v_j))`` with ``c(x) = x**p``, where each
    value's boundary is the smallest chosen boundary ``>=`` it and the largest
    value is always chosen. ``f[k][j]`` is the best cost of values ``0..j`` in
    ``k`` buckets; a bucket spanning ``i..j`` costs ``c(v_j) * (W[j+1] - W[i])``::

        f[k][j] = c(v_j) * W[j+1] + min_{k-1 <= i <= j} (f[k-1][i-1] - c(v_j) * W[i])

    For each start ``i`` the bracket is a line in ``c(v_j)``, and ``c`` increases
    with ``j``: each layer is the lower envelope of those lines (the convex-hull
    trick, :func:`dyntile.cpu.bucket_dp.dp_layer`), ``O(D)``.
    """
    D = values.shape[0]
    k = min(k, D)
    c = values.astype(np.float64) ** p
    W = np.concatenate(([0.0], np.cumsum(weights, dtype=np.float64)))
    f = c * W[1:]  # one bucket covering 0..j
    choice = np.zeros((k + 1, D), dtype=np.int64)  # choice[kk][j] = start i of the last bucket
    best_k, best = 1, f[D - 1]
    for kk in range(2, k + 1):
        g = np.full(D, np.inf)
        _bucket_dp.dp_layer(f, c, W, kk, g, choice[kk])
        f = g
        if f[D - 1] < best:
            best_k, best = kk, f[D - 1]
    # backtrack from the last value through the chosen bucket starts
    out = [D - 1]
    j = D - 1
    for kk in range(best_k, 1, -1):
        j = int(choice[kk, j]) - 1
        out.append(j)
    return values[np.array(out[::-1], dtype=np.int64)]


def _rounded_counts(L: np.ndarray, multiple: int, weights: np.ndarray | None = None):
    """Distinct lengths rounded up to positive multiples of ``multiple``, and their weights."""
    q = np.maximum(-(-L // multiple), 1)  # length 0 pads to one multiple
    top = int(q.max())
    if weights is None and top <= 4 * L.shape[0] + 1024:  # dense: bincount is fastest
        counts = np.bincount(q, minlength=top + 1)
        vals = np.flatnonzero(counts)
        return vals * multiple, counts[vals].astype(np.float64)
    vals, inv = np.unique(q, return_inverse=True)
    w = np.bincount(inv.reshape(-1), weights=weights, minlength=vals.size)
    return vals * multiple, w.astype(np.float64)


def _plan_axis(L: np.ndarray, k: int, multiple: int, p: int, weights=None) -> tuple[int, ...]:
    vals, w = _rounded_counts(L, multiple, weights)
    return tuple(int(x) for x in _optimal_boundaries(vals, w, k, p))


def _area_cost(L: np.ndarray, bounds: Sequence[tuple[int, ...]], p: int) -> float:
    padded = np.ones(L.shape[0], dtype=np.float64)
    for a, b in enumerate(bounds):
        b = np.asarray(b, dtype=np.int64)
        padded *= b[np.searchsorted(b, L[:, a], side="left")]
    return float((padded**p).sum())


def _pad_axis(L: np.ndarray, b: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(b, dtype=np.float64)
    return arr[np.searchsorted(np.asarray(b), L, side="left")]


def plan_buckets(
    lengths, max_buckets: int | Sequence[int] = 8, multiple: int = 8, cost: str = "linear"
) -> BucketPlan:
    """Choose bucket boundaries that minimise expected padding over ``lengths``.

    ``lengths``: int array ``(n,)`` (one planned axis) or ``(n, d)`` (``d`` axes,
    e.g. image ``H, W``). Returns a :class:`BucketPlan` with at most
    ``max_buckets`` boundaries per axis (an int, or one per axis), each a positive
    multiple of ``multiple``, whose largest boundary holds the longest length.

    ``cost="linear"`` minimises padded slots ``sum(L_pad - L)``; ``"quadratic"``
    minimises padded attention cost ``sum(L_pad**2 - L**2)``. One axis: exact
    (dynamic programming). Several axes: padded area (or its square), by exact
    per-axis steps of block coordinate descent (see the module docstring).

    >>> plan = plan_buckets([5, 7, 30, 31, 100], max_buckets=3, multiple=8)
    >>> plan.boundaries
    (8, 32, 104)
    >>> plan_buckets([[30, 60], [100, 60], [90, 120]], max_buckets=2).boundaries
    ((32, 104), (64, 120))
    """
    L = _as_lengths(lengths)
    m = check_multiple(multiple)
    p = _POWER[_check_cost(cost)]
    d = 1 if L.ndim == 1 else L.shape[1]
    _check_rounding(L, m)
    ks = (max_buckets,) * d if np.ndim(max_buckets) == 0 else tuple(max_buckets)
    try:
        if len(ks) != d:
            raise TypeError
        ks = tuple(operator.index(k) for k in ks)
    except TypeError:
        raise TypeError(
            f"max_buckets should be an int or {d} ints (one per axis), but got {max_buckets!r}"
        ) from None
    for a, k in enumerate(ks):
        if k < 1:
            raise ValueError(f"max_buckets should be >= 1, but got {k}" + (f" for axis {a}" if d > 1 else ""))
    if L.ndim == 1:
        return BucketPlan(_plan_axis(L, ks[0], m, p), multiple=m, cost=cost)
    bounds = [_plan_axis(L[:, a], ks[a], m, p) for a in range(d)]
    if d > 1:
        bounds = _coordinate_descent(L, bounds, ks, m, p)
    return BucketPlan(tuple(bounds), multiple=m, cost=cost)


def _coordinate_descent(L, bounds, ks, m, p):
    """Re-plan each axis exactly with the others fixed until the padded area stops falling."""
    d = L.shape[1]
    best = _area_cost(L, bounds, p)
    for _ in range(_MAX_ROUNDS):
        improved = False
        for a in range(d):
            others = np.ones(L.shape[0], dtype=np.float64)
            for b in range(d):
                if b != a:
                    others *= _pad_axis(L[:, b], bounds[b])
            trial = list(bounds)
            trial[a] = _plan_axis(L[:, a], ks[a], m, p, weights=others**p)
            c = _area_cost(L, trial, p)
            if c < best * (1 - 1e-12):
                bounds, best, improved = trial, c, True
        if not improved:
            break
    return bounds
