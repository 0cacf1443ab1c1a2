"""Reading a list of CPU torch tensors' sizes, strides and data pointers.

The padding kernels copy straight from each sample's memory; what they need of a
tensor is its shape, byte strides and data pointer. Torch's Python bindings give
each of those at about 65 ns a call, which for a batch of 64 short token rows
costs more than the copy itself. When the native bridge to torch (the private
``dyntile.cpu._torch_tensors``, imported here alone) was built against the running
torch (``pip install --no-build-isolation`` with torch installed; see ``setup.py``),
:func:`describe_tensors` reads them natively, one call per batch; else, or for
anything but plain dense CPU tensors, it reads them through the bindings
(:func:`dyntile.cpu.pad.describe_tensors`). Both give the same answer. The same module
also reads the columns of a batch of dicts (:func:`loaders._leaf_handlers.mapping_columns`),
and reads a batch of flat dicts and writes it by a layout (:mod:`loaders._collate_layout`);
:func:`native_module` hands it out.
Imported only once a torch tensor is seen: importing dyntile imports no torch.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from dyntile.cpu import pad as _pad

__all__ = [
    "describe_tensors",
    "describe_native",
    "describe_rows",
    "native_module",
    "native_reader",
    "native_status",
    "requires_grad",
    "use_native",
]

_UNSET = object()
_native = _UNSET
NATIVE_API = 6  # the functions and signatures this package calls (_torch_tensors.cpp: DYNTILE_NATIVE_API)


def native_module():
    """The native module :mod:`dyntile.cpu._torch_tensors` (``describe``, ``dict_columns``,
    ``collate_dicts``), or ``None`` when it was not built or was built for another torch
    version (its layout of tensors may differ), or torch is not loaded yet."""
    global _native
    if _native is _UNSET:
        torch = sys.modules.get("torch")
        if torch is None:
            return None  # asked again once torch is loaded
        _native = None
        if np.dtype(np.intp).itemsize == 8:
            try:
                from dyntile.cpu import _torch_tensors
            except ImportError:
                pass
            else:
                if (
                    _torch_tensors.built_for == torch.__version__
                    and getattr(_torch_tensors, "api", 1) == NATIVE_API
                ):
                    _native = _torch_tensors
    return _native


@contextlib.contextmanager
def use_native(enabled: bool = True):
    """Within the block, tensors are read natively only when ``enabled`` and the module
    is usable (judged afresh on first use); with ``False`` every route reads them through
    torch's bindings, as without the module (tests and benchmarks compare the two).
    The previous choice comes back after the block.

    >>> with use_native(False):
    ...     native_module() is None and native_status().startswith(("switched off", "not loaded"))
    True
    """
    global _native
    saved, _native = _native, (_UNSET if enabled else None)
    try:
        yield
    finally:
        _native = saved


def native_reader():
    """The native ``describe`` function, or ``None`` (see :func:`native_module`)."""
    native = native_module()
    return None if native is None else native.describe


def native_status() -> str:
    """One line saying whether the native reader is in use, and if not, why (for logs
    and bug reports): ``"in use (built for torch X)"``, or what to do about it."""
    if native_reader() is not None:
        return f"in use (built for torch {sys.modules['torch'].__version__})"
    torch = sys.modules.get("torch")
    if torch is None:
        return "not loaded: torch is not imported"
    try:
        from dyntile.cpu import _torch_tensors
    except ImportError as e:
        return f"not built ({e}): install dyntile with torch present and `pip install --no-build-isolation`"
    if np.dtype(np.intp).itemsize != 8:
        return "not used: it needs a 64-bit Python"
    api = getattr(_torch_tensors, "api", 1)
    if api != NATIVE_API:
        return (
            f"not used: built from other sources (native API {api}, this dyntile calls {NATIVE_API}); "
            f"rebuild dyntile with `pip install --no-build-isolation`"
        )
    if _torch_tensors.built_for == torch.__version__:
        return "switched off (inside dyntile.tensor_reader.use_native(False): a test or benchmark)"
    return (
        f"not used: built for torch {_torch_tensors.built_for}, running {torch.__version__}; "
        f"reinstall dyntile with `pip install --no-build-isolation`"
    )


def describe_tensors(samples: list):
    """``(shapes, strides, ptrs, dtype, bad)`` for a list of CPU torch tensors: int64
    ``(B, ndim)`` sizes and byte strides, ``(B,)`` data pointers, the first sample's
    torch dtype, and ``bad`` = -1 when every sample is a dense CPU tensor of that rank
    and dtype whose memory holds its values (not complex, not a negative view, not a
    zero tensor), else the index of the first that is not (see
    :func:`dyntile.cpu.pad.describe_tensors`, which this matches)."""
    described = describe_native(samples)
    if described is not None:
        return described
    return _pad.describe_tensors(samples, sys.modules["torch"].Tensor)


def describe_native(samples: list):
    """:func:`describe_tensors`'s answer when the native reader is built and accepts
    every sample (plain dense CPU tensors of one rank and dtype), else ``None``."""
    native = native_reader()
    if native is None or not samples:
        return None
    x0 = samples[0]
    if type(x0) is not sys.modules["torch"].Tensor:
        return None
    read = _read(native, samples, x0.dim())
    return None if read is None else (*read[:3], x0.dtype, -1)


def describe_rows(samples: list):
    """``(shapes, strides, ptrs, longest, total)`` for B 1-D plain dense CPU tensors of
    one dtype, read natively: ``(B, 1)`` lengths and byte strides, data pointers, the
    longest row and the sum of the lengths. ``None`` when the native reader is missing
    or refuses a sample (the caller's general route then decides)."""
    native = native_reader()
    read = None if native is None else _read(native, samples, 1)
    if read is None:
        return None
    shapes, strides, ptrs, maxes, total = read
    return shapes, strides, ptrs, int(maxes[0]), total


def requires_grad(samples: list) -> bool:
    """Whether a torch tensor of the list ``samples`` requires grad (natively, one call,
    where the native module is built; through the bindings else)."""
    native = native_module()
    if native is not None:
        return native.first_requiring_grad(samples) >= 0
    return any(getattr(x, "requires_grad", False) for x in samples)


def _read(native, samples: list, nd: int):
    """One call of the native reader for tensors of rank ``nd``: ``(shapes, strides,
    ptrs, per-axis maxima, elements)``, or ``None`` when it refuses a sample."""
    n = len(samples)
    shapes = np.empty((n, nd), np.int64)
    strides = np.empty((n, nd), np.int64)
    ptrs = np.empty(n, np.intp)
    maxes = np.empty(max(nd, 1), np.int64)
    refused, elements = native(samples, nd, shapes, strides, ptrs, maxes)
    return None if refused != -1 else (shapes, strides, ptrs, maxes, elements)
