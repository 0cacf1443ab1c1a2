"""The samples of a padding call as NumPy sees them: the general reading of any batch.

:func:`normalize` converts every sample (NumPy arrays, CPU torch tensors, lists of
numbers, mixed) to a NumPy array of one rank and dtype, promoting as
:mod:`dyntile.dtypes` says and naming the sample it cannot take. The fast routes of
:mod:`dyntile.padding` read their kinds natively; every other batch is read here.
"""

from __future__ import annotations

import sys

import numpy as np

from dyntile.arrays import as_numpy, memory_view
from dyntile.dispatch import is_torch_tensor
from dyntile.dtypes import check_round_trip, promote_samples

__all__ = ["as_sample_list", "check_side", "memory_of", "normalize"]

#: ``side`` -> left (the cheap check of a valid side; :func:`check_side` explains others)
SIDES = {"right": False, "left": True}


def check_side(side) -> bool:
    """``True`` for ``"left"``, ``False`` for ``"right"``; ``ValueError`` for anything else."""
    if side not in ("right", "left"):
        raise ValueError(f"side should be 'right' or 'left', but got {side!r}")
    return side == "left"


def as_sample_list(arrays) -> list:
    """``arrays`` as a list (a list passes as is); ``TypeError`` for a non-sequence."""
    if isinstance(arrays, list):
        return arrays
    if isinstance(arrays, (str, bytes)) or not hasattr(arrays, "__len__") and not hasattr(arrays, "__iter__"):
        raise TypeError(f"arrays should be a sequence of arrays, but got {type(arrays).__name__}")
    return list(arrays)


def normalize(samples: list, dtype, promote: bool = True):
    """Every sample as a NumPy array of one rank and dtype (the general reading).

    Returns ``(arrays, shapes, dtype, torch_like, token)``; raises naming the sample.
    """
    arrays, strong, weak = [], [], []
    torch_like = False
    token = None
    ndim = None
    first_kind = None  # promote=False: (index, kind) of the first tensor or array
    for i, x in enumerate(samples):
        is_t = is_torch_tensor(x)
        if not promote and dtype is None and (is_t or isinstance(x, np.ndarray)):
            kind = "a torch tensor" if is_t else "a NumPy array"
            if first_kind is None:
                first_kind = (i, kind)
            elif kind != first_kind[1]:
                raise TypeError(
                    f"sample {i} is {kind}, but sample {first_kind[0]} is {first_kind[1]}; "
                    f"promote=False needs one kind (lists of numbers may join either)"
                )
        a, tok = as_numpy(x, what=f"sample {i}")
        if tok is not None and dtype is not None:  # bfloat16 bits to dtype=: torch casts the values
            a, tok = _cast_torch_only(x, tok, np.dtype(dtype), i), None
        if is_t:
            if torch_like and tok != token:
                raise TypeError(
                    f"sample {i} has torch dtype {x.dtype}, which NumPy cannot promote with "
                    f"the torch samples before it; cast them to one dtype"
                )
            torch_like, token = True, tok
        if a.ndim == 0:
            raise ValueError(
                f"sample {i} is a scalar (0-d, value {a.item()!r}); samples are arrays of "
                f"at least 1 dimension (use numpy.stack for scalars)"
            )
        if ndim is None:
            ndim = a.ndim
        elif a.ndim != ndim:
            raise ValueError(
                f"all samples should have the same number of dimensions, but sample 0 has "
                f"{ndim} and sample {i} has {a.ndim} (shape {a.shape})"
            )
        if a.dtype.byteorder not in "=|":
            a = a.astype(a.dtype.newbyteorder("="))
        if isinstance(x, (list, tuple)):
            weak.append((i, a))  # Python numbers: weakly typed, must fit the batch dtype
        else:
            strong.append((i, a.dtype))
        arrays.append(a)
    if not promote and dtype is None and len({d for _, d in strong}) > 1:
        i, d = next((i, d) for i, d in strong if d != strong[0][1])
        j = strong[0][0]
        raise TypeError(
            f"sample {i} has dtype {samples[i].dtype}, but sample {j} has {samples[j].dtype}; "
            f"promote=False needs one dtype (cast the samples, or pass dtype=)"
        )
    if token is not None and dtype is None:  # the batch carries bfloat16 (float8) as integer bits
        _join_torch_only(samples, arrays, weak, token)
        strong, weak = strong + [(i, arrays[i].dtype) for i, _ in weak], []
    dt = promote_samples(strong, weak, dtype)
    arrays = [a if a.dtype == dt else a.astype(dt, casting="unsafe") for a in arrays]
    shapes = np.array([a.shape for a in arrays], dtype=np.int64).reshape(len(arrays), ndim)
    return arrays, shapes, dt, torch_like, token


def memory_of(samples: list) -> tuple:
    """NumPy views of the memory of the array samples (lists have none of the user's)."""
    return tuple(memory_view(x) for x in samples if isinstance(x, np.ndarray) or is_torch_tensor(x))


def _cast_torch_only(x, token, dtype: np.dtype, i: int) -> np.ndarray:
    """Sample ``i``, a tensor of a dtype NumPy lacks (``token``: bfloat16, float8),
    cast by torch to ``dtype`` (same_kind: floats and complex)."""
    if dtype.kind not in "fc":
        raise TypeError(
            f"sample {i} has dtype {token}, which cannot be cast to dtype={dtype} (same_kind casting)"
        )
    torch = sys.modules["torch"]
    return x.detach().to(torch.from_numpy(np.empty(0, dtype)).dtype).numpy()


def _join_torch_only(samples: list, arrays: list, weak: list, token) -> None:
    """A batch of ``token`` tensors (bfloat16, float8: their values travel as integer
    bits, which NumPy would promote as integers): lists of numbers become those bits
    when ``token`` holds their values exactly (``TypeError`` naming the list if not);
    NumPy arrays cannot join (``TypeError``: NumPy has no such dtype to promote with)."""
    torch = sys.modules["torch"]
    first = next(i for i, x in enumerate(samples) if is_torch_tensor(x))
    i = next((i for i, x in enumerate(samples) if isinstance(x, np.ndarray)), None)
    if i is not None:
        raise TypeError(
            f"sample {i} is a NumPy {samples[i].dtype} array, but sample {first} is a {token} "
            f"tensor, which NumPy cannot promote with; cast them to one dtype (or pass dtype=)"
        )
    bits = torch.from_numpy(arrays[first][:0]).dtype
    for i, a in weak:
        values = torch.from_numpy(np.ascontiguousarray(a))
        cast = values.to(token)
        check_round_trip(a, cast.to(values.dtype).numpy(), token, f"sample {i} (a list)")
        arrays[i] = cast.view(bits).numpy()
