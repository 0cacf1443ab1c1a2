"""dyntile: pad and tile ragged batches into a few planned, layout-friendly shapes.

Public API (NumPy-style; NumPy arrays, lists, torch tensors and CUDA device arrays)::

    batch, lengths = dyntile.pad_batch(arrays, multiple=8)   # ragged list -> (B, *shape)
    y = dyntile.pad_to(x, shape)                             # one array -> shape
    batch, lengths, longest, total = dyntile.pad_rows(rows)  # 1-D rows, one call (a collate's)
    values, lengths = dyntile.concat_rows(samples)           # samples -> rows back to back
    batch, lengths = dyntile.pad_jagged(values, lengths)     # rows back to back -> (B, T)
    t = dyntile.tile(x, (8, 128))                            # (..., M, N) -> (..., gm, gn, 8, 128)
    x = dyntile.untile(t, (M, N))
    c = dyntile.matmul(a, b)                                 # numpy.matmul semantics
    o = dyntile.varlen_attention(q, k, v, segment_ids=seg)   # attention inside packed segments
    plan = dyntile.plan_buckets(lengths, max_buckets=8, multiple=8)

Layers (each imports only those above it): :mod:`dyntile.shapes` (shape math),
:mod:`dyntile.planning` (bucket plans, packing), :mod:`dyntile.cpu` (Cython kernels)
and :mod:`dyntile.cuda` (Numba kernels), then the API modules
(:mod:`dyntile.padding`, :mod:`dyntile.jagged`, :mod:`dyntile.tiling`,
:mod:`dyntile.linalg`) that validate, pick the backend via :mod:`dyntile.dispatch`
and call one kernel.

Importing dyntile imports NumPy only; names are loaded on first use.
"""

from __future__ import annotations

from dyntile.lazy import lazy_exports

__version__ = "0.1.0"

# public names by the module that defines them (loaded lazily, so `import dyntile` stays
# cheap and never imports numba or torch).
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "dyntile.shapes": ("round_up", "padded_shape", "tile_grid", "tiled_shape", "matmul_shapes"),
        "dyntile.padding": ("pad_batch", "pad_to", "pad_rows"),
        "dyntile.jagged": ("pad_jagged", "concat_rows"),
        "dyntile.masks": ("padding_mask",),
        "dyntile.tiling": ("tile", "untile"),
        "dyntile.linalg": ("matmul",),
        "dyntile.attention": ("varlen_attention",),
        "dyntile.planning": ("plan_buckets", "BucketPlan", "pack_lengths", "PackedBatch"),
    },
    globals(),
)
