"""Padding API: a ragged list of arrays -> one dense, padded batch.

``pad_batch`` validates the samples, plans the padded shape (rounded to a layout
multiple, or to a bucket plan's boundary), allocates the output once and runs one
copy kernel (:mod:`dyntile.cpu.pad` on the host, :mod:`dyntile.cuda` on the GPU).
Nothing is ever cut: a target smaller than the data is an error.
"""

from __future__ import annotations

import bisect
import operator
import sys
from collections.abc import Sequence

import numpy as np

from dyntile import shapes as _shapes
from dyntile import tensor_reader
from dyntile.arrays import (
    as_numpy,
    bit_out,
    bit_view,
    carrier_fill,
    check_out,
    check_out_grad,
    memory_view,
    torch_numpy_dtype,
    wrap_like,
)
from dyntile.cpu import number_lists as _number_lists
from dyntile.cpu import pad as _pad
from dyntile.dispatch import backend_of, is_torch_tensor
from dyntile.dtypes import check_round_trip, promote_samples
from dyntile.fill import check_fill, fill_bits, fill_key, kernel_fill_bits
from dyntile.planning.buckets import BucketPlan
from dyntile.threads import copy_threads

# the native row helpers are shared with loaders' collates, not part of the top-level API
__all__ = ["pad_batch", "pad_to", "pad_rows", "native_row_dtype", "native_row_layout"]


_SIDES = {"right": False, "left": True}


def _check_side(side) -> bool:
    if side not in ("right", "left"):
        raise ValueError(f"side should be 'right' or 'left', but got {side!r}")
    return side == "left"


def check_plan(plan) -> None:
    """``TypeError`` unless ``plan`` (not ``None``) is a
    :class:`~dyntile.planning.buckets.BucketPlan`, or an object with its ``ndim`` and
    ``round_up`` (all the general path uses; the one-call row routes take only
    BucketPlans and leave other plans to it)."""
    if type(plan) is BucketPlan or hasattr(plan, "round_up") and hasattr(plan, "ndim"):
        return
    hint = ""
    if isinstance(plan, (tuple, list)) and plan and all(isinstance(b, int) for b in plan):
        hint = f"; for the boundaries {tuple(plan)} pass plan=BucketPlan({tuple(plan)})"
    text = repr(plan)
    raise TypeError(
        f"plan should be a dyntile BucketPlan (BucketPlan(boundaries), or dyntile.plan_buckets(lengths)), "
        f"but got {type(plan).__name__} {text if len(text) <= 60 else text[:57] + '...'}{hint}"
    )


def _as_list(arrays) -> list:
    if isinstance(arrays, list):
        return arrays
    if isinstance(arrays, (str, bytes)) or not hasattr(arrays, "__len__") and not hasattr(arrays, "__iter__"):
        raise TypeError(f"arrays should be a sequence of arrays, but got {type(arrays).__name__}")
    return list(arrays)


def _normalize(samples: list, dtype, promote: bool = True):
    """Slow path: convert every sample to a NumPy array of one rank and dtype.

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


def _memory_of(samples: list) -> tuple:
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


def _shape(shapes: np.ndarray, i: int) -> tuple[int, ...]:
    return tuple(int(v) for v in shapes[i])


def _ragged_axes(shapes: np.ndarray, axes, plan) -> list[int]:
    ndim = shapes.shape[1]
    if axes is not None:
        axes = [axes] if np.ndim(axes) == 0 else list(axes)
        axes = [_shapes.normalize_axis(a, ndim) for a in axes]
        if len(set(axes)) != len(axes):
            raise ValueError(f"axes should not repeat an axis, but got {axes}")
        return axes
    if plan is not None:
        if plan.ndim > ndim:
            raise ValueError(f"the plan covers {plan.ndim} axes but samples have {ndim} dimensions")
        return list(range(plan.ndim))
    if ndim == 1:
        return [0]
    return [int(a) for a in np.flatnonzero(shapes.min(axis=0) != shapes.max(axis=0))]


def _target_shape(shapes: np.ndarray, multiple, axes, shape, plan) -> tuple[int, ...]:
    """Per-sample padded shape for a batch whose sample shapes are ``shapes`` (B, ndim)."""
    ndim = shapes.shape[1]
    if ndim == 1 and shape is None and plan is None and axes is None:  # the common case, kept cheap
        return (-(-int(shapes.max()) // _shapes.check_multiple(multiple)) * int(multiple),)
    maxes = shapes.max(axis=0)
    if shape is not None:
        if plan is not None:
            raise ValueError("pass either shape= or plan=, not both")
        target = _shapes.check_shape(shape)
        if len(target) != ndim:
            raise ValueError(f"shape={target} has {len(target)} dimensions but samples have {ndim}")
        over = np.flatnonzero(maxes > np.array(target))
        if over.size:
            a = int(over[0])
            i = int(np.argmax(shapes[:, a]))
            raise ValueError(
                f"sample {i} has shape {_shape(shapes, i)}, larger than shape={target} along "
                f"axis {a}; pad_batch never cuts data (slice the sample first)"
            )
        return target
    m = _shapes.check_multiple(multiple)
    ragged = _ragged_axes(shapes, axes, plan)
    target = [int(v) for v in shapes[0]]
    for a in set(range(ndim)) - set(ragged):
        differ = np.flatnonzero(shapes[:, a] != shapes[0, a])
        if differ.size:
            i = int(differ[0])
            raise ValueError(
                f"samples differ along axis {a}, which is not padded (axes={ragged}): sample 0 has "
                f"shape {_shape(shapes, 0)} and sample {i} has {_shape(shapes, i)}; pass axes= to pad it"
            )
    if plan is not None:
        if len(ragged) != plan.ndim:
            raise ValueError(f"the plan covers {plan.ndim} axes but axes={ragged} names {len(ragged)}")
        padded = plan.round_up(tuple(int(maxes[a]) for a in ragged))
        for a, p in zip(ragged, padded):
            target[a] = int(p)
    else:
        for a in ragged:
            target[a] = -(-int(maxes[a]) // m) * m
    return tuple(target)


def _copy_batch(arrays: list, out: np.ndarray, fill, left: bool, token=None) -> None:
    """Run the copy kernel (or the NumPy fallback for dtypes it does not move)."""
    dt = out.dtype
    bits = kernel_fill_bits(fill, dt, token)
    if bits is not None:
        if out.flags.c_contiguous:
            _pad.pad_into(arrays, out, bits, left, copy_threads(out.nbytes))
        else:
            tmp = np.empty(out.shape, dt)
            _pad.pad_into(arrays, tmp, bits, left, copy_threads(out.nbytes))
            out[...] = tmp
        return
    out[...] = check_fill(fill, dt)
    for b, a in enumerate(arrays):
        if left:
            index = (b,) + tuple(slice(S - s, S) for S, s in zip(out.shape[1:], a.shape))
        else:
            index = (b,) + tuple(slice(0, s) for s in a.shape)
        out[index] = a


def pad_batch(
    arrays: Sequence,
    *,
    multiple: int = 8,
    axes=None,
    shape=None,
    plan=None,
    fill=0,
    side: str = "right",
    dtype=None,
    promote: bool = True,
    out=None,
    device: str | None = None,
):
    """Pad a ragged list of arrays into one dense batch.

    Parameters
    ----------
    arrays : sequence of B arrays of one rank ``d >= 1``
        NumPy arrays, CPU torch tensors, lists of numbers, or CUDA device arrays.
        Lists are weakly typed: bool, int64 or float64 by their values (as
        ``numpy.asarray`` reads them; an empty list has no type), and beside arrays
        they take the arrays' dtype if it holds their values exactly.
    multiple : int
        Each padded axis goes to the batch maximum rounded up to this multiple.
    axes : int or sequence of int, optional
        The axes to pad. Default: axis 0 for 1-D samples; for N-D samples, the axes
        whose sizes differ in this batch (or the first ``plan.ndim`` axes with a plan).
        Every other axis must have one size across the batch.
    shape : tuple, optional
        Explicit per-sample target shape (``multiple``/``axes`` ignored). Never cuts.
    plan : BucketPlan, optional
        Pad each ragged axis to its bucket boundary (``plan.round_up``).
    fill : scalar
        Value written in the padding; must be storable in the dtype (no NaN in ints).
    side : {"right", "left"}
        Where padding goes along each padded axis ("left": data at the end).
    dtype : dtype, optional
        Output dtype (samples cast with ``same_kind``). Default: the samples' common
        dtype; mixed dtypes must promote without rounding (datetimes and timedeltas
        join only their own unit, records their own layout; see :mod:`dyntile.dtypes`).
    promote : bool
        ``False``: array samples of different dtypes, or torch tensors beside NumPy
        arrays, raise ``TypeError`` naming the sample instead of promoting (lists of
        numbers still take the batch dtype).
    out : array, optional
        Destination of shape ``(B, *padded)`` and the batch dtype (a tensor that does
        not require grad: it is written in place).
    device : "cuda" or "cpu", optional
        ``"cuda"``: pad host arrays straight into a CUDA buffer (one host-to-device
        transfer); ``"cpu"`` (as ``None``): on the host, unless the samples are CUDA arrays.

    Returns
    -------
    batch : ``(B, *padded)`` array of the input kind (torch in, torch out).
    lengths : int64 ``(B,)`` for 1-D samples, else ``(B, d)``: each sample's size along every axis.

    >>> batch, lengths = pad_batch([np.arange(3), np.arange(5)], multiple=4)
    >>> batch
    array([[0, 1, 2, 0, 0, 0, 0, 0],
           [0, 1, 2, 3, 4, 0, 0, 0]])
    >>> lengths
    array([3, 5])
    """
    left = _check_side(side)
    if plan is not None:
        check_plan(plan)
    samples = _as_list(arrays)
    if not samples:
        raise ValueError("pad_batch needs at least one array, but got an empty sequence")
    if device == "cpu":  # the host: what None means
        device = None
    if (
        axes is None
        and shape is None
        and out is None
        and dtype is None
        and device is None
        and type(samples[0]) is not np.ndarray
        and is_torch_tensor(samples[0])
    ):
        rows = _pad_token_rows(samples, multiple, plan, fill, left)
        if rows is not None:
            return rows[0], sys.modules["torch"].from_numpy(rows[1])
    if type(samples[0]) is list and dtype is None and device is None:
        rows = _pad_number_lists(samples, multiple, axes, shape, plan, fill, left, out)
        if rows is not None:
            return rows[0], rows[1]
    shapes, dt, bad = _pad.describe(samples)
    torch_like, token = False, None
    if (
        bad == -1
        and dt is not None
        and (dtype is None or np.dtype(dtype) == dt)
        and device is None
        and shapes.shape[1] > 0
    ):
        host = samples  # fast path: native-order ndarrays of one rank and dtype
    elif (
        bad == 0
        and dtype is None
        and device is None
        and is_torch_tensor(samples[0])
        and not samples[0].is_cuda
    ):
        result = _pad_tensors(samples, multiple, axes, shape, plan, fill, left, out)
        if result is not None:
            return result
        host, shapes, dt, torch_like, token = _normalize(samples, dtype, promote)
    else:
        if device is not None and device != "cuda":
            raise ValueError(f"device should be None, 'cpu' or 'cuda', but got {device!r}")
        if device == "cuda":
            _require_cuda()
        if device == "cuda" or backend_of(samples, what="arrays") == "cuda":
            return _pad_cuda(samples, multiple, axes, shape, plan, fill, left, dtype, out)
        host, shapes, dt, torch_like, token = _normalize(samples, dtype, promote)
    if dt.kind in "US":  # a fill of 0 would become the string '0'
        i = next((i for i, x in enumerate(samples) if getattr(x, "dtype", dt) == dt), 0)
        raise TypeError(
            f"sample {i} has dtype {dt}; pad_batch pads numbers (bool, integer, float, complex, "
            f"datetime) and records, not strings"
        )
    target = (len(host),) + _target_shape(shapes, multiple, axes, shape, plan)
    dest = None if out is None else check_out(out, target, dt, "this batch", token, _memory_of(samples))
    if dest is None:
        dest = np.empty(target, dt)
    _copy_batch(host, dest, fill, left, token)
    lengths = shapes[:, 0].copy() if shapes.shape[1] == 1 else shapes
    if out is not None:
        result = out
    else:
        result = wrap_like(dest, torch_like, token)
    if torch_like:
        lengths = wrap_like(lengths, True)
    return result, lengths


def _tensors_near(out, samples: list, ptrs, shapes, strides, width: int) -> tuple:
    """:func:`_memory_of` for the tensors whose bytes (from their pointers, sizes and
    byte strides) reach into ``out``'s byte range: the only ones ``check_out`` need test
    for overlap. One vectorised bounds test instead of a NumPy view per sample (a fresh
    ``out``, as a collate's, meets none: a view each cost 5x the padding)."""
    try:
        view = memory_view(out)
    except (TypeError, ValueError, AttributeError, RuntimeError):  # not an array: check_out names it
        return _memory_of(samples)
    if type(view) is not np.ndarray:
        return _memory_of(samples)
    return tuple(memory_view(samples[i]) for i in _pad.reaching(view, ptrs, shapes, strides, width))


def _pad_tensors(samples, multiple, axes, shape, plan, fill, left, out):
    """Fast path for CPU torch tensors of one dtype and rank: read their pointers and
    strides directly (no per-sample NumPy views). ``None`` if the batch needs the slow path."""
    torch = sys.modules["torch"]
    shapes, strides, ptrs, tdtype, bad = tensor_reader.describe_tensors(samples)
    if bad != -1 or shapes.shape[1] == 0:
        return None
    dt, token = torch_numpy_dtype(tdtype)
    target = (len(samples),) + _target_shape(shapes, multiple, axes, shape, plan)
    dest = (
        None
        if out is None
        else check_out(
            out,
            target,
            dt,
            "this batch",
            token,
            _tensors_near(out, samples, ptrs, shapes, strides, dt.itemsize),
        )
    )
    bits = kernel_fill_bits(fill, dt, token)
    if bits is None:
        return None
    buf = dest if dest is not None and dest.flags.c_contiguous else np.empty(target, dt)
    _pad.pad_pointers(ptrs, shapes, strides, buf, bits, left, copy_threads(buf.nbytes))
    if dest is not None and buf is not dest:
        dest[...] = buf
    lengths = shapes[:, 0].copy() if shapes.shape[1] == 1 else shapes
    batch = out if out is not None else wrap_like(buf, True, token)
    return batch, torch.from_numpy(lengths)


#: (dtype, token, fill key, multiple's type, multiple or plan boundaries) -> (fill bits,
#: size_of): what the one-call row routes (:func:`_pad_token_rows`,
#: :func:`_pad_number_lists`) would otherwise work out again for every batch
_ROW_SETUP: dict = {}


def _row_setup(dt: np.dtype, token, multiple, plan, fill):
    """``(fill bits, size_of)`` for rows of ``dt`` (``token``: a torch-only dtype it
    carries): ``size_of(longest)`` gives the padded length. ``None`` for dtypes the
    kernels do not move."""
    if plan is not None and type(plan) is not BucketPlan and not isinstance(plan, BucketPlan):
        return None  # a plan of the protocol only: the general path asks its round_up
    key = (
        dt,
        token,
        fill_key(fill),
        type(multiple),  # 8.0 == 8, but only 8 is a multiple
        multiple if plan is None else plan.boundaries,
    )  # a plan's hash costs more
    try:
        return _ROW_SETUP[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable fill (a 0-d array): work it out uncached
        key = None
    bits = kernel_fill_bits(fill, dt, token)
    if bits is None:
        setup = None
    elif plan is not None:
        setup = (bits, _plan_rows(plan))
    else:
        m = _shapes.check_multiple(multiple)
        setup = (bits, lambda n: -(-n // m) * m)
    if key is not None:
        if len(_ROW_SETUP) >= 256:
            _ROW_SETUP.clear()
        _ROW_SETUP[key] = setup
    return setup


_INT64_MAX = 2**63 - 1


def native_row_dtype(x0):
    """``(numpy dtype, token)`` of the rows the native row kernels would pad, judged by
    the first (a list of ints: int64; a torch tensor: its dtype's carrier), or ``None``
    for rows they leave to the other routes (complex: conjugate bits; dtypes NumPy
    cannot carry, such as quantized or sub-byte ones; anything else)."""
    if type(x0) is list:
        return _INT64, None
    if type(x0) is np.ndarray or not is_torch_tensor(x0) or x0.dtype.is_complex:
        return None
    try:
        return torch_numpy_dtype(x0.dtype)
    except (TypeError, ValueError, RuntimeError):
        return None


def native_row_layout(multiple: int, plan=None):
    """How the collate's native route (:mod:`loaders.collate_layout`) takes the padded
    length of rows: ``(multiple, None)`` without a plan (the longest row
    rounded up to ``multiple``), ``(1, boundaries as int64)`` with a one-axis plan (the
    smallest boundary ``>=`` it); ``None`` for a plan they cannot take (more axes, a
    boundary past int64)."""
    if plan is None:
        return multiple, None
    if plan.ndim != 1 or plan.axis_boundaries[0][-1] > _INT64_MAX:
        return None
    return 1, np.asarray(plan.axis_boundaries[0], np.int64)


def _plan_rows(plan):
    """``size_of(longest)`` for a one-axis plan: the smallest boundary ``>=`` it, by one
    ``bisect`` (``plan.round_up`` validates and builds tuples: per batch, that cost
    more than the rest of the planning); over the plan, ``round_up`` raises."""
    bounds = plan.axis_boundaries[0]
    top = bounds[-1]

    def size_of(n: int) -> int:
        if 0 <= n <= top:
            return bounds[bisect.bisect_left(bounds, n)]
        return plan.round_up(n)[0]

    return size_of


def pad_rows(samples: list, *, multiple: int = 8, plan=None, fill=0, side: str = "right"):
    """The one-call route of a collate: B 1-D rows -> ``(batch, lengths, longest, total)``.

    ``samples``: a list of 1-D CPU torch tensors of one dtype, or of lists of Python
    numbers (token ids as tokenizers give them). ``batch`` is ``(B, T)`` (a torch
    tensor for tensors, NumPy for lists; ``T`` as :func:`pad_batch` chooses it),
    ``lengths`` int64 NumPy ``(B,)``, ``longest`` and ``total`` the longest row and
    the sum of the lengths (the kernel's own counts: a caller needs no pass over
    ``lengths``). Returns ``None`` for anything else, and for rows it refuses (mixed
    dtypes, a row over the plan): :func:`pad_batch` then takes, or explains, them.

    >>> batch, lengths, longest, total = pad_rows([[1, 2, 3], [4]], multiple=4)
    >>> batch.tolist(), lengths.tolist(), longest, total
    ([[1, 2, 3, 0], [4, 0, 0, 0]], [3, 1], 3, 4)
    """
    left = _SIDES.get(side) if type(side) is str else None
    if left is None:
        left = _check_side(side)  # raises, naming what is accepted
    if plan is not None:
        check_plan(plan)
    if type(samples) is not list or not samples:
        return None
    x0 = samples[0]
    try:
        if type(x0) is list:
            return _pad_number_lists(samples, multiple, None, None, plan, fill, left, None)
        if type(x0) is not np.ndarray and is_torch_tensor(x0):
            return _pad_token_rows(samples, multiple, plan, fill, left)
    except (TypeError, ValueError):
        return None
    return None


def _pad_token_rows(samples, multiple, plan, fill, left):
    """1-D CPU tensors (token ids, labels), the hot case of a collate: ``(batch,
    lengths, longest, total)`` as :func:`pad_rows` gives them.

    With the native tensor reader (:mod:`dyntile.tensor_reader`) one call reads
    every row's length, stride and pointer and the kernel copies from there.
    Without it, ``torch.cat`` gathers the rows in one C++ loop (Python-level reads
    of each tensor's pointer and strides cost more than its copy of the data) and
    the kernel pads them from that buffer. ``None`` sends the batch to the
    general path (other ranks, devices or dtypes), which explains any error.
    """
    x0 = samples[0]
    if x0.dim() != 1 or (plan is not None and plan.ndim != 1) or x0.dtype.is_complex:  # complex: conj bits
        return None
    dt, token = torch_numpy_dtype(x0.dtype)
    setup = _row_setup(dt, token, multiple, plan, fill)
    if setup is None:
        return None
    bits, size_of = setup
    native = tensor_reader.describe_rows(samples)
    if native is not None:
        shapes, strides, ptrs, longest, total = native
        batch = np.empty(
            (len(samples), size_of(longest)), dt
        )  # too short: pad_pointers raises, pad_rows says None
        _pad.pad_pointers(ptrs, shapes, strides, batch, bits, left, copy_threads(batch.nbytes))
        batch = sys.modules["torch"].from_numpy(batch)
        return (batch if token is None else batch.view(token)), shapes.reshape(-1), longest, total
    if len(samples) * x0.numel() > _CAT_ELEMENTS:  # long rows: the extra copy would cost more than it saves
        return None
    rows = cat_token_rows(samples)
    if rows is None:
        return None
    flat, lengths = rows
    batch, lengths, longest, total = _pad.pad_flat_rows(
        flat.data_ptr(), flat.shape[0], lengths, dt, size_of, bits, left, copy_threads
    )
    batch = sys.modules["torch"].from_numpy(batch)
    return (batch if token is None else batch.view(token)), lengths, longest, total


def cat_token_rows(samples: list):
    """``(flat, lengths)`` for 1-D CPU tensors of one dtype: ``torch.cat`` of them
    (one C++ loop) and their lengths as a list of ints; ``None`` for anything else
    (other ranks, devices, layouts, mixed dtypes, non-tensors)."""
    torch = sys.modules["torch"]
    try:
        flat = torch.cat(samples)
    except (RuntimeError, TypeError):
        return None
    # cat promotes dtypes and skips legacy empty 1-D tensors, so check both
    if (
        flat.dim() != 1
        or not flat.is_cpu
        or flat.layout is not torch.strided
        or list(map(_DTYPE, samples)).count(samples[0].dtype) != len(samples)
    ):
        return None
    return flat, list(map(torch.Tensor.numel, samples))


_DTYPE = operator.attrgetter("dtype")
#: batches of about this many elements or more (judged by the first sample) skip the
#: torch.cat route: its copy and buffer then outweigh the per-tensor reads it saves
_CAT_ELEMENTS = 1 << 20
_INT64 = np.dtype(np.int64)


def _pad_number_lists(samples, multiple, axes, shape, plan, fill, left, out):
    """Lists of Python numbers (token ids from a tokenizer), read without building an
    array per list: ``(batch, lengths, longest, total)``. ``None`` sends the batch to
    the general path (other element types, ints beyond int64), which explains any error."""
    if axes is None and shape is None and out is None and (plan is None or plan.ndim == 1):
        try:
            setup = _row_setup(_INT64, None, multiple, plan, fill)
        except (TypeError, ValueError):  # e.g. fill=0.5 (fine for float lists): the two-pass route checks
            setup = None
        if setup is not None:
            result = _number_lists.pad_ints(samples, setup[1], setup[0], left)  # token ids: one pass
            if result is not None:
                return result
    lengths, dt = _number_lists.scan(samples)
    if dt is None:
        return None
    shapes = lengths.reshape(-1, 1)
    target = (len(samples),) + _target_shape(shapes, multiple, axes, shape, plan)
    dest = np.empty(target, dt) if out is None else check_out(out, target, dt, "this batch")
    buf = dest if dest.flags.c_contiguous else np.empty(target, dt)
    if _number_lists.pad_into(samples, buf, fill_bits(fill, dt), left) != -1:
        return None
    if buf is not dest:
        dest[...] = buf
    return (dest if out is None else out), lengths, int(lengths.max(initial=0)), int(lengths.sum())


def _require_cuda() -> None:
    """``RuntimeError`` saying so when ``device='cuda'`` was asked for on a machine without CUDA."""
    from numba import cuda

    if not cuda.is_available():
        raise RuntimeError(
            "device='cuda' needs a CUDA GPU and driver, which this machine lacks "
            "(numba.cuda.is_available() is False); pad on the host with device=None"
        )


def _pad_cuda(samples, multiple, axes, shape, plan, fill, left, dtype, out):
    """CUDA route: validate shapes and dtypes on the host, then one device kernel."""
    from dyntile import cuda as _cuda  # imports numba only now

    check_out_grad(out)
    token = next(filter(None, (bit_view(x)[1] for x in samples)), None)  # bfloat16, float8 tensors
    if token is not None:
        return _pad_cuda_bits(samples, multiple, axes, shape, plan, fill, left, dtype, out, token)
    shapes_list, dts = [], []
    for i, x in enumerate(samples):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(
                f"sample {i} ({type(x).__name__}) is not an array; with device='cuda' pass "
                f"NumPy or device arrays"
            )
        shapes_list.append(tuple(int(s) for s in x.shape))
        dts.append(_cuda.numpy_dtype(x.dtype))
    ndims = {len(s) for s in shapes_list}
    if len(ndims) != 1:
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
    shapes = np.array(shapes_list, dtype=np.int64)
    target = (len(samples),) + _target_shape(shapes, multiple, axes, shape, plan)
    bits = check_fill(fill, dt).item()
    batch = _cuda.pad_into(samples, target, dt, bits, left, out=out)
    lengths = shapes[:, 0].copy() if shapes.shape[1] == 1 else shapes
    return batch, lengths


def _pad_cuda_bits(samples, multiple, axes, shape, plan, fill, left, dtype, out, token):
    """CUDA torch tensors of a dtype NumPy lacks (``token``: bfloat16, float8): the CUDA
    route on their bits (:func:`dyntile.arrays.bit_view`), the result viewed back."""
    for i, x in enumerate(samples):
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
    if dtype is not None and dtype != token:
        raise TypeError(
            f"on the GPU the batch keeps the samples' dtype {token}, but got dtype={dtype}; "
            f"cast the samples first (device kernels do not promote)"
        )
    batch, lengths = _pad_cuda(
        [bit_view(x)[0] for x in samples],
        multiple,
        axes,
        shape,
        plan,
        carrier_fill(fill, token),
        left,
        None,
        bit_out(out, token, "this batch"),
    )
    return (out if out is not None else batch.view(token)), lengths


def pad_to(x, shape, *, fill=0, side: str = "right", out=None):
    """Pad one array ``x`` up to ``shape`` (same rank); never cuts.

    >>> pad_to(np.ones((2, 3), int), (4, 4))
    array([[1, 1, 1, 0],
           [1, 1, 1, 0],
           [0, 0, 0, 0],
           [0, 0, 0, 0]])
    """
    target = _shapes.check_shape(shape)
    xshape = tuple(int(s) for s in getattr(x, "shape", np.shape(x)))
    if len(target) != len(xshape):
        raise ValueError(f"cannot pad x of shape {xshape} to shape {target}: the ranks differ")
    for a, (s, t) in enumerate(zip(xshape, target)):
        if t < s:
            raise ValueError(
                f"cannot pad x of shape {xshape} to shape {target}: axis {a} would be cut "
                f"({s} > {t}); pad_to never truncates"
            )
    batch_out = None
    if out is not None:
        if not hasattr(out, "shape") or not hasattr(out, "reshape"):
            raise TypeError(f"out should be an array (NumPy, torch or CUDA), but got {type(out).__name__}")
        oshape = tuple(out.shape)
        if oshape != target:
            raise ValueError(f"out has shape {oshape}, but pad_to needs {target}")
        batch_out = out.reshape((1,) + target)  # a view: adding a unit axis never copies
    batch, _ = pad_batch([x], shape=target, fill=fill, side=side, out=batch_out)
    return out if out is not None else batch[0]
