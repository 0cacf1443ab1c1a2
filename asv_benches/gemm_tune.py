"""Sweep dyntile's GEMM cache blocks on this CPU, each beside NumPy (OpenBLAS).

The block-size table (``dyntile/cpu/include/gemm_blocking.h``) is tuned per CPU; this
script is how its rows were chosen. Each round times NumPy once and then every
candidate (MC, KC, NC, loop order) once, all in one process, and reports each
candidate's median GFLOP/s and its round-by-round ratio to NumPy: a candidate is
better than the table's row when its ratio is, by more than the spread between two
runs (the table's row is always candidate 0). Run with OpenBLAS's overrides unset:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python asv_benches/gemm_tune.py \\
        --dtype float64 --sizes 1024 2048 --kc 320 512 1024 --mc 84 112 168

Every combination of the --mc, --kc, --nc and --jr-outer values given is a candidate
(a value not given stays the table's). ``--threads 2`` sleeps before NumPy's call and
before the candidates' (each library's idle workers spin on the other core for a
while after a call) and gives each timed call two untimed ones first.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

import dyntile
from dyntile.cpu import gemm

LAYER = (4096, 768, 768)  # (m, k, n); size 0 on the command line


def candidates(args, row: dict) -> list[dict]:
    """The table's row first, then every combination of the values asked for."""
    axes = {
        name: values
        for name, values in (("mc", args.mc), ("kc", args.kc), ("nc", args.nc), ("jr_outer", args.jr_outer))
        if values
    }
    base = {name: row[name] for name in ("mc", "kc", "nc", "jr_outer")}
    out = [base]
    for combo in itertools.product(*axes.values()):
        cand = {**base, **dict(zip(axes, combo))}
        if cand not in out:
            out.append(cand)
    return out


def sweep(dtype: np.dtype, shape: tuple, cands: list[dict], rounds: int, threads: int) -> None:
    m, k, n = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c_ours, c_numpy = np.empty((m, n), dtype), np.empty((m, n), dtype)
    flops = 2.0 * m * n * k
    isa = gemm.isa()
    settle, warm = (0.15, 2) if threads > 1 else (0.0, 1)
    t_numpy, t_ours = [], [[] for _ in cands]

    def timed(fn):
        for _ in range(warm):
            fn()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    try:
        with threadpool_limits(limits=threads, user_api="blas"):
            for _ in range(rounds):
                time.sleep(settle)
                t_numpy.append(timed(lambda: np.matmul(a, b, out=c_numpy)))
                time.sleep(settle)
                for i, cand in enumerate(cands):
                    gemm._set_cache_blocks(isa, dtype.name, **cand)
                    t_ours[i].append(timed(lambda: dyntile.matmul(a, b, out=c_ours, threads=threads)))
    finally:
        gemm._reset_cache_blocks()
    print(
        f"{m}x{k}x{n} {dtype.name} threads={threads} ({isa}, {gemm.cpu_tuning()}): "
        f"numpy {flops / statistics.median(t_numpy) / 1e9:.1f} GFLOP/s"
    )
    for i, cand in enumerate(cands):
        ratio = statistics.median(tn / to for tn, to in zip(t_numpy, t_ours[i]))
        tag = "table" if i == 0 else ""
        print(
            f"  MC={cand['mc']:<5} KC={cand['kc']:<5} NC={cand['nc']:<5} "
            f"jr_outer={int(cand['jr_outer'])}  {flops / statistics.median(t_ours[i]) / 1e9:7.1f} "
            f"GFLOP/s  ratio {ratio:.3f} {tag}",
            flush=True,
        )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=[1024, 2048],
        help="n of n x n x n products; 0 is the 4096x768 @ 768x768 layer",
    )
    p.add_argument("--mc", type=int, nargs="*", default=[])
    p.add_argument("--kc", type=int, nargs="*", default=[])
    p.add_argument("--nc", type=int, nargs="*", default=[])
    p.add_argument("--jr-outer", type=int, nargs="*", default=[], choices=[0, 1])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    dtype = np.dtype(args.dtype)
    row = gemm.blocking_table()[gemm.isa(), dtype.name]
    cands = candidates(args, row)
    for mc in {c["mc"] for c in cands}:
        if mc % row["mr"]:
            p.error(f"MC should be a multiple of MR={row['mr']}, but got {mc}")
    for nc in {c["nc"] for c in cands}:
        if nc % row["nr"]:
            p.error(f"NC should be a multiple of NR={row['nr']}, but got {nc}")
    for size in args.sizes:
        sweep(dtype, LAYER if size == 0 else (size, size, size), cands, args.rounds, args.threads)


if __name__ == "__main__":
    main()
