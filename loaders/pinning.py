"""Where a collate's ``pin_memory=True`` pins: the rules both collates follow."""

from __future__ import annotations

import warnings

import torch

__all__ = ["pinning_available", "warn_no_pinning_in_worker"]

_WARNED = False


def pinning_available(who: str) -> bool:
    """True when CUDA is there to pin host memory for; else ``False``, with one
    ``RuntimeWarning`` per process naming ``who`` asked (outputs stay in ordinary memory).

    >>> pinning_available("DynTileCollate") == torch.cuda.is_available()  # pins only where CUDA is
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


def warn_no_pinning_in_worker(who: str) -> None:
    """The warning of a collate that stops pinning in a ``DataLoader`` worker: pinning
    there would start CUDA in the worker (which a forked worker of a process that uses
    CUDA cannot do), and the pages would not survive the transfer to the main process."""
    warnings.warn(
        f"{who}(pin_memory=True) does not pin in DataLoader workers (pinning there would "
        "initialise CUDA in the worker, and the transfer to the main process drops it); pass "
        "pin_memory=True to the DataLoader, which pins in the main process",
        RuntimeWarning,
        stacklevel=4,
    )
