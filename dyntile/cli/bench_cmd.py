"""``dyntile bench``: a quick side-by-side of dyntile's kernels and the reference libraries.

* GEMM: ``dyntile.matmul`` against ``numpy.matmul`` (and ``torch.matmul`` when
  installed), square and odd sizes, float32 and float64;
* collate: ``dyntile.pad_batch`` of a ragged batch of token ids against
  ``torch.nn.utils.rnn.pad_sequence`` and a NumPy loop.

Each figure is the median of ``--repeat`` runs in one process; the table shows the
reference time divided by dyntile's (``> 1``: dyntile is faster). For history and
regressions use the asv suite: ``asv run`` in ``asv_benches/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

from dyntile.cli.errors import CLIError
from dyntile.cli.progress import add_progress_argument, progress
from dyntile.cli.table import format_table

__all__ = ["add_bench_arguments", "run_bench", "median_time"]

GEMM_SHAPES = ((256, 256, 256), (511, 257, 383), (1024, 1024, 1024))


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``dyntile bench``."""
    p.add_argument("--repeat", type=int, default=5, help="runs per figure, median reported (default 5)")
    p.add_argument("--quick", action="store_true", help="small sizes only (a few seconds)")
    p.add_argument("--seed", type=int, default=0, help="random inputs (default 0)")
    add_progress_argument(p)


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs, after one warm-up run.

    >>> median_time(lambda: sum(range(10)), 3) >= 0
    True
    """
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _gemm_row(dtype, shape: tuple[int, int, int], repeat: int, rng, torch) -> list:
    import dyntile

    m, k, n = shape
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    out = np.empty((m, n), dtype)
    t_dt = median_time(lambda: dyntile.matmul(a, b, out=out), repeat)
    t_np = median_time(lambda: np.matmul(a, b, out=out), repeat)
    row = [
        f"matmul {np.dtype(dtype).name} {m}x{k}x{n}",
        f"{1e3 * t_dt:.2f}",
        f"{2e-9 * m * k * n / t_dt:.1f}",
        f"{t_np / t_dt:.2f}",
    ]
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        row.append(f"{median_time(lambda: torch.matmul(ta, tb), repeat) / t_dt:.2f}")
    return row


def _collate_row(batch: int, repeat: int, rng, torch) -> list:
    import dyntile

    lengths = np.clip(rng.lognormal(3.2, 1.0, size=batch).astype(np.int64), 1, 1500)
    arrays = [rng.integers(1, 30000, size=int(n), dtype=np.int64) for n in lengths]
    width = -(-int(lengths.max()) // 8) * 8

    def numpy_loop():
        out = np.zeros((batch, width), np.int64)
        for i, x in enumerate(arrays):
            out[i, : x.size] = x
        return out

    t_dt = median_time(lambda: dyntile.pad_batch(arrays, multiple=8), repeat)
    t_np = median_time(numpy_loop, repeat)
    row = [
        f"pad_batch int64 B={batch} (max {int(lengths.max())})",
        f"{1e3 * t_dt:.3f}",
        "",
        f"{t_np / t_dt:.2f}",
    ]
    if torch is not None:
        from torch.nn.utils.rnn import pad_sequence

        tensors = [torch.from_numpy(x) for x in arrays]
        t_dt_torch = median_time(lambda: dyntile.pad_batch(tensors, multiple=8), repeat)
        row[1] = f"{1e3 * t_dt_torch:.3f}"
        row.append(f"{median_time(lambda: pad_sequence(tensors, batch_first=True), repeat) / t_dt_torch:.2f}")
    return row


def run_bench(args: argparse.Namespace, out=None) -> int:
    """Time and print the comparison table; return the exit status."""
    out = sys.stdout if out is None else out
    if args.repeat < 1:
        raise CLIError(f"--repeat should be a positive integer, but got {args.repeat}")
    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(args.seed)
    shapes = GEMM_SHAPES[:2] if args.quick else GEMM_SHAPES
    headers = ["case", "dyntile ms", "GFLOP/s", "x numpy", "x torch" if torch is not None else ""]
    # in this order the cases draw their inputs from rng as they always have
    cases = [(_gemm_row, (dtype, shape)) for dtype in (np.float32, np.float64) for shape in shapes]
    cases += [(_collate_row, (64,)), (_collate_row, (512,))]
    rows = [
        run(*case, args.repeat, rng, torch)
        for run, case in progress(cases, len(cases), "bench", not args.no_progress)
    ]
    print(format_table(headers if torch is not None else headers[:-1], rows), file=out)
    print(file=out)
    print(
        "x numpy / x torch: the reference's median time over dyntile's (> 1: dyntile is faster); "
        f"median of {args.repeat} runs after a warm-up, threads as configured.",
        file=out,
    )
    if torch is None:
        print("torch is not installed: torch columns left out (pip install torch==2.13.0)", file=out)
    print("history and regressions: the asv suite in asv_benches/ (asv run; asv compare)", file=out)
    return 0
