"""The CUDA route of :func:`dyntile.padding.pad_batch`: shapes and dtypes checked on the
host, then one device kernel (:func:`dyntile.cuda.pad_into`).

It takes CUDA arrays and tensors, and host arrays with ``device="cuda"`` (one
host-to-device transfer into the batch). Device kernels do not promote: every
sample needs the batch dtype. Torch tensors of a dtype NumPy lacks (bfloat16,
float8) are padded as their integer bits (:func:`dyntile.arrays.bit_view`) and the
batch viewed back. The inputs are checked before the machine: a call's mistakes are
named on a host without CUDA too.
"""

from __future__ import annotations

import numpy as np

from dyntile.arrays import bit_out, bit_view, carrier_fill, check_out_grad
from dyntile.dispatch import is_torch_tensor
from dyntile.fill import check_fill
from dyntile.padding_shape import target_shape

__all__ = ["pad_cuda"]


def pad_cuda(req, read=None) -> tuple:
    """``(batch, lengths)`` of ``req.samples`` padded on the GPU."""
    check_out_grad(req.out)
    token = next(filter(None, (bit_view(x)[1] for x in req.samples)), None)  # bfloat16, float8 tensors
    if token is None:
        return _pad_device(req, req.samples, req.fill, req.dtype, req.out)
    _check_bits(req, token)
    carried = [bit_view(x)[0] for x in req.samples]
    fill = carrier_fill(req.fill, token)
    batch, lengths = _pad_device(req, carried, fill, None, bit_out(req.out, token, "this batch"))
    return (req.out if req.out is not None else batch.view(token)), lengths


def _check_bits(req, token) -> None:
    """``TypeError`` unless every sample is a CUDA tensor of the torch-only dtype
    ``token`` and ``dtype=`` keeps it (a Numba device array cannot hold it)."""
    for i, x in enumerate(req.samples):
        if not is_torch_tensor(x) or x.dtype != token:
            raise TypeError(
                f"on the GPU every sample needs dtype {token}, but sample {i} has "
                f"{getattr(x, 'dtype', type(x).__name__)}; cast them first (device kernels do not promote)"
            )
        if not x.is_cuda:
            raise TypeError(
                f"device='cuda' pads host arrays into a Numba device array, which cannot hold {token}; "
                f"move the tensors to the GPU (tensor.cuda()) and pad them there"
            )
    if req.dtype is not None and req.dtype != token:
        raise TypeError(
            f"on the GPU the batch keeps the samples' dtype {token}, but got dtype={req.dtype}; "
            f"cast the samples first (device kernels do not promote)"
        )


def _pad_device(req, samples: list, fill, dtype, out) -> tuple:
    """One device kernel for ``samples`` of one NumPy dtype (``dtype``: the batch's,
    default the first sample's), the other options as ``req`` asks."""
    from dyntile import cuda as _cuda  # imports numba only now

    shapes, dt = _shapes_and_dtype(samples, dtype)
    target = (len(samples),) + target_shape(shapes, req.multiple, req.axes, req.shape, req.plan)
    bits = check_fill(fill, dt).item()
    if req.device == "cuda":
        require_cuda()
    batch = _cuda.pad_into(samples, target, dt, bits, req.left, out=out)
    return batch, (shapes.ravel() if shapes.shape[1] == 1 else shapes)


def _shapes_and_dtype(samples: list, dtype) -> tuple:
    """``(shapes (B, d) int64, dtype)``: ``TypeError``/``ValueError`` naming the sample
    that is no array, has another rank, or another dtype than the batch's."""
    from dyntile import cuda as _cuda

    shapes_list, dts = [], []
    for i, x in enumerate(samples):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(
                f"sample {i} ({type(x).__name__}) is not an array; with device='cuda' pass "
                f"NumPy or device arrays"
            )
        shapes_list.append(tuple(int(s) for s in x.shape))
        dts.append(_cuda.numpy_dtype(x.dtype))
    if len({len(s) for s in shapes_list}) != 1:
        i = next(i for i, s in enumerate(shapes_list) if len(s) != len(shapes_list[0]))
        raise ValueError(
            f"all samples should have the same number of dimensions, but sample 0 has shape "
            f"{shapes_list[0]} and sample {i} has {shapes_list[i]}"
        )
    if len(shapes_list[0]) == 0:
        raise ValueError("sample 0 is a scalar (0-d); pad_batch pads arrays of at least 1 dimension")
    dt = np.dtype(dtype) if dtype is not None else dts[0]
    for i, d in enumerate(dts):
        if d != dt:
            raise TypeError(
                f"on the GPU every sample needs dtype {dt}, but sample {i} has {d}; "
                f"cast them first (device kernels do not promote)"
            )
    return np.array(shapes_list, dtype=np.int64), dt


def require_cuda() -> None:
    """``RuntimeError`` saying so when ``device='cuda'`` was asked for on a machine without CUDA."""
    from numba import cuda

    if not cuda.is_available():
        raise RuntimeError(
            "device='cuda' needs a CUDA GPU and driver, which this machine lacks "
            "(numba.cuda.is_available() is False); pad on the host with device=None"
        )
