"""Print dyntile.matmul's speed beside NumPy's (OpenBLAS) and torch's, side by side.

Each cell times both libraries in one process, alternating calls, limited to the
same number of threads (threadpoolctl for OpenBLAS, torch.set_num_threads for
torch), and reports median GFLOP/s and the ratio dyntile/NumPy as the median (and
quartiles) of round-by-round ratios. Run with OpenBLAS's core-type overrides unset:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python asv_benches/gemm_compare.py

Options: --sizes 64 256 ..., --threads 1 2, --dtypes float32 float64, --torch,
--ghz (core clock for the % of FMA peak, default /proc/cpuinfo's "cpu MHz", which
under a hypervisor is often the nominal clock: measure the real one with a dependent
add or imul loop, e.g. 2.5 GHz on the 2-core Xeon and 3.2 GHz on the 2-core EPYC
Zen 3 where this project was tuned), --repeat N (timed calls per cell; default by size).
Peak = clock x 2 FMA ports x lanes (AVX-512: 16 float32 / 8 float64; AVX2: 8 / 4) x 2 flops;
AMD Zen 4 runs AVX-512 on its two 256-bit ports, so its AVX-512 lanes count as AVX2's
(measured there: 3.6 GHz under load, by a dependent add loop).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

import dyntile
from dyntile.cpu import gemm

LAYER = (4096, 768, 768)  # (m, k, n): a transformer layer's activations @ weights
FMA_UNITS = 2  # FMA ports per core (Skylake-X: 512-bit; Haswell, Zen 2-4: 256-bit)


def cpu_ghz() -> float:
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        return max(mhz) / 1000 if mhz else float("nan")
    except OSError:
        return float("nan")


def peak_gflops(dtype: np.dtype, threads: int, ghz: float) -> float:
    width = {"avx512": 64, "avx2": 32}.get(gemm.isa(), 16)  # bytes per FMA port
    if gemm.isa() == "avx512" and gemm.cpu_tuning() == "zen4":  # 512-bit ops on 256-bit ports
        width = 32
    lanes = width // dtype.itemsize
    return 2 * FMA_UNITS * lanes * ghz * threads


def time_calls(fns, repeat: int, clock=time.perf_counter, settle: float = 0.0) -> list[list[float]]:
    """Seconds of each timed call, per function, the libraries interleaved so that
    load hits all alike (``times[i][r]``: function i in round r).

    Each timed call follows ``settle`` seconds of sleep and an untimed call of the same
    function, so it does not pay for the previous library's idle worker threads still
    spinning on the other core (OpenBLAS spins for about 0.1 s after a call).
    """
    times = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            if settle:
                time.sleep(settle)
            fn()
            t0 = clock()
            fn()
            times[i].append(clock() - t0)
    return times


def paired_ratio(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """Median and quartiles of their time over ours, round by round: a machine whose
    speed drifts (a busy host) moves both calls of a round alike."""
    r = sorted(t / o for o, t in zip(ours, theirs))
    q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
    return q[1], q[0], q[2]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[64, 256, 512, 1024, 2048])
    p.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    p.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    p.add_argument("--no-layer", action="store_true", help="skip the 4096x768 @ 768x768 shape")
    p.add_argument("--torch", action="store_true", help="add a torch column")
    p.add_argument("--ghz", type=float, default=None)
    p.add_argument("--repeat", type=int, default=None, help="timed calls per cell (default by size)")
    p.add_argument(
        "--settle",
        type=float,
        default=0.15,
        help="seconds of sleep before each multi-threaded cell's calls (other "
        "libraries' spinning workers go idle)",
    )
    p.add_argument(
        "--clock",
        choices=["wall", "thread"],
        default="wall",
        help="'thread': CPU time of the calling thread for one-thread cells "
        "(robust to other processes time-slicing the core; two-thread "
        "cells stay wall-clock)",
    )
    args = p.parse_args(argv)

    torch = None
    if args.torch:
        import torch
    ghz = args.ghz or cpu_ghz()
    shapes = [(n, n, n) for n in args.sizes] + ([] if args.no_layer else [LAYER])
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"dyntile ISA {gemm.isa()}, clock {ghz:.2f} GHz, OpenBLAS env {env}, "
        f"load average {load:.2f} on {os.cpu_count()} CPUs, timing: {args.clock}"
    )
    head = (
        f"{'m x k x n':>18} {'dtype':>8} {'thr':>3} {'dyntile':>8} {'numpy':>8} {'ratio':>6} "
        f"{'(quartiles)':>11} {'%peak':>6}"
    )
    print(head + (f" {'torch':>8} {'ratio':>6}" if torch else ""))
    rng = np.random.default_rng(0)
    for threads in args.threads:
        for dtype in map(np.dtype, args.dtypes):
            for m, k, n in shapes:
                a = rng.standard_normal((m, k)).astype(dtype)
                b = rng.standard_normal((k, n)).astype(dtype)
                c1, c2 = np.empty((m, n), dtype), np.empty((m, n), dtype)
                flops = 2.0 * m * n * k
                repeat = args.repeat or max(5, min(200 if threads == 1 else 15, int(2e9 / flops)))
                fns = [lambda: dyntile.matmul(a, b, out=c1, threads=threads), lambda: np.matmul(a, b, out=c2)]
                if torch is not None:
                    ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c2)
                    fns.append(lambda: torch.matmul(ta, tb, out=tc))
                prev_torch = torch.get_num_threads() if torch is not None else None
                if torch is not None:
                    torch.set_num_threads(threads)
                with threadpool_limits(limits=threads, user_api="blas"):
                    clock = time.thread_time if args.clock == "thread" and threads == 1 else time.perf_counter
                    times = time_calls(fns, repeat, clock, args.settle if threads > 1 else 0.0)
                if torch is not None:
                    torch.set_num_threads(prev_torch)
                rates = [flops / statistics.median(t) / 1e9 for t in times]
                ratio, q1, q3 = paired_ratio(times[0], times[1])
                peak = peak_gflops(dtype, threads, ghz)
                line = (
                    f"{f'{m}x{k}x{n}':>18} {dtype.name:>8} {threads:>3} {rates[0]:8.1f} "
                    f"{rates[1]:8.1f} {ratio:6.2f} {f'{q1:.2f}-{q3:.2f}':>11} {100 * rates[0] / peak:5.0f}%"
                )
                if torch is not None:
                    line += f" {rates[2]:8.1f} {paired_ratio(times[0], times[2])[0]:6.2f}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
