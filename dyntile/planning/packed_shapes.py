"""The batch shapes ``((B, T),)`` or ``((B, T), (B2, T2))`` of packing at a given row length.

The rule both the packer (:func:`dyntile.planning.packing.packing_shapes`) and the
search for the row length of least cost
(:func:`dyntile.planning.packing_cost.choose_seq_len`) apply to each ``T``; they
import it from here, not from each other.
"""

from __future__ import annotations

import numpy as np

from dyntile.planning.packing_checks import as_size, check_batch_tokens
from dyntile.shapes import round_up

__all__ = ["shapes_for", "default_seq_len"]


def shapes_for(
    L: np.ndarray, seq_len: int | None, budget: int | None, batch_rows, m: int, overflow: str, plan=None
) -> tuple[tuple[int, int], ...]:
    """:func:`~dyntile.planning.packing.packing_shapes` for validated ``L``, ``m`` and ``overflow``
    and a given ``seq_len`` (``None``: the plan's largest boundary, else the longest sample's rule).

    >>> shapes_for(np.array([3, 17, 40]), 16, 128, None, 8, "extend")
    ((8, 16), (3, 40))
    """
    longest = int(L.max()) if L.size else 0
    if seq_len is not None:
        T = as_size(seq_len, "seq_len")
        if T < 1 or T % m:
            raise ValueError(f"seq_len should be a positive multiple of multiple={m}, but got seq_len={T}")
    else:
        if plan is not None:
            if plan.ndim != 1:
                raise ValueError(
                    f"packing needs a one-axis plan (token lengths), but got a plan of {plan.ndim} axes"
                )
            T = round_up(plan.max_sizes[0], m)
        else:
            T = default_seq_len(L, longest, m, budget, batch_rows)
        if budget is not None and T > budget:
            T = budget // m * m
            if T == 0:
                raise ValueError(f"max_tokens={budget} is smaller than one row of multiple={m} tokens")
    if batch_rows is not None:
        B = as_size(batch_rows, "batch_rows")
        if B < 1:
            raise ValueError(f"batch_rows should be a positive integer, but got {B}")
        if budget is not None and B * T > budget:
            raise ValueError(f"batch_rows={B} rows of seq_len={T} tokens exceed max_tokens={budget}")
        check_batch_tokens(B, T)
    else:
        B = budget // T
        if B < 1:
            raise ValueError(f"max_tokens={budget} is smaller than one row of seq_len={T} tokens")
    if longest <= T:
        return ((B, T),)
    i = int(np.argmax(L))
    if overflow == "error":
        raise ValueError(
            f"sample {i} has length {longest}, longer than seq_len={T}; pass a larger seq_len, "
            f"or overflow='extend' or 'split'"
        )
    if overflow == "split":
        if -(-longest // T) > B:
            raise ValueError(
                f"sample {i} of length {longest} needs {-(-longest // T)} rows of seq_len={T} "
                f"after splitting, more than the {B} rows of one batch; raise max_tokens"
            )
        return ((B, T),)
    T2 = round_up(longest, m)
    B2 = (budget if budget is not None else B * T) // T2
    if B2 < 1:
        raise ValueError(
            f"sample {i} of length {longest} needs a row of {T2} tokens, more than the token "
            f"budget of one batch ({budget if budget is not None else B * T}); raise max_tokens, "
            f"or pass overflow='split'"
        )
    return ((B, T), (B2, T2))


def default_seq_len(L: np.ndarray, longest: int, m: int, budget: int | None, batch_rows) -> int:
    """Shortest ``T >= longest`` (multiple of ``m``) whose whole batches waste (nearly) the least.

    Packing fills rows almost completely, so the padding that is left is mostly the
    last batch's empty rows: ``ceil(rows / B) * B * T - tokens`` with
    ``rows ~ tokens / (0.99 T)``. Candidates run from ``round_up(longest, m)`` up to
    twice that (at most 256 of them), within the budget.
    """
    T0 = max(round_up(longest, m), m)
    if budget is None or batch_rows is not None or T0 > budget:
        return T0
    tokens = int(L.sum())
    T = np.arange(T0, min(2 * T0, budget) + 1, m, dtype=np.int64)[:256]
    B = budget // T
    rows = np.ceil(tokens / (0.99 * T)).astype(np.int64)
    slots = -(-rows // B) * B * T
    return int(T[np.flatnonzero(slots <= slots.min() * 1.002)[0]])  # the shortest near-best T
