"""CUDA kernels, written with Numba ``@cuda.jit`` (one module per concept).

* :mod:`.pad`    : scatter a ragged batch (device arrays, or NumPy arrays sent in one
  host-to-device transfer) into one padded buffer with fill, left or right, any rank;
* :mod:`.tile`   : ``(B, M, N) <-> (B, gm, gn, tm, tn)`` tiled layout, fill at the edges;
* :mod:`.gemm`   : shared-memory, register-blocked, double-buffered GEMM kernel;
  :mod:`.matmul` wraps it with ``numpy.matmul`` semantics (batched, broadcast);
* :mod:`.attention` : varlen (segment-masked) softmax attention, forward and
  backward, flash-attention-2 tiles with an online softmax;
* :mod:`.config` : the block-size tables (real GPU and simulator profiles);
  :mod:`.launch` : launch configurations and attention work items from the shape;
  :mod:`.runtime` : numba glue; :mod:`.ptx` : compile every kernel to PTX for a given compute capability.

Entry points, called by the API modules after validation: :func:`pad_into`,
:func:`tile_into`, :func:`untile_from`, :func:`matmul`, :func:`varlen_attention_forward`,
:func:`varlen_attention_backward`, plus :func:`numpy_dtype`.
Importing this package is free: numba is imported on first use of an entry point,
with a clear ``ImportError`` when numba-cuda is missing.

>>> from dyntile import cuda as dc
>>> dc.__all__  # doctest: +NORMALIZE_WHITESPACE
['matmul', 'numpy_dtype', 'pad_into', 'tile_into', 'untile_from', 'varlen_attention_backward',
 'varlen_attention_forward']
"""

from __future__ import annotations

from dyntile.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "dyntile.cuda.pad": ("pad_into",),
        "dyntile.cuda.runtime": ("numpy_dtype",),
        "dyntile.cuda.tile": ("tile_into", "untile_from"),
        "dyntile.cuda.products": ("matmul",),
        "dyntile.cuda.attention": ("varlen_attention_forward", "varlen_attention_backward"),
    },
    globals(),
)
