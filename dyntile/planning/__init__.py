"""Planning: choose shapes before any data is copied.

* :mod:`dyntile.planning.buckets` -- ``plan_buckets`` / ``BucketPlan``: bucket
  boundaries (multiples of a layout multiple) that minimise expected padding, and
  per-bucket batch sizes from a token budget;
* :mod:`dyntile.planning.packing` -- ``pack_lengths`` / ``PackedBatch``: whole
  samples packed into fixed ``[B, T]`` tiles; ``pack_rows`` recovers a batch's rows
  from its lengths (the one source of truth shared by sampler and collate);
* :mod:`dyntile.planning.packing_cost` -- ``choose_seq_len``: the packed row length
  of least training cost (slots, attention scores, steps), the packer's default; the
  cost's weights are one value, ``RowCost`` (``row_cost(...)`` builds it), that the
  packing functions take as ``cost=`` or build once from their keyword options;
* :mod:`dyntile.planning.packing_checks` and :mod:`dyntile.planning.packed_shapes` --
  the input checks and the shapes-at-a-given-``T`` rule the packer and the search share.

NumPy only, no torch. Packing's best-fit loop is the small Cython kernel
:mod:`dyntile.cpu.packing`, imported when a packing function first runs.
"""

from __future__ import annotations

from dyntile.lazy import lazy_exports

_EXPORTS = {
    "plan_buckets": "dyntile.planning.buckets",
    "BucketPlan": "dyntile.planning.buckets",
    "pack_lengths": "dyntile.planning.packing",
    "PackedBatch": "dyntile.planning.packing",
    "pack_rows": "dyntile.planning.packing",
    "packing_shapes": "dyntile.planning.packing",
    "choose_seq_len": "dyntile.planning.packing_cost",
    "SeqLenChoice": "dyntile.planning.packing_cost",
    "RowCost": "dyntile.planning.packing_cost",
    "row_cost": "dyntile.planning.packing_cost",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
