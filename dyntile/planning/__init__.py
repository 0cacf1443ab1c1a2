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

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "dyntile.planning.buckets": ("plan_buckets", "BucketPlan"),
        "dyntile.planning.packing": ("pack_lengths", "PackedBatch", "pack_rows", "packing_shapes"),
        "dyntile.planning.packing_cost": ("choose_seq_len", "SeqLenChoice", "RowCost", "row_cost"),
    },
    globals(),
)
