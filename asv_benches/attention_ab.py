"""Two builds of the CPU attention kernels side by side in one process: forward +
backward, fp32, H = 4, causal, on the packed 2048-token rows of
benchmarks/bench_attention.py, runs interleaved (old, new, new, old, ...), medians.

For a kernel change: copy the old build's ``dyntile/cpu/attention*.so`` aside first.

    python asv_benches/attention_ab.py OLD.so [--new NEW.so] [--threads 1] [--rounds 41]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the asv suite, as a package

from benchmarks.bench_attention import HEADS, T, packed_rows  # noqa: E402


def load(path: str):
    """The extension module at ``path`` (each path its own module, though both are named attention)."""
    spec = importlib.util.spec_from_file_location("attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("old", help="the old build's attention extension (.so)")
    here = glob.glob(str(HERE.parent / "dyntile" / "cpu" / "attention*.so"))
    p.add_argument("--new", default=here[0] if here else None, help="default: this tree's build")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=41, help="timed runs of each build per head dim")
    args = p.parse_args(argv)
    builds = {"old": load(args.old), "new": load(args.new)}
    rows = packed_rows()
    lens = np.array([n for row in rows for n in row], np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    n_tokens = len(rows) * T
    rng = np.random.default_rng(0)
    print(f"{'D':>3}  {'old ms':>8}  {'new ms':>8}  {'new/old':>7}", end="")
    print(f"   ({args.threads} threads, {args.rounds} runs each)")
    for dim in (16, 32, 64):
        q, k, v, dout = (rng.standard_normal((n_tokens, HEADS, dim)).astype(np.float32) for _ in range(4))

        def step(m, q=q, k=k, v=v, dout=dout, scale=dim**-0.5):
            out, lse = m.forward(q, k, v, starts, lens, True, scale, args.threads)
            m.backward(dout, q, k, v, out, lse, starts, lens, True, scale, args.threads)

        times = {"old": [], "new": []}
        for r in range(args.rounds):
            for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
                t0 = time.perf_counter()
                step(builds[name])
                times[name].append(time.perf_counter() - t0)
        old, new = (statistics.median(times[n]) for n in ("old", "new"))
        print(f"{dim:>3}  {old * 1e3:>8.2f}  {new * 1e3:>8.2f}  {new / old:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
