"""DynTileCollate microseconds per batch in two source trees, side by side.

Each tree (a checkout with its native modules built) runs the same batches in a
subprocess of its own (two builds of one extension cannot share a process), the trees
interleaved round after round; each round reports, per case, the best of its timed
passes (the least disturbed by other processes) and the table gives the median over
rounds, and the ratio. The last two cases' batches never repeat their batch size and
longest rows within a collate's memory of layouts: in "all new" many share the widths
those rows pad to (the facts a layout is kept by), in "all new widths" none does, so
that every batch is laid out anew (the worst case of a layout kept per facts).

Run: ``python asv_benches/collate_trees.py OLD_TREE NEW_TREE [--rounds 6]``
(CPU time of the process, ``time.process_time``: a busy machine inflates it less than
wall time; torch single-threaded, as in a ``DataLoader`` worker).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

#: what one subprocess runs, in the tree it is started in
CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "asv_benches"))
import torch
torch.set_num_threads(1)
from benchmarks.bench_collate import make_batches
import dyntile, loaders
from loaders import DynTileCollate
assert dyntile.__file__.startswith(os.getcwd()), dyntile.__file__

_, grouped = make_batches("lists", order="grouped")
_, tensors = make_batches("tensors", order="grouped")
_, random_lists = make_batches("lists", order="random")
cases = {
    "64 x 2 keys, tensors, grouped": tensors,
    "64 x 2 keys, lists, grouped": grouped,
    "64 x 2 keys, lists, random": random_lists,
    "8 x 2 keys, lists, grouped": [b[:8] for b in grouped],
    "64 x tokenizer keys + label": [
        [{"input_ids": s["input_ids"], "token_type_ids": [0] * len(s["input_ids"]),
          "attention_mask": [1] * len(s["input_ids"]), "label": 1} for s in b]
        for b in grouped
    ],
    # 2048 batches of distinct (size, longest row), more than a collate keeps layouts
    # for; their facts, (size, width of the longest row), take a few hundred values
    "2-33 x 2 keys, lists, all new": [
        [{"input_ids": list(range(1, 1 + (L if i == 0 else 1 + i % L))),
          "labels": list(range(1 + i % L))} for i in range(B)]
        for B in range(2, 34) for L in range(1, 65)
    ],
    # 1280 batches of distinct (size, width): every batch is laid out anew
    "2-33 x 2 keys, lists, all new widths": [
        [{"input_ids": list(range(1, 1 + (L if i == 0 else 1 + i % L))),
          "labels": list(range(1 + i % L))} for i in range(B)]
        for B in range(2, 34) for L in range(8, 8 * 41, 8)
    ],
}
out = {}
for name, batches in cases.items():
    collate = DynTileCollate()
    passes = []
    for _ in range(9):
        for b in batches:
            collate(b)
        t0 = time.process_time()
        for _ in range(5):
            for b in batches:
                collate(b)
        passes.append((time.process_time() - t0) / (5 * len(batches)) * 1e6)
    out[name] = min(passes)
print(json.dumps(out))
"""


def run(child: str, tree: Path) -> dict:
    """The ``{case: us}`` the ``child`` script prints when run in ``tree``."""
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=tree, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_trees(child: str, description: str, argv=None) -> None:
    """Run ``child`` in the trees ``old`` and ``new`` alternately, ``--rounds`` times each,
    and print each case's median microseconds and new/old."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    got: dict = {"old": [], "new": []}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for which in order:
            got[which].append(run(child, getattr(args, which)))
    width = max(map(len, got["old"][0]))
    print(f"{'case':{width}s} {'old us':>8s} {'new us':>8s} {'new/old':>8s}")
    for case in got["old"][0]:
        old = statistics.median(d[case] for d in got["old"])
        new = statistics.median(d[case] for d in got["new"])
        print(f"{case:{width}s} {old:8.2f} {new:8.2f} {new / old:8.3f}")


if __name__ == "__main__":
    compare_trees(CHILD, __doc__.splitlines()[0])
