"""Varlen attention: exact softmax attention inside the segments of packed rows.

:func:`varlen_attention` is the attention a packed ``[B, T]`` batch needs: each token
attends only to the tokens of its own segment (and, with ``causal``, not to later
ones), at the cost of its segments (sum of L^2), not of the row (T^2). Routes:

* NumPy arrays: the CPU kernels (:mod:`dyntile.cpu.attention`), forward only;
* torch tensors (CPU or CUDA): the custom op ``torch.ops.dyntile.varlen_attention_fwd``
  with autograd (:mod:`dyntile.attention.torch_op`, loaded on first use);
* CUDA device arrays (Numba's): the Numba kernels (:mod:`dyntile.cuda.attention`), forward only.
"""

from __future__ import annotations

import math

import numpy as np

from dyntile.attention.segments import from_cu_seqlens, from_segment_ids
from dyntile.dispatch import backend_of, is_torch_tensor

__all__ = ["varlen_attention", "segment_table", "kernel_dtype"]

#: float dtypes the kernels compute in; float16 (and torch's bfloat16) compute in float32
_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def varlen_attention(
    q, k, v, *, segment_ids=None, cu_seqlens=None, causal: bool = True, scale: float | None = None
):
    """Softmax attention of ``q`` over ``k, v`` inside each segment; zeros on padding.

    Layouts: ``q, k, v`` ``[B, T, H, D]`` with ``segment_ids`` ``[B, T]`` (0 = padding,
    each run of one id in a row a segment, as ``PackedCollate`` emits them),
    or ``[total, H, D]`` with ``cu_seqlens`` ``(S + 1,)`` (segment ``s`` is tokens
    ``cu_seqlens[s] .. cu_seqlens[s + 1] - 1``; tokens past ``cu_seqlens[-1]`` are
    padding). Grouped-query attention: ``k, v`` may have ``Hkv`` heads where ``H`` is a
    multiple of ``Hkv``, and query head ``h`` reads key/value head ``h // (H // Hkv)``
    in place (no copy per query head); their gradients sum over the group. ``scale``
    defaults to ``1 / sqrt(D)``. float32 and float64 compute in their dtype; float16
    and bfloat16 in float32, returned in their dtype. Returns an
    array like ``q`` (a torch tensor for torch inputs, differentiable once: a second
    derivative raises; meta tensors give a meta result). ``H = 0`` gives an empty result.

    Non-finite inputs give what ``softmax(scale * q K^T) V`` over the keys a query sees
    gives in IEEE arithmetic, forward and backward: a NaN in q, k or v makes NaN the
    outputs (and gradients) of the queries that see it, an inf in v an inf; an inf in a
    key scores it +inf (NaN, through inf - inf) or -inf (weight 0) by the sign of
    ``q . k``. Queries that do not see the value (other segments, earlier tokens under
    ``causal``) and padding are unchanged.

    >>> q = np.ones((1, 4, 1, 2), np.float32); seg = np.array([[1, 1, 2, 0]])
    >>> v = np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1) * q
    >>> varlen_attention(q, q, v, segment_ids=seg)[0, :, 0, 0]
    array([0. , 0.5, 2. , 0. ], dtype=float32)
    """
    index, segmented = _index(segment_ids, cu_seqlens)
    _check_shapes(q, k, v, index, segmented)
    scale = _scale(scale, tuple(q.shape)[-1])
    if is_torch_tensor(q) or is_torch_tensor(k) or is_torch_tensor(v):
        from dyntile.attention.torch_op import varlen_attention_torch

        return varlen_attention_torch(q, k, v, index, bool(causal), scale)
    if backend_of((q, k, v, index), "q, k, v and the segments") == "cuda":
        return _cuda_forward(q, k, v, index, segmented, bool(causal), scale)
    return _cpu_forward(q, k, v, index, segmented, bool(causal), scale)


def _index(segment_ids, cu_seqlens):
    if (segment_ids is None) == (cu_seqlens is None):
        raise TypeError(
            "varlen_attention needs exactly one of segment_ids= ([B, T], with q [B, T, H, D]) "
            "or cu_seqlens= ((S + 1,), with q [total, H, D])"
        )
    return (segment_ids, True) if cu_seqlens is None else (cu_seqlens, False)


def _check_shapes(q, k, v, index, segmented: bool) -> None:
    """q, k, v with the layout's rank, k and v of one shape that differs from q's at most
    in its head count (a divisor of q's), and an index that fits them."""
    shapes = [tuple(getattr(x, "shape", ())) for x in (q, k, v)]
    rank = 4 if segmented else 3
    layout = "[B, T, H, D] with segment_ids" if segmented else "[total, H, D] with cu_seqlens"
    for name, shape in zip("qkv", shapes):
        if len(shape) != rank:
            raise ValueError(f"{name} should have shape {layout}, but got shape {shape}")
    check_heads(shapes[0], shapes[1], shapes[2])
    if shapes[0][-1] < 1:
        raise ValueError(f"q, k, v should have a head dim D >= 1, but got shape {shapes[0]}")
    ishape = tuple(getattr(index, "shape", ()))
    if segmented and ishape != shapes[0][:2]:
        raise ValueError(
            f"segment_ids should have shape [B, T] = {shapes[0][:2]} (q's first two dims), "
            f"but got shape {ishape}"
        )
    if not segmented and len(ishape) != 1:
        raise ValueError(f"cu_seqlens should have shape (S + 1,), but got shape {ishape}")


def check_heads(q_shape: tuple, k_shape: tuple, v_shape: tuple) -> None:
    """Refuse k, v shapes that grouped-query attention over q cannot read: all but the
    head axis (``-2``) equal to q's, k's equal to v's, and q's heads a multiple of theirs.

    >>> check_heads((5, 4, 8), (5, 2, 8), (5, 2, 8))
    >>> check_heads((5, 4, 8), (5, 3, 8), (5, 3, 8))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: q's 4 heads should be a multiple of k and v's 3 heads (grouped-query attention: ...
    """
    q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
    if k_shape != v_shape or k_shape[:-2] + k_shape[-1:] != q_shape[:-2] + q_shape[-1:]:
        raise ValueError(
            f"k and v should have one shape, equal to q's but for the head count (dim -2), but got "
            f"q {q_shape}, k {k_shape} and v {v_shape}"
        )
    H, Hkv = q_shape[-2], k_shape[-2]
    if H == 0 and Hkv == 0:
        return
    if Hkv == 0 or H % Hkv:
        raise ValueError(
            f"q's {H} heads should be a multiple of k and v's {Hkv} heads (grouped-query attention: "
            f"query head h reads key/value head h // ({H} // {Hkv})), but "
            + (f"{H} % {Hkv} = {H % Hkv}" if Hkv else "k and v have none")
        )


def _scale(scale, D: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(D)
    if getattr(getattr(scale, "device", None), "type", None) == "meta":
        raise TypeError("scale should be a number, but got a meta tensor, which holds no value; pass a float")
    try:
        scale = float(scale)
    except (TypeError, ValueError) as e:
        raise TypeError(f"scale should be a finite number, but got {type(scale).__name__} {scale!r}") from e
    if not math.isfinite(scale):
        raise ValueError(f"scale should be a finite number, but got {scale}")
    return scale


def kernel_dtype(dtype) -> np.dtype:
    """The dtype the kernels compute ``dtype`` in: itself for float32/float64, float32 for
    float16; ``TypeError`` for the rest."""
    dtype = np.dtype(dtype)
    if dtype in _KERNEL_DTYPES:
        return dtype
    if dtype == np.float16:
        return np.dtype(np.float32)
    raise TypeError(
        f"varlen_attention takes float32, float64, float16 (or torch bfloat16) arrays, but got dtype {dtype}"
    )


def segment_table(index, segmented: bool, total: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` (int64, host) of the segments over the flat stream of ``total`` tokens."""
    index = np.asarray(index)
    return from_segment_ids(index) if segmented else from_cu_seqlens(index, total)


def kernel_threads(
    starts: np.ndarray, lengths: np.ndarray, heads: int, dim: int, cap: int | None = None
) -> int:
    """OpenMP threads for a call: one for small work (waking a team costs more), else the
    cores available (``DYNTILE_NUM_THREADS``, ``cap``), never more than work items."""
    from dyntile.threads import max_threads

    work = int((lengths.astype(np.float64) ** 2).sum()) * heads * dim
    if work < (1 << 18):
        return 1
    n = max_threads() if cap is None else min(max_threads(), cap)
    return max(1, n)


def _cpu_forward(q, k, v, index, segmented: bool, causal: bool, scale: float):
    from dyntile.cpu import attention as kernel

    dtype = np.result_type(*(np.asarray(x).dtype for x in (q, k, v)))
    work = kernel_dtype(dtype)
    q3, k3, v3 = (_kernel_view(x, work) for x in (q, k, v))
    starts, lengths = segment_table(index, segmented, q3.shape[0])
    out, _ = kernel.forward(
        q3, k3, v3, starts, lengths, causal, scale, kernel_threads(starts, lengths, q3.shape[1], q3.shape[2])
    )
    return out.reshape(q.shape).astype(dtype, copy=False)


def _kernel_view(x, dtype: np.dtype) -> np.ndarray:
    """``x`` as ``[N, H, D]`` of ``dtype`` with a contiguous last axis (a view where it can be)."""
    a = np.asarray(x)
    shape = a.shape
    # the token count spelled out: -1 cannot infer it when H or D is 0
    a = a.astype(dtype, copy=False).reshape((math.prod(shape[:-2]),) + tuple(shape[-2:]))
    if a.strides[-1] != a.itemsize:
        a = np.ascontiguousarray(a)
    return a


def _cuda_forward(q, k, v, index, segmented: bool, causal: bool, scale: float):
    from dyntile.cuda import attention as kernel
    from dyntile.cuda.runtime import as_device, contiguous, numpy_dtype

    dtype = numpy_dtype(q.dtype)
    if dtype not in _KERNEL_DTYPES or any(numpy_dtype(x.dtype) != dtype for x in (k, v)):
        raise TypeError(
            f"varlen_attention on CUDA device arrays takes q, k, v of one dtype, float32 or "
            f"float64, but got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    shape = tuple(q.shape)
    q3, k3, v3 = (
        _device_stream(as_device(x, name), segmented, contiguous) for x, name in zip((q, k, v), "qkv")
    )
    starts, lengths = segment_table(as_device(index, "segments").copy_to_host(), segmented, q3.shape[0])
    out, _ = kernel.varlen_attention_forward(q3, k3, v3, starts, lengths, causal=causal, scale=scale)
    return out.reshape(shape)


def _device_stream(x, segmented: bool, contiguous):
    """A device array as ``[N, H, D]``: ``[B, T, H, D]`` merged (Numba reshapes only
    contiguous arrays; the kernels take any strides otherwise)."""
    if not segmented:
        return x
    shape = tuple(x.shape)
    return contiguous(x).reshape((shape[0] * shape[1],) + shape[2:])
