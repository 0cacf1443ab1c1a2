"""CPU kernels, written in Cython (one ``.pyx`` per concept).

* ``pad``  : copy a ragged list of arrays into one padded buffer with a fill value;
* ``tile`` : ``(B, M, N)`` <-> ``(B, gm, gn, tm, tn)`` tiled layout;
* ``gemm`` : cache-blocked GEMM (BLIS design: pack A/B, macro-kernel, SIMD micro-kernel);
* ``number_lists`` : Python lists of numbers (token ids) read straight into padded rows;
* ``bucket_dp`` : one O(D) layer of the bucket planner's exact dynamic programme;
* ``_torch_tensors`` (C++, optional: built only when torch is importable at build time)
  : the native bridge to torch: sizes, strides and pointers of a list of CPU torch tensors
  in one call, and a batch of flat dicts read and written in one call. Private: reached
  only through :mod:`dyntile.tensor_reader`, which loads it after torch, under its torch
  version only.

Kernels take validated NumPy arrays and never inspect Python types; the API
modules (:mod:`dyntile.padding`, :mod:`dyntile.tiling`, :mod:`dyntile.linalg`) do that.
Importing this package fails loudly if the extensions were not built: there is no
silent pure-Python fallback for the kernels themselves.
"""
