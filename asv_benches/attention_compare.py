"""Side by side in one process: dyntile.varlen_attention against torch's SDPA.

Forward + backward, fp32, on packed 2048-token rows of real lengths (../shared/data,
else a synthetic stand-in), H = 4, D = 16, 32, 64: SDPA with the dense block-diagonal
mask, a per-segment SDPA loop, and dyntile; useful GFLOP/s by the formula in
benchmarks/bench_attention.py, next to dyntile.matmul's at n = 1024 in the same run.

    python asv_benches/attention_compare.py [--threads 2] [--repeat 9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the asv suite, as a package

from benchmarks.bench_attention import Case  # noqa: E402

import dyntile  # noqa: E402
from dyntile.cli.bench_cmd import median_time  # noqa: E402


def matmul_gflops(threads: int, repeat: int) -> float:
    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    return 2 * 1024**3 / median_time(lambda: dyntile.matmul(a, a, threads=threads), repeat) / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2, help="torch and dyntile threads (default 2)")
    p.add_argument("--repeat", type=int, default=9, help="timed runs per method; the median is kept")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"{'D':>3}  {'rows x segments':>15}  {'SDPA dense mask':>15}  {'SDPA loop':>10}  {'dyntile':>8}  "
        f"{'vs dense':>8}  {'vs loop':>7}  {'useful GFLOP/s':>14}"
    )
    for dim in (16, 32, 64):
        case = Case(dim)
        t_dense, t_loop, t_dt = (
            median_time(f, args.repeat) for f in (case.sdpa_dense, case.sdpa_loop, case.dyntile)
        )
        segs = sum(len(r) for r in case.rows)
        print(
            f"{dim:>3}  {len(case.rows):>6} x {segs:>6}  {t_dense * 1e3:>12.1f} ms  {t_loop * 1e3:>7.1f} ms  "
            f"{t_dt * 1e3:>5.1f} ms  {t_dense / t_dt:>7.1f}x  {t_loop / t_dt:>6.1f}x  "
            f"{case.flops / t_dt / 1e9:>14.1f}"
        )
    print(
        f"dyntile.matmul at n = 1024, float32, {args.threads} threads: "
        f"{matmul_gflops(args.threads, args.repeat):.1f} "
        f"GFLOP/s; varlen attention kernels: {dyntile.cpu.attention.isa()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
