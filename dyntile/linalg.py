"""``dyntile.linalg``: ``dyntile.matmul``, :func:`numpy.matmul` on dyntile's own cache-blocked GEMM.

float32 and float64 products run on the Cython kernel (:mod:`dyntile.cpu.gemm`);
other dtypes follow NumPy's promotion and go to :func:`numpy.matmul`. CUDA device
arrays go to :func:`dyntile.cuda.matmul`. This module validates and chooses; the
kernel only loops.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from dyntile.arrays import check_host_tensor, memory_view, overlaps, torch_dtype_token
from dyntile.cpu import gemm as _GEMM
from dyntile.dispatch import backend_of, is_torch_tensor
from dyntile.shapes import MatmulShapes, broadcast_batch, matmul_shapes
from dyntile.threads import in_forked_child, max_threads

__all__ = ["matmul", "matmul_shapes", "MatmulShapes"]

#: below this many flops (2*m*n*k over the batch) one thread beats starting a team
#: (``threads=`` is a cap, like threadpoolctl's limits for BLAS)
PARALLEL_FLOPS = 1 << 23
#: never start more threads than this
MAX_THREADS = 64


def matmul(a, b, out=None, *, threads: int | None = None):
    """Matrix product with :func:`numpy.matmul` semantics, on dyntile's GEMM kernel.

    ``a``: ``(..., m, k)`` or ``(k,)``; ``b``: ``(..., k, n)`` or ``(k,)``; leading
    axes broadcast. Returns ``(..., m, n)`` of ``np.result_type(a, b)`` (1-D axes
    dropped as NumPy does); float32/float64 run on the kernel, other dtypes on
    :func:`numpy.matmul`. NumPy arrays, lists and CPU torch tensors are accepted
    (torch in -> torch out); CUDA arrays go to :func:`dyntile.cuda.matmul`.

    ``out``: optional result array (or a 1-tuple of one, as NumPy takes) of the
    result's shape, or with leading axes the batch broadcasts to, and a dtype the
    result casts to (``same_kind``); it must not overlap ``a`` or ``b``. Array
    subclasses (``np.matrix``, masked arrays) go to :func:`numpy.matmul`: its result
    type and errors are NumPy's; bfloat16/float8 tensors to ``torch.matmul`` after the
    same checks (``torch.promote_types`` for mixed dtypes; it records autograd, so
    those operands may require grad). ``threads``: at most
    this many OpenMP threads (default: the cores available); products under about
    8 Mflop run on one, and so does everything in a process forked from this one
    (OpenMP's thread pool does not survive fork).

    >>> import numpy as np
    >>> matmul(np.ones((2, 4, 3), np.float32), np.ones((3, 5), np.float32)).shape
    (2, 4, 5)
    """
    if (
        type(a) is np.ndarray
        and type(b) is np.ndarray
        and (threads is None or type(threads) is int and 0 < threads <= MAX_THREADS)
    ):
        # the common call (two 2-D float arrays), checked and run in Cython; None: not that call
        result = _GEMM.matmul_2d(a, b, out, threads or 0, PARALLEL_FLOPS, _check_threads)
        if result is not None:
            return result
    if type(out) is tuple:
        out = _single_out(out)
    return _route(a, b, out)(a, b, out, threads)


def _route(a, b, out):
    """The function that computes ``matmul(a, b, out, threads)`` for these operands."""
    operands = [a, b] if out is None else [a, b, out]
    if backend_of(operands, what="matmul operands") == "cuda":
        # bfloat16, float8 CUDA tensors: torch's (cuBLAS) product
        return _torch_matmul if any(map(_torch_only_dtype, operands)) else _cuda_matmul
    if any(map(_ndarray_subclass, operands)):  # np.matrix, masked arrays: NumPy's own result and errors
        return _subclass_matmul
    if (is_torch_tensor(a) or is_torch_tensor(b)) and (_torch_only_dtype(a) or _torch_only_dtype(b)):
        return _torch_matmul
    if _torch_only_dtype(out):  # NumPy's product, cast by torch into a bfloat16/float8 out
        return _into_torch_only_out
    return _host_matmul


def _cuda_matmul(a, b, out, threads):
    from dyntile.cuda import matmul as cuda_matmul  # numba loads only here

    return cuda_matmul(a, b, out=out)


def _subclass_matmul(a, b, out, threads):
    _check_threads(threads, 0)
    return np.matmul(a, b, out=out)


def _host_matmul(a, b, out, threads):
    """The product of host operands (NumPy arrays, lists, CPU torch tensors): checked,
    then on the kernel (float32/float64) or :func:`numpy.matmul`; torch in, torch out."""
    a_np, b_np = _host_array(a, "a"), _host_array(b, "b")
    shapes = matmul_shapes(a_np.shape, b_np.shape)
    res_dtype = np.result_type(a_np, b_np)
    out_np = None
    if out is not None:
        out_np, shapes = _check_out(out, shapes, res_dtype, a_np, b_np)
        if is_torch_tensor(out) and (out.is_conj() or out.is_neg()):  # its memory holds conj/-values:
            result = matmul(a, b, threads=threads)  # torch's copy_ writes them
            out.copy_(result if is_torch_tensor(result) else sys.modules["torch"].as_tensor(result))
            return out
    nthreads = _check_threads(threads, 2 * shapes.m * shapes.n * shapes.k * math.prod(shapes.batch))
    if res_dtype in _KERNELS:
        result = _kernel_matmul(
            a_np.astype(res_dtype, copy=False), b_np.astype(res_dtype, copy=False), shapes, out_np, nthreads
        )
    else:
        result = np.matmul(a_np, b_np, out=out_np)
    if out is not None:
        return out
    if is_torch_tensor(a) or is_torch_tensor(b):
        return sys.modules["torch"].from_numpy(np.asarray(result))
    if not isinstance(result, np.ndarray):  # object dtype 1-D @ 1-D: np.matmul returns the Python object
        return result
    return result[()] if result.ndim == 0 else result


# ------------------------------------------------------------------------ input checks


def _host_array(x, name: str) -> np.ndarray:
    """A NumPy view of a host operand (torch tensors share memory; lists convert)."""
    if is_torch_tensor(x):
        check_host_tensor(x, f"matmul: operand {name}")
        if x.requires_grad:
            raise TypeError(
                f"matmul: operand {name} requires grad; dyntile.matmul does not record "
                f"autograd, so pass {name}.detach() or use torch.matmul"
            )
        return x.resolve_conj().resolve_neg().numpy()
    if isinstance(x, np.ndarray):
        arr = x
    else:
        try:
            arr = np.asarray(x)
        except ValueError as e:
            raise ValueError(f"matmul: operand {name} is not a rectangular array: {e}") from None
    if arr.dtype.kind not in "biufcO":
        raise TypeError(
            f"matmul: operand {name} has dtype {arr.dtype}; expected numbers "
            f"(bool, integer, float or complex)"
        )
    return arr


def _single_out(out: tuple):
    """NumPy's ``out=(array,)`` form: the one array."""
    if len(out) != 1:
        raise ValueError(
            f"matmul: the 'out' tuple must have exactly one entry (matmul has one output), but got {len(out)}"
        )
    return out[0]


def _ndarray_subclass(x) -> bool:
    """A NumPy array subclass that :func:`numpy.matmul` treats specially (``np.matrix``,
    masked arrays, ...); ``np.memmap`` is a plain array to matmul."""
    return isinstance(x, np.ndarray) and type(x) is not np.ndarray and not isinstance(x, np.memmap)


def _check_out(out, shapes: MatmulShapes, res_dtype: np.dtype, a: np.ndarray, b: np.ndarray):
    """``(NumPy view of out's memory, shapes)`` after checking ``out``'s kind, shape,
    dtype and overlap. As in NumPy, ``out`` may have more leading axes than the operands'
    batch: they broadcast to it (``shapes`` then has out's batch)."""
    if is_torch_tensor(out):
        check_host_tensor(out, "matmul: out")
        _check_out_grad(out)
        out_np = memory_view(out)
    elif isinstance(out, np.ndarray):
        out_np = out
    else:
        raise TypeError(
            f"matmul: out should be a NumPy array or a torch tensor, but got {type(out).__name__}"
        )
    shapes = _out_shapes(tuple(out_np.shape), shapes, a.shape, b.shape)
    if not np.can_cast(res_dtype, out_np.dtype, "same_kind"):
        raise TypeError(
            f"matmul: cannot write the {res_dtype} result into out of dtype "
            f"{out_np.dtype} (casting rule 'same_kind')"
        )
    if not out_np.flags.writeable:
        raise ValueError("matmul: out is read-only")
    _check_disjoint(out_np, a, b)
    return out_np, shapes


def _check_out_grad(out) -> None:
    if out.requires_grad:
        raise TypeError(
            "matmul: out requires grad; dyntile.matmul does not record autograd "
            "(neither does torch.matmul with out=), so pass out.detach()"
        )


def _out_shapes(out_shape: tuple, shapes: MatmulShapes, a_shape: tuple, b_shape: tuple) -> MatmulShapes:
    """``shapes`` for an ``out`` of ``out_shape``: the product's own shape, or one whose
    extra or larger leading axes the operands' batch broadcasts to; else ``ValueError``."""
    if out_shape == shapes.out_shape:
        return shapes
    core = shapes.out_shape[len(shapes.batch) :]
    lead = len(out_shape) - len(core)
    out_batch = out_shape[:lead]
    if lead < 0 or out_shape[lead:] != core or broadcast_batch(shapes.batch, out_batch) != out_batch:
        raise ValueError(
            f"matmul: out has shape {out_shape}, but the product of shapes "
            f"{a_shape} and {b_shape} has shape {shapes.out_shape} (out may only "
            f"add leading axes that the batch broadcasts to)"
        )
    return shapes._replace(batch=out_batch, out_shape=out_shape)


def _check_disjoint(out_np: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    for name, x in (("a", a), ("b", b)):
        if overlaps(out_np, x):
            raise ValueError(
                f"matmul: out overlaps operand {name} in memory; the result "
                f"cannot be written over an input (pass a separate out)"
            )


def _check_threads(threads, flops: int) -> int:
    """OpenMP threads for a product of ``flops``: at most ``threads`` (default: the
    cores available), one below PARALLEL_FLOPS or in a forked child."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
            raise TypeError(f"matmul: threads should be a positive integer or None, but got {threads!r}")
        if threads < 1:
            raise ValueError(f"matmul: threads should be a positive integer or None, but got {threads!r}")
    if flops < PARALLEL_FLOPS or in_forked_child():
        return 1
    return min(max_threads() if threads is None else int(threads), MAX_THREADS)


# ---------------------------------------------------------------------- kernel call

#: dtype -> batched GEMM kernel (dtypes not listed fall back to numpy.matmul)
_KERNELS = {np.dtype(np.float32): _GEMM.sgemm, np.dtype(np.float64): _GEMM.dgemm}
#: batch offsets of a single (unbatched) product
_ZERO_OFFSET = np.zeros(1, np.int64)


def _kernel_matmul(a: np.ndarray, b: np.ndarray, shapes: MatmulShapes, out, threads: int):
    """Run the GEMM kernel; returns the result array (``out`` itself when it fits)."""
    dtype = a.dtype
    a, b = _kernel_readable(a), _kernel_readable(b)
    if out is not None and out.dtype == dtype and _kernel_strides_ok(out):
        c = out
    else:
        c = np.empty(shapes.out_shape, dtype)
    # core views: 1-D operands become a (1, k) row / (k, 1) column, C loses those axes
    a_mat = a[None, :] if shapes.a_vector else a
    b_mat = b[:, None] if shapes.b_vector else b
    c_mat = c
    if shapes.a_vector:
        c_mat = c_mat[..., None, :] if not shapes.b_vector else c_mat[..., None]
    if shapes.b_vector:
        c_mat = c_mat[..., None]
    _KERNELS[dtype](
        a,
        b,
        c,
        _batch_offsets(a_mat, shapes.batch),
        _batch_offsets(b_mat, shapes.batch),
        _batch_offsets(c_mat, shapes.batch),
        shapes.m,
        shapes.n,
        shapes.k,
        _core_strides(a_mat),
        _core_strides(b_mat),
        _core_strides(c_mat),
        threads,
    )
    if c is not out and out is not None:
        np.copyto(out, c, casting="same_kind")
        return out
    return c


def _kernel_strides_ok(x: np.ndarray) -> bool:
    """The kernel addresses elements: strides must be whole elements, data aligned."""
    isz = x.itemsize
    for s in x.strides:
        if s % isz:
            return False
    return x.flags.aligned


def _kernel_readable(x: np.ndarray) -> np.ndarray:
    return x if _kernel_strides_ok(x) else np.ascontiguousarray(x)


def _core_strides(x: np.ndarray) -> tuple:
    """(row, column) element strides of the last two axes."""
    return x.strides[-2] // x.itemsize, x.strides[-1] // x.itemsize


def _batch_offsets(x: np.ndarray, batch: tuple) -> np.ndarray:
    """Element offset of each matrix of ``x`` broadcast to ``batch``, in C order."""
    if not batch:
        return _ZERO_OFFSET
    lead = x.ndim - 2
    if len(batch) == 1:
        stride = 0 if lead < 1 or x.shape[0] == 1 else x.strides[0] // x.itemsize
        return (
            np.arange(0, batch[0] * stride, stride, dtype=np.int64)
            if stride
            else np.zeros(batch[0], np.int64)
        )
    off = np.zeros((), np.int64)
    for axis, size in enumerate(batch):
        xa = axis - (len(batch) - lead)  # the axis of x aligned with batch[axis]
        stride = 0 if xa < 0 or x.shape[xa] == 1 else x.strides[xa] // x.itemsize
        off = off[..., None] + np.arange(size, dtype=np.int64) * stride
    return np.ascontiguousarray(off.reshape(-1))


# ------------------------------------------------------------------------ torch dtypes


def _torch_only_dtype(x) -> bool:
    """True for a tensor whose dtype NumPy lacks (bfloat16, float8, ...)."""
    return is_torch_tensor(x) and torch_dtype_token(x) is not None


def _torch_operand(x, name: str):
    """``x`` as a tensor for ``torch.matmul`` (which records autograd: grad is fine);
    NumPy operands in native byte order and positive strides, as torch takes them."""
    if is_torch_tensor(x):
        return x
    arr = _host_array(x, name)
    if arr.dtype.byteorder not in "=|" or any(st < 0 for st in arr.strides):
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    return sys.modules["torch"].as_tensor(arr)


def _torch_matmul(a, b, out, threads):
    """Dtypes NumPy lacks (bfloat16, float8): torch's own matmul (on the CPU, or cuBLAS
    for CUDA tensors), after the checks, the operands promoted with
    ``torch.promote_types`` (NumPy cannot promote with these dtypes). Runs on torch's
    threads (``threads`` is checked, but torch's own setting applies)."""
    torch = sys.modules["torch"]
    a_t, b_t = _torch_operand(a, "a"), _torch_operand(b, "b")
    shapes = matmul_shapes(a_t.shape, b_t.shape)
    _check_threads(threads, 0)
    dtype = torch.promote_types(a_t.dtype, b_t.dtype)
    if out is not None:
        _check_torch_out(out, dtype, shapes, a_t, b_t)
    result = torch.matmul(a_t.to(dtype), b_t.to(dtype))
    if out is None:
        return result
    out.copy_(result)  # broadcasts to out's leading axes
    return out


def _into_torch_only_out(a, b, out, threads):
    """Operands NumPy types, ``out`` a bfloat16/float8 tensor: the product as NumPy
    types it (``np.result_type``), checked against ``out`` as torch casts (``same_kind``:
    float64 into bfloat16 yes, complex no), then written by torch's ``copy_``."""
    torch = sys.modules["torch"]
    a_np, b_np = _host_array(a, "a"), _host_array(b, "b")
    shapes = matmul_shapes(a_np.shape, b_np.shape)
    res_dtype = np.result_type(a_np, b_np)
    try:
        dtype = torch.from_numpy(np.empty(0, res_dtype)).dtype
    except TypeError:
        raise TypeError(
            f"matmul: cannot write the {res_dtype} result into out of dtype {out.dtype}"
        ) from None
    _check_torch_out(out, dtype, shapes, a_np, b_np)
    result = matmul(a_np, b_np, threads=threads)
    out.copy_(torch.as_tensor(result))  # broadcasts to out's leading axes
    return out


def _check_torch_out(out, dtype, shapes: MatmulShapes, a_t, b_t) -> None:
    """A torch ``out`` for a product of torch dtype ``dtype`` of operands ``a_t``, ``b_t``
    (tensors or NumPy arrays): a tensor not requiring grad, of a shape the product
    broadcasts to, a dtype it casts to, apart from both operands in memory (device
    memory for CUDA tensors)."""
    torch = sys.modules["torch"]
    if not is_torch_tensor(out):
        raise TypeError(f"matmul: a {dtype} product needs a torch tensor out, but got {type(out).__name__}")
    _check_out_grad(out)
    _out_shapes(tuple(out.shape), shapes, tuple(a_t.shape), tuple(b_t.shape))
    if not torch.can_cast(dtype, out.dtype):
        raise TypeError(f"matmul: cannot write the {dtype} result into out of dtype {out.dtype}")
    if out.is_cuda:
        from dyntile.cuda.runtime import bounds_meet  # numba loads only here

        if bounds_meet(out, (a_t, b_t)):
            raise ValueError(
                "matmul: out overlaps an operand in device memory; the result cannot be "
                "written over an input (pass a separate out)"
            )
    else:
        check_host_tensor(out, "matmul: out")
        _check_disjoint(memory_view(out), memory_view(a_t), memory_view(b_t))
