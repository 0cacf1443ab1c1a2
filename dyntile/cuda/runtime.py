"""Numba runtime glue: the lazy numba import, device-array kinds and allocation.

Only imported on first CUDA use. Converts CUDA torch tensors (and any object with
``__cuda_array_interface__``) to Numba device arrays without copying, allocates
outputs of the caller's kind, and reshapes device arrays into the batched views
the kernels take.
"""

from __future__ import annotations

import math
import sys

import numpy as np

__all__ = [
    "cuda",
    "simulator_active",
    "is_device_array",
    "as_device",
    "allocate",
    "as_batched",
    "contiguous",
    "byte_bounds",
    "bounds_meet",
    "output",
]


def _import_cuda():
    try:
        from numba import cuda as numba_cuda
    except ImportError as exc:  # pragma: no cover - exercised only without numba
        raise ImportError(
            "dyntile got a CUDA array, but its CUDA kernels need numba and numba-cuda: "
            "pip install 'dyntile[cuda]' (or: pip install numba numba-cuda)"
        ) from exc
    return numba_cuda


cuda = _import_cuda()
if cuda.config.ENABLE_CUDASIM:
    from .simulator import make_shared_allocation_atomic

    make_shared_allocation_atomic()  # the simulator's shared arrays, one per block (see .simulator)


def simulator_active() -> bool:
    """True under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba loaded)."""
    return bool(cuda.config.ENABLE_CUDASIM)


def _torch_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_device_array(x) -> bool:
    """True for a Numba device array (real or simulated) or any CUDA array-interface object."""
    if cuda.devicearray.is_cuda_ndarray(x):
        return True
    if _torch_tensor(x):
        return bool(x.is_cuda)
    return hasattr(x, "__cuda_array_interface__")


def as_device(x, name: str = "array"):
    """A Numba device-array view of ``x`` (no copy); ``TypeError`` for host arrays."""
    if cuda.devicearray.is_cuda_ndarray(x):
        return x
    if is_device_array(x):
        return cuda.as_cuda_array(x)
    raise TypeError(
        f"{name} should be a CUDA device array (Numba device array, CUDA torch tensor or an "
        f"object with __cuda_array_interface__), but got {type(x).__name__}"
    )


def allocate(shape, dtype, like=None):
    """Empty device array of ``shape`` and ``dtype``, of the same kind as ``like``.

    Returns ``(user_array, numba_view)``: a torch tensor on ``like``'s device when
    ``like`` is a CUDA torch tensor (written through ``cuda.as_cuda_array``),
    otherwise a Numba device array twice.
    """
    dtype = np.dtype(dtype)
    if like is not None and _torch_tensor(like):
        torch = sys.modules["torch"]
        tdtype = torch.from_numpy(np.empty(0, dtype)).dtype
        t = torch.empty(tuple(shape), dtype=tdtype, device=like.device)
        return t, cuda.as_cuda_array(t)
    d = cuda.device_array(tuple(shape), dtype)
    return d, d


def contiguous(x):
    """``x`` itself if C-contiguous, else a C-contiguous device copy."""
    if x.is_c_contiguous():
        return x
    y = cuda.device_array(x.shape, x.dtype)
    if x.size:
        y[...] = x
    return y


def numpy_dtype(dtype) -> np.dtype:
    """NumPy dtype of a NumPy, Numba or torch dtype (``torch.float32 -> float32``)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        return torch.empty(0, dtype=dtype).numpy().dtype
    return np.dtype(dtype)


def byte_bounds(x) -> tuple[int, int]:
    """``(first, past the last)`` device address of the bytes device array ``x`` (a
    Numba device array, simulated or real, a CUDA torch tensor or an object with
    ``__cuda_array_interface__``) can reach: ``(p, p)`` for an empty one."""
    if _torch_tensor(x):
        ptr, shape, itemsize = x.data_ptr(), tuple(x.shape), x.element_size()
        strides = tuple(st * itemsize for st in x.stride())
    elif simulator_active() and hasattr(x, "_ary"):  # a simulated device array wraps a host array
        return tuple(int(v) for v in np.lib.array_utils.byte_bounds(x._ary))
    else:
        face = x.__cuda_array_interface__
        ptr, shape, itemsize = int(face["data"][0]), tuple(face["shape"]), np.dtype(face["typestr"]).itemsize
        strides = face.get("strides") or tuple(
            itemsize * math.prod(shape[k + 1 :]) for k in range(len(shape))
        )
    if math.prod(shape) == 0:
        return ptr, ptr
    lo = ptr + sum(min(0, (n - 1) * st) for n, st in zip(shape, strides))
    hi = ptr + sum(max(0, (n - 1) * st) for n, st in zip(shape, strides)) + itemsize
    return lo, hi


def output(
    out, out_shape: tuple, dtype, like=None, what: str = "the result", inputs: tuple = (), name: str = "out"
):
    """``(result, device view)`` to write a result of ``out_shape``/``dtype`` into: the
    user's ``out`` (checked, and refused where its bytes meet those of a device array of
    ``inputs``: the kernels read their inputs while they write) or a fresh allocation
    of ``like``'s kind. ``name``: what errors call the argument."""
    if out is None:
        return allocate(out_shape, dtype, like)
    dest = as_device(out, name)
    if tuple(dest.shape) != tuple(
        out_shape
    ):  # NumPy's kinds: a wrong shape ValueError, a wrong dtype TypeError
        raise ValueError(
            f"{name} should have shape {tuple(out_shape)} for {what}, but got {tuple(dest.shape)}"
        )
    if numpy_dtype(dest.dtype) != dtype:
        raise TypeError(f"{name} should have dtype {dtype} for {what}, but got {numpy_dtype(dest.dtype)}")
    if bounds_meet(dest, inputs):
        raise ValueError(
            f"{name} overlaps an input in device memory; {what} cannot be written over "
            f"its inputs (pass a separate {name})"
        )
    return out, dest


def bounds_meet(x, others) -> bool:
    """Whether the device bytes of ``x`` (:func:`byte_bounds`) meet those of any of
    ``others``: conservative, as views that interleave without sharing an element meet."""
    lo, hi = byte_bounds(x)
    return any(lo < o_hi and o_lo < hi for o_lo, o_hi in map(byte_bounds, others))


def as_batched(x, tail: int):
    """View device array ``x`` of shape ``(..., *core)`` (``core``: its last ``tail``
    axes) as ``(prod(...), *core)``, copying only a non-contiguous array (Numba
    reshapes C-contiguous device arrays only): ``(2, 3, 4, 5)`` with ``tail=2`` gives
    ``(6, 4, 5)`` and ``(4, 5)`` gives ``(1, 4, 5)``.
    """
    lead = x.shape[: x.ndim - tail]
    core = x.shape[x.ndim - tail :]
    if len(lead) == 1:
        return x
    new_shape = (math.prod(lead), *core)
    if x.size == 0:
        return cuda.device_array(new_shape, x.dtype)
    # Numba device arrays reshape only when C-contiguous; anything else is copied first
    return contiguous(x).reshape(new_shape)
