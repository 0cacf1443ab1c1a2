"""Samples larger than the largest planned shape: one vocabulary for plans, samplers and collates.

Each component takes the policies that make sense for it, and every one of them
checks ``overflow=`` here, so a word means the same thing everywhere:

* ``"error"``: raise ``ValueError`` naming the sample (the default of bucketing);
* ``"truncate"``: cut the sample to the largest shape, counted in the collate's
  stats (bucket plans and their collates);
* ``"extend"``: give the sample a larger shape: a bucket plan grows a boundary (a
  sampler's once, for every length; a collate's for that batch alone, so its width
  depends on the plan and the batch only); packing puts it in rows of a second,
  longer shape (the default of packing);
* ``"split"``: cut the sample into chunks in consecutive rows of one packed batch
  (packing).

Nothing is cut unless ``"truncate"`` or ``"split"`` is asked for.
"""

from __future__ import annotations

import warnings

__all__ = ["OVERFLOWS", "BUCKET_OVERFLOWS", "PACKING_OVERFLOWS", "PACKING_RENAMED", "check_overflow"]

#: every policy, and what it does
OVERFLOWS = {
    "error": "raise ValueError naming the sample",
    "truncate": "cut it to the largest shape",
    "extend": "give it a larger shape (a grown boundary, or a second packed row length)",
    "split": "cut it into chunks in consecutive packed rows",
}
#: what bucket plans, BucketBatchSampler and DynTileCollate take
BUCKET_OVERFLOWS = ("error", "truncate", "extend")
#: what packing (pack_rows, PackingBatchSampler, PackedCollate) takes
PACKING_OVERFLOWS = ("extend", "split", "error")
#: packing's earlier name of a policy, read as the policy it became
PACKING_RENAMED = {"second_shape": "extend"}


def check_overflow(overflow, accepted: tuple[str, ...], renamed: dict | None = None) -> str:
    """``overflow`` when it is one of ``accepted`` (or an old name in ``renamed``, with a
    ``FutureWarning``); ``ValueError`` naming the accepted ones otherwise.

    >>> check_overflow("split", PACKING_OVERFLOWS)
    'split'
    """
    if renamed and isinstance(overflow, str) and overflow in renamed:
        warnings.warn(
            f"overflow={overflow!r} is now called {renamed[overflow]!r}", FutureWarning, stacklevel=3
        )
        return renamed[overflow]
    if overflow not in accepted:
        known = overflow in OVERFLOWS if isinstance(overflow, str) else False
        raise ValueError(
            f"overflow should be one of {accepted}, but got {overflow!r}"
            + (f" ({OVERFLOWS[overflow]}), which does not apply here" if known else "")
        )
    return overflow
