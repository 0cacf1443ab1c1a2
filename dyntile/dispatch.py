"""Pick the backend once, from the array types.

* NumPy arrays, CPU torch tensors, Python lists and scalars -> ``"cpu"``
  (Cython kernels in :mod:`dyntile.cpu`, NumPy fallback for other dtypes);
* anything exposing ``__cuda_array_interface__`` (Numba device arrays, CUDA torch
  tensors, CuPy arrays) -> ``"cuda"`` (Numba kernels in :mod:`dyntile.cuda`);
* under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), its device arrays too:
  they wrap host arrays and lack the interface, yet the simulated kernels take them.

Kernels never inspect types: the API functions call :func:`backend_of` once and
hand plain arrays to one kernel. torch is never imported here: a tensor is
recognised by duck typing, and if a user passes one, torch is already loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

__all__ = ["is_torch_tensor", "is_cuda_array", "backend_of"]


def is_torch_tensor(x) -> bool:
    """True for a ``torch.Tensor`` (checked without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_cuda_array(x) -> bool:
    """True for an array that lives on a CUDA device.

    torch tensors are asked for ``is_cuda`` (their ``__cuda_array_interface__``
    raises on CPU tensors); everything else is asked for the interface itself.
    """
    if is_torch_tensor(x):
        return bool(x.is_cuda)
    if hasattr(type(x), "__cuda_array_interface__") or hasattr(x, "__cuda_array_interface__"):
        return True
    # Under Numba's CUDA simulator its device arrays (marked __cuda_ndarray__, as Numba's
    # real ones are) wrap host arrays and lack the interface. They exist only once
    # numba.cuda is loaded, so it is looked up, never imported (and the common host
    # call pays one dict lookup).
    numba_cuda = sys.modules.get("numba.cuda")
    return (
        numba_cuda is not None
        and bool(numba_cuda.config.ENABLE_CUDASIM)
        and getattr(type(x), "__cuda_ndarray__", False) is True
    )


def backend_of(arrays: Iterable, what: str = "arrays") -> str:
    """``"cuda"`` if every array is on a CUDA device, ``"cpu"`` if none is.

    Raises ``TypeError`` naming the first array of the other kind when device and
    host arrays are mixed in one call: dyntile never copies between them silently.
    """
    kind = None
    first = None
    for i, x in enumerate(arrays):
        k = "cuda" if is_cuda_array(x) else "cpu"
        if kind is None:
            kind, first = k, i
        elif k != kind:
            raise TypeError(
                f"{what} mix CUDA device and host arrays: {what}[{first}] is on the "
                f"{'GPU' if kind == 'cuda' else 'host'} but {what}[{i}] ({type(x).__name__}) is on the "
                f"{'GPU' if k == 'cuda' else 'host'}; move them to one device first"
            )
    return kind or "cpu"
