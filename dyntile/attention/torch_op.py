"""``varlen_attention`` for torch tensors: custom ops with autograd and fake kernels.

``torch.ops.dyntile.varlen_attention_fwd(q, k, v, index, causal, scale) -> (out, lse)``
and ``torch.ops.dyntile.varlen_attention_bwd(dout, q, k, v, out, lse, index, causal,
scale, dlse=None) -> (dq, dk, dv)`` take ``q`` ``[N, H, D]``, ``k, v`` ``[N, Hkv, D]``
(``H`` a multiple of ``Hkv``: grouped-query attention, ``dk, dv`` like ``k``) and ``index``:
``segment_ids`` ``[B, T]`` (with ``N = B * T``) or ``cu_seqlens`` ``(S + 1,)``, told
apart by their rank. Both ``out`` and ``lse`` are differentiable (``lse``'s gradient
adds ``P * dlse`` to dS); a second derivative is not supported and raises.
The segments are read inside the kernels, so the ops' output shapes depend only on
the input shapes: ``torch.compile`` traces them once for a ``[B, T]`` batch shape,
whatever its segment layout, with no graph break. CPU tensors run the Cython kernels,
CUDA tensors the Numba kernels. Loaded on the first call with a tensor (torch is then
already imported).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dyntile.attention import check_heads, kernel_threads, segment_table

__all__ = ["varlen_attention_torch"]

#: the integer dtypes segment_ids and cu_seqlens may have
_INDEX_DTYPES = (
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
)

_COMPUTE = {
    torch.float32: torch.float32,
    torch.float64: torch.float64,
    torch.float16: torch.float32,
    torch.bfloat16: torch.float32,
}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute a tensor of ``dtype`` in (``TypeError`` for others)."""
    if dtype not in _COMPUTE:
        raise TypeError(
            f"varlen_attention takes float32, float64, float16 or bfloat16 tensors, but got {dtype}"
        )
    return _COMPUTE[dtype]


def varlen_attention_torch(q, k, v, index, causal: bool, scale: float):
    """The public call on tensors: checks dtypes and devices, flattens, calls the op."""
    tensors = {"q": q, "k": k, "v": v, "segments": index}
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"varlen_attention with torch tensors needs every input as a tensor, but {name} is "
                f"a {type(x).__name__}"
            )
    devices = {name: x.device for name, x in tensors.items()}
    if len(set(devices.values())) > 1:
        raise ValueError(
            "q, k, v and the segments should be on one device, but got "
            + ", ".join(f"{n} on {d}" for n, d in devices.items())
            + "; move them to one device first"
        )
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"q, k and v should have one dtype, but got {q.dtype}, {k.dtype} and {v.dtype}")
    if q.is_quantized:
        raise TypeError(
            f"varlen_attention takes float32, float64, float16 or bfloat16 tensors, but got the "
            f"quantized dtype {q.dtype}; dequantize q, k and v first (x.dequantize())"
        )
    compute_dtype(q.dtype)
    if index.dtype not in _INDEX_DTYPES:
        name = "segment_ids" if index.dim() == 2 else "cu_seqlens"
        hint = f"; pass {name}.int_repr()" if index.is_quantized else ""
        raise TypeError(f"{name} should be a tensor of plain integers, but got dtype {index.dtype}{hint}")
    out, _ = torch.ops.dyntile.varlen_attention_fwd(_flat(q), _flat(k), _flat(v), index, causal, scale)
    return out.reshape(q.shape)


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[N, heads, D]`` (a view where it can be)."""
    # the token count spelled out: -1 cannot infer it when H or D is 0
    return x.reshape((math.prod(x.shape[:-2]),) + tuple(x.shape[-2:]))


# ---------------------------------------------------------------------- host arrays


def _host(x: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """A CPU tensor as the kernels' NumPy ``[N, H, D]`` array (a view where it can be)."""
    x = x.detach()
    if x.dtype != dtype:
        x = x.to(dtype)
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x.numpy()


def _segments(index: torch.Tensor, total: int) -> tuple[np.ndarray, np.ndarray]:
    segmented = index.dim() == 2
    if segmented and index.numel() != total:
        raise ValueError(
            f"segment_ids [B, T] should have B * T = {total} tokens (q's dim 0), "
            f"but got shape {tuple(index.shape)}"
        )
    return segment_table(index.detach().cpu().numpy(), segmented, total)


def _threads(starts, lengths, q) -> int:
    return kernel_threads(starts, lengths, q.shape[1], q.shape[2], cap=torch.get_num_threads())


# ---------------------------------------------------------------------- the ops


@torch.library.custom_op("dyntile::varlen_attention_fwd", mutates_args=())
def varlen_attention_fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, index: torch.Tensor, causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out [N, H, D] in q's dtype, lse [N, H] in the compute dtype)``."""
    work = compute_dtype(q.dtype)
    check_heads(q.shape, k.shape, v.shape)
    starts, lengths = _segments(index, q.shape[0])
    if q.is_cuda:
        return _cuda_fwd(q, k, v, starts, lengths, causal, scale, work)
    from dyntile.cpu import attention as kernel

    out, lse = kernel.forward(
        _host(q, work),
        _host(k, work),
        _host(v, work),
        starts,
        lengths,
        causal,
        scale,
        _threads(starts, lengths, q),
    )
    return torch.from_numpy(out).to(q.dtype), torch.from_numpy(lse)


@varlen_attention_fwd.register_fake
def _(q, k, v, index, causal, scale):
    return q.new_empty(q.shape), q.new_empty(q.shape[:2], dtype=compute_dtype(q.dtype))


@torch.library.custom_op("dyntile::varlen_attention_bwd", mutates_args=())
def varlen_attention_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    index: torch.Tensor,
    causal: bool,
    scale: float,
    dlse: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)``, shaped like ``q, k, v``, in q's dtype: the gradients of
    ``sum(out * dout) + sum(lse * dlse)`` (``dlse`` ``[N, H]``, or ``None``: 0)."""
    work = compute_dtype(q.dtype)
    check_heads(q.shape, k.shape, v.shape)
    starts, lengths = _segments(index, q.shape[0])
    if q.is_cuda:
        return _cuda_bwd(dout, q, k, v, out, lse, dlse, starts, lengths, causal, scale, work)
    from dyntile.cpu import attention as kernel

    grads = kernel.backward(
        _host(dout, work),
        _host(q, work),
        _host(k, work),
        _host(v, work),
        _host(out, work),
        np.ascontiguousarray(_host(lse, work)),
        starts,
        lengths,
        causal,
        scale,
        _threads(starts, lengths, q),
        None if dlse is None else np.ascontiguousarray(_host(dlse, work)),
    )
    return tuple(torch.from_numpy(g).to(q.dtype) for g in grads)


@varlen_attention_bwd.register_fake
def _(dout, q, k, v, out, lse, index, causal, scale, dlse=None):
    return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(k.shape)


def _no_double_backward(ctx, *grads):
    raise RuntimeError(
        "varlen_attention does not support double backward (a gradient of its gradients, "
        "as torch.autograd.grad(..., create_graph=True) then a second backward needs); "
        "first-order gradients of out and lse are supported"
    )


varlen_attention_bwd.register_autograd(_no_double_backward)


def _setup_context(ctx, inputs, output):
    q, k, v, index, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, index, out, lse)
    ctx.causal, ctx.scale = causal, scale


def _backward(ctx, dout, dlse):
    q, k, v, index, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dq, dk, dv = torch.ops.dyntile.varlen_attention_bwd(
        dout, q, k, v, out, lse, index, ctx.causal, ctx.scale, dlse
    )
    return dq, dk, dv, None, None, None


varlen_attention_fwd.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------- CUDA tensors


def _cuda_fwd(q, k, v, starts, lengths, causal, scale, work):
    from dyntile.cuda import attention as kernel

    dtype = q.dtype
    q, k, v = (x.to(work) for x in (q, k, v))
    out = torch.zeros(q.shape, dtype=work, device=q.device)
    lse = torch.zeros(q.shape[:2], dtype=work, device=q.device)
    kernel.varlen_attention_forward(q, k, v, starts, lengths, causal=causal, scale=scale, out=out, lse=lse)
    return out.to(dtype), lse


def _cuda_bwd(dout, q, k, v, out, lse, dlse, starts, lengths, causal, scale, work):
    from dyntile.cuda import attention as kernel

    dtype = q.dtype
    dout, q, k, v, out = (x.to(work) for x in (dout, q, k, v, out))
    dlse = None if dlse is None else dlse.to(work)
    dq = torch.zeros(q.shape, dtype=work, device=q.device)
    dk, dv = (torch.zeros(k.shape, dtype=work, device=q.device) for _ in range(2))
    kernel.varlen_attention_backward(
        dout,
        q,
        k,
        v,
        out,
        lse.contiguous(),
        starts,
        lengths,
        causal=causal,
        scale=scale,
        dq=dq,
        dk=dk,
        dv=dv,
        dlse=dlse,
    )
    return dq.to(dtype), dk.to(dtype), dv.to(dtype)
