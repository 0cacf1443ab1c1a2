"""Host array conversion: NumPy arrays, Python lists and CPU torch tensors.

The API accepts these interchangeably and returns the kind it was given where that
is natural (torch in -> torch out). torch is never imported here; a tensor is
recognised by :func:`dyntile.dispatch.is_torch_tensor`. Tensors whose dtype NumPy
lacks (bfloat16, float8) travel as same-width unsigned integers: the copy kernels
only move bits, so they need no arithmetic on them.
"""

from __future__ import annotations

import sys

import numpy as np

from dyntile.dispatch import is_torch_tensor

__all__ = [
    "as_numpy",
    "check_host_tensor",
    "check_out",
    "check_out_grad",
    "wrap_like",
    "torch_dtype_token",
    "torch_numpy_dtype",
    "numpy_carrier",
    "torch_fill_bits",
    "bit_view",
    "bit_out",
    "carrier_fill",
]

_BIT_VIEWS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


_TORCH_ONLY: dict = {}  # torch dtype -> whether NumPy lacks it


def torch_dtype_token(t):
    """The torch dtype of ``t`` if NumPy has no equivalent (e.g. bfloat16), else ``None``."""
    dtype = t.dtype
    only = _TORCH_ONLY.get(dtype)
    if only is None:
        only = _TORCH_ONLY[dtype] = dtype == sys.modules["torch"].bfloat16 or "float8" in str(dtype)
    return dtype if only else None


_NUMPY_OF_TORCH: dict = {}


def torch_numpy_dtype(torch_dtype):
    """``(numpy dtype, token)`` that carries a torch dtype: the NumPy twin, or for
    bfloat16/float8 a same-width integer and the torch dtype as ``token``."""
    hit = _NUMPY_OF_TORCH.get(torch_dtype)
    if hit is None:
        torch = sys.modules["torch"]
        t, token = bit_view(torch.empty(0, dtype=torch_dtype))
        hit = _NUMPY_OF_TORCH[torch_dtype] = (t.numpy().dtype, token)
    return hit


def numpy_carrier(torch_dtype):
    """:func:`torch_numpy_dtype` of ``torch_dtype``, or ``None`` for a dtype NumPy cannot
    carry (quantized, sub-byte); both answers are kept, so a batch asks once per dtype.

    >>> import torch
    >>> numpy_carrier(torch.bfloat16)[1], numpy_carrier(torch.uint3)
    (torch.bfloat16, None)
    """
    hit = _CARRIER.get(torch_dtype, _CARRIER)
    if hit is _CARRIER:
        try:
            hit = torch_numpy_dtype(torch_dtype)
        except (TypeError, ValueError, RuntimeError):
            hit = None
        _CARRIER[torch_dtype] = hit
    return hit


_CARRIER: dict = {}


def torch_fill_bits(fill, token) -> int:
    """Bit pattern of ``fill`` in a torch-only float dtype ``token`` (e.g. bfloat16)."""
    import math

    torch = sys.modules["torch"]
    if isinstance(fill, (str, bytes, complex)) or (isinstance(fill, np.generic) and np.iscomplexobj(fill)):
        raise TypeError(f"fill should be a real number, but got {fill!r} of type {type(fill).__name__}")
    try:
        f = float(fill)
    except OverflowError:
        raise ValueError(f"fill={fill!r} overflows {token}") from None
    except (TypeError, ValueError):
        raise TypeError(
            f"fill should be a real number, but got {fill!r} of type {type(fill).__name__}"
        ) from None
    t = torch.tensor(f, dtype=torch.float64).to(token)
    stored = float(t)
    # torch saturates some float8 types (1000 -> 448, inf -> 448): compare with the value that rounds past
    # the largest finite one (max + half its ulp; ulp(max) = eps * 2**emax, 2**emax = max / (2 - eps))
    info = torch.finfo(token)
    past = info.max + info.eps * info.max / (2 - info.eps) / 2
    if math.isfinite(f) and (not math.isfinite(stored) or abs(f) >= past):
        raise ValueError(f"fill={fill!r} overflows {token} (max {info.max})")
    if math.isinf(f) and not math.isinf(stored):
        raise ValueError(f"fill={fill!r} cannot be stored in {token}: it has no infinity")
    from dyntile.fill import check_integral_exact

    check_integral_exact(fill, stored, str(token).removeprefix("torch."))
    width = t.element_size()
    bits = int(t.view(getattr(torch, _BIT_VIEWS[width])).item())
    return bits & ((1 << (8 * width)) - 1)


def bit_view(t):
    """``(view, token)``: a torch tensor (on any device) of a dtype NumPy lacks
    (bfloat16, float8) seen as the same-width integers that carry its bits, and that
    dtype; any other array and ``None``. The copy kernels move bits, so they pad and
    tile the view; ``view.view(token)`` restores the dtype."""
    if not is_torch_tensor(t):
        return t, None
    token = torch_dtype_token(t)
    if token is None:
        return t, None
    return t.view(getattr(sys.modules["torch"], _BIT_VIEWS[t.element_size()])), token


def bit_out(out, token, what: str = "the result"):
    """The carrier view (:func:`bit_view`) of a user's ``out=`` for a result of the
    torch-only dtype ``token``, or ``None`` for none; ``TypeError`` unless ``out`` is a
    torch tensor of that dtype."""
    if out is None:
        return None
    if not is_torch_tensor(out) or out.dtype != token:
        raise TypeError(
            f"out should be a torch tensor of dtype {token} for {what}, but got "
            f"{getattr(out, 'dtype', type(out).__name__)}"
        )
    return bit_view(out)[0]


def carrier_fill(fill, token) -> int:
    """``fill`` in ``token`` (a torch-only dtype) as the value of its carrier integer
    (:func:`bit_view`): the bit pattern read as a signed integer of that width (uint8
    for one byte). Raises as :func:`torch_fill_bits` does for a fill it cannot hold."""
    width = token.itemsize
    return int(np.array(torch_fill_bits(fill, token), f"u{width}").view(_BIT_VIEWS[width])[()])


def check_host_tensor(x, what: str) -> None:
    """``TypeError`` naming ``what`` unless the torch tensor ``x`` is a dense CPU tensor
    (one whose memory NumPy can view)."""
    if x.is_cuda:
        raise TypeError(f"{what} is a CUDA tensor; use CUDA arrays for every input of the call")
    if not x.is_cpu:
        raise TypeError(
            f"{what} is a tensor on device {x.device.type!r}; dyntile takes CPU tensors, "
            f"NumPy arrays and CUDA arrays"
        )
    if x.layout != sys.modules["torch"].strided:
        raise TypeError(
            f"{what} is a {x.layout} tensor; only dense (strided) tensors are accepted "
            f"(x.to_dense() makes one)"
        )


def as_numpy(x, what: str = "array"):
    """View ``x`` as a NumPy array without copying where possible.

    Returns ``(array, token)``; ``token`` is ``None`` or the torch dtype to restore
    with :func:`wrap_like` (bfloat16 and friends travel as integer bit patterns).
    """
    if type(x) is np.ndarray:
        return x, None
    if is_torch_tensor(x):
        check_host_tensor(x, what)
        x, token = bit_view(x.detach())
        return x.resolve_conj().resolve_neg().numpy(), token
    if isinstance(x, np.ndarray):  # subclasses (masked arrays...) lose their subclass
        return np.asarray(x), None
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise TypeError(f"{what} could not be read as a numeric array: {e}") from None
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise TypeError(
            f"{what} is not a numeric array (it converts to dtype=object, e.g. a ragged nested "
            f"list or non-numbers); pass NumPy arrays, torch tensors or flat lists of numbers"
        )
    if arr.dtype.kind == "f" and isinstance(x, (list, tuple)):
        rounded = _int_float64_rounds(x)
        if rounded is not None:
            raise TypeError(
                f"{what} is a list of integers with one past int64, which NumPy reads as float64, "
                f"and float64 cannot store {rounded!r} exactly; pass an array of the integer dtype "
                f"meant (e.g. np.asarray(x, dtype=np.uint64))"
            )
    return arr, None


def _int_float64_rounds(x):
    """When every leaf of the nested list ``x`` is an integer (so that NumPy read it as
    float64 for an integer past int64), an integer of it that float64 rounds; else
    ``None``. A list of floats answers at its first float.

    >>> _int_float64_rounds([[1, 2**63 + 5], [3]]), _int_float64_rounds([2**63, 1])
    (9223372036854775813, None)
    >>> _int_float64_rounds([2**63 + 5, 0.5]) is None
    True
    """
    rounded, stack = None, [x]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, (int, np.integer)):  # bool is an int
            if rounded is None and int(float(v)) != int(v):
                rounded = v
        else:
            return None
    return rounded


def overlaps(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether ``x`` and ``y`` share an element in memory (exactly where NumPy can
    tell within a small budget; else, conservatively, True when their bounds meet)."""
    if not np.may_share_memory(x, y):
        return False
    try:
        return bool(np.shares_memory(x, y, max_work=1 << 16))
    except np.exceptions.TooHardError:
        return True


def memory_view(x) -> np.ndarray:
    """A NumPy view of the memory of ``x`` (a NumPy array, or a CPU tensor: conjugate
    and negative bits dropped, dtypes NumPy lacks seen as integers of their width),
    for overlap checks; never a copy."""
    if not is_torch_tensor(x):
        return np.asarray(x)
    if x.is_conj():
        x = x.conj()  # a view without the bit, same memory
    if x.is_neg():
        x = x._neg_view()
    return bit_view(x)[0].detach().numpy()


def wrap_like(result: np.ndarray, torch_like: bool, token=None):
    """Return ``result`` as a torch tensor (sharing memory) when the input was torch."""
    if not torch_like:
        return result
    torch = sys.modules["torch"]
    t = torch.from_numpy(result)
    return t.view(token) if token is not None else t


def check_out_grad(out) -> None:
    """``TypeError`` for a torch ``out=`` that requires grad: the kernels write it in
    place, which autograd would not see (as ``matmul`` and torch's own ``out=`` refuse)."""
    if is_torch_tensor(out) and out.requires_grad:
        raise TypeError(
            "out requires grad; dyntile writes out in place without recording autograd, so pass "
            "out.detach() (or a tensor that does not require grad)"
        )


def check_out(
    out, shape: tuple, dtype: np.dtype, what: str = "the result", token=None, inputs: tuple = ()
) -> np.ndarray:
    """The NumPy view of a user's ``out=`` (NumPy array or CPU torch tensor), checked
    for shape, dtype and writability the way NumPy checks ``out`` arguments, and for
    overlap with the NumPy views ``inputs`` (the kernels do not buffer). ``token``: the
    result's torch-only dtype (bfloat16...), which ``dtype`` carries as integers."""
    out_token = None
    if is_torch_tensor(out):
        check_out_grad(out)
        if out.is_conj() or out.is_neg():
            raise ValueError(
                "out is a conjugate or negative view, whose memory holds other values than it "
                "shows; pass a tensor without the bit (e.g. torch.empty_like(out))"
            )
        arr, out_token = as_numpy(out, what="out")
    elif isinstance(out, np.ndarray):
        arr = out
    else:
        raise TypeError(f"out should be a NumPy array or torch tensor, but got {type(out).__name__}")
    if arr.shape != tuple(shape):
        raise ValueError(f"out has shape {arr.shape}, but {what} has shape {tuple(shape)}")
    if arr.dtype != dtype or out_token != token:
        have = out.dtype if is_torch_tensor(out) and (out_token or token) else arr.dtype
        raise TypeError(f"out has dtype {have}, but {what} has dtype {token or dtype}")
    for x in inputs:
        if overlaps(arr, x):
            raise ValueError(
                f"out overlaps an input in memory; {what} cannot be written over its data "
                f"(pass a separate out)"
            )
    if not arr.flags.writeable:
        raise ValueError("out is read-only")
    return arr
