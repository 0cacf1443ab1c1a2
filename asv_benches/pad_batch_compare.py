"""``pad_batch`` of two revisions side by side in one process: the padding module of
an older commit (read with ``git show``, imported beside today's dyntile) against
the working tree's, runs interleaved (old, new, old, ...), medians (and minima: on a
busy machine the runs that no other process interrupted) of per-call microseconds,
on a few input kinds: torch tensors (1-D rows, 2-D, ``out=``), NumPy
arrays, lists of Python numbers.

For a change of the Python routes only (the old module must import against today's
other dyntile modules):

    python asv_benches/pad_batch_compare.py OLD_COMMIT [--rounds 201] [--number 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the working tree's dyntile

from dyntile import padding  # noqa: E402


def old_padding(commit: str):
    """The module ``dyntile/padding.py`` as it was at ``commit``, imported as ``padding_old``."""
    text = subprocess.run(
        ["git", "show", f"{commit}:dyntile/padding.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "padding_old.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("padding_old", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases() -> dict:
    """name -> (samples, keyword arguments): 64 samples of lengths 1..199 unless named."""
    g = np.random.default_rng(0)
    lengths = [int(n) for n in g.integers(1, 200, 64)]
    return {
        "torch 1-D int64 x64": ([torch.randint(0, 30000, (n,)) for n in lengths], {}),
        "torch 1-D int64 x8": ([torch.randint(0, 30000, (n,)) for n in lengths[:8]], {}),
        "torch 2-D f32 (n,16) x64": ([torch.randn(n, 16) for n in lengths], {}),
        "torch 1-D, out=": (
            [torch.randint(0, 9, (n,)) for n in lengths],
            {"multiple": 200, "out": torch.empty(64, 200, dtype=torch.int64)},
        ),
        "numpy 1-D int64 x64": ([np.arange(n) for n in lengths], {}),
        "numpy 2-D f32 (n,16) x64": ([np.ones((n, 16), np.float32) for n in lengths], {}),
        "numpy int32+int64 x64": (
            [np.arange(n, dtype=np.int32 if i % 2 else np.int64) for i, n in enumerate(lengths)],
            {},
        ),
        "lists of ints x64": ([list(range(n)) for n in lengths], {}),
        "lists of floats x64": ([[0.5] * n for n in lengths], {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the older commit (e.g. main before a change)")
    parser.add_argument("--rounds", type=int, default=201)
    parser.add_argument("--number", type=int, default=20, help="calls per timed run")
    args = parser.parse_args()
    old = old_padding(args.commit)
    head = ("old us", "new us", "new/old", "min old", "min new", "ratio")
    print(f"{'case':28s} " + " ".join(f"{h:>8s}" for h in head))
    for name, (samples, kwargs) in cases().items():
        times = {old.pad_batch: [], padding.pad_batch: []}
        for _ in range(args.rounds):
            for fn, acc in times.items():
                t0 = time.perf_counter()
                for _ in range(args.number):
                    fn(samples, **kwargs)
                acc.append((time.perf_counter() - t0) / args.number * 1e6)
        a, b = (statistics.median(acc) for acc in times.values())
        lo_a, lo_b = (min(acc) for acc in times.values())
        print(f"{name:28s} {a:8.2f} {b:8.2f} {b / a:8.3f} {lo_a:8.2f} {lo_b:8.2f} {lo_b / lo_a:8.3f}")


if __name__ == "__main__":
    main()
