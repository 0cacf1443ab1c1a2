"""Whether a collate's ``pin_memory=True`` can pin: the one rule both collates follow."""

from __future__ import annotations

import warnings

import torch

__all__ = ["pinning_available"]

_WARNED = False


def pinning_available(who: str) -> bool:
    """True when CUDA is there to pin host memory for; else ``False``, with one
    ``RuntimeWarning`` per process naming ``who`` asked (outputs stay in ordinary memory).

    >>> pinning_available("DynTileCollate") in (True, False)
    True
    """
    global _WARNED
    if torch.cuda.is_available():
        return True
    if not _WARNED:
        warnings.warn(
            f"{who}(pin_memory=True): pinned memory needs CUDA, which this torch build or machine lacks; "
            "outputs are allocated in ordinary memory",
            RuntimeWarning,
            stacklevel=3,
        )
        _WARNED = True
    return False
