"""pad_batch and PackedCollate microseconds per call in two source trees, side by side.

For a change of the native row writer (``dyntile/cpu/include/rows_write.h``), which the
two trees must each have built: every tree runs the same inputs in a subprocess of its
own (two builds of one extension cannot share a process), the trees interleaved round
after round; each round keeps, per case, the best of its timed passes and the table
gives the median over rounds, and the ratio. ``DynTileCollate`` has its own script
(``collate_trees.py``).

Run: ``python asv_benches/rows_write_trees.py OLD_TREE NEW_TREE [--rounds 6]``
(CPU time of the process, torch single-threaded).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: what one subprocess runs, in the tree it is started in
CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np
import torch
torch.set_num_threads(1)
import dyntile, loaders
from dyntile import pad_batch
from loaders import PackedCollate
assert dyntile.__file__.startswith(os.getcwd()), dyntile.__file__

rng = np.random.default_rng(0)
lens = rng.integers(20, 400, 64)
rows64 = [torch.from_numpy(rng.integers(1, 30000, int(n))) for n in lens]
rows32 = [r.to(torch.float32) for r in rows64]
strided = [torch.from_numpy(rng.integers(1, 30000, 2 * int(n)))[::2] for n in lens]
short = [torch.from_numpy(rng.integers(1, 30000, int(n))) for n in rng.integers(1, 12, 64)]
images = [rng.standard_normal((int(h), int(w), 3)).astype(np.float32)
          for h, w in rng.integers(20, 40, (16, 2))]
uint8 = [rng.integers(0, 255, int(n)).astype(np.uint8) for n in lens]
lists = [r.tolist() for r in rows64]
long64 = [torch.from_numpy(rng.integers(1, 30000, int(n))) for n in rng.integers(200, 4000, 64)]
long32 = [r.to(torch.float32) for r in long64]
packed = PackedCollate([(16, 2048)], overflow="extend")
packed_strided = PackedCollate([(16, 2048)], overflow="extend")
packed_left = [{"input_ids": r, "labels": r} for r in rows64]
cases = {
    "pad_batch 64 int64 tensors": lambda: pad_batch(rows64),
    "pad_batch 64 int64, fill -100 left": lambda: pad_batch(rows64, fill=-100, side="left"),
    "pad_batch 64 float32, fill 1": lambda: pad_batch(rows32, fill=1.0),
    "pad_batch 64 strided int64": lambda: pad_batch(strided),
    "pad_batch 64 short int64": lambda: pad_batch(short),
    "pad_batch 64 uint8 arrays": lambda: pad_batch(uint8, fill=7),
    "pad_batch 16 images HxWx3": lambda: pad_batch(images),
    "pad_batch 64 int lists": lambda: pad_batch(lists),
    "pad_batch 64 long int64, fill -100": lambda: pad_batch(long64, fill=-100),
    "pad_batch 64 long float32, fill 1": lambda: pad_batch(long32, fill=1.0),
    "PackedCollate 64 tensors": lambda: packed(rows64),
    "PackedCollate 64 strided": lambda: packed_strided(strided),
    "PackedCollate 64 ids+labels": lambda: packed(packed_left),
    "PackedCollate 64 lists": lambda: packed(lists),
}
out = {}
for name, call in cases.items():
    passes = []
    for _ in range(7):
        call()
        t0 = time.process_time()
        for _ in range(50):
            call()
        passes.append((time.process_time() - t0) / 50 * 1e6)
    out[name] = min(passes)
print(json.dumps(out))
"""


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from collate_trees import compare_trees

    compare_trees(CHILD, __doc__.splitlines()[0])
