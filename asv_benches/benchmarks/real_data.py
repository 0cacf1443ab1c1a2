"""Length data the benchmarks share: the real CPython docstring token lengths from
``../shared/data`` when present, else a fixed synthetic stand-in with the same
shape of distribution (log-normal, mean ~54, capped at 1600), so CI still records
every quality figure. ``DYNTILE_DATA`` points at another data folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("DYNTILE_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))


def docstring_lengths() -> np.ndarray:
    """int64 ``(8604,)`` token lengths: real when available, synthetic otherwise."""
    path = DATA / "lengths_cpython_docstrings.npy"
    if path.exists():
        return np.load(path).astype(np.int64)
    rng = np.random.default_rng(0)
    return np.minimum(rng.lognormal(3.3, 1.1, 8604).astype(np.int64) + 2, 1600)
