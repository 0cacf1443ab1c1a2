"""Run a function on every rank of a local ``torch.distributed`` gloo group, each rank a
spawned process, and collect what each returns (JSON values)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework_runs import free_port


def on_gloo_ranks(fn, out: Path, world: int = 2) -> list:
    """``[fn(0), ..., fn(world - 1)]``, each called inside the group on its own rank
    (``fn``: a module-level function, so that spawn can pickle it); each result goes
    through ``out/rank<R>.json``. Skips where torch has no ``torch.distributed``."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available():
        pytest.skip("torch built without torch.distributed")
    mp.spawn(_rank, args=(fn, free_port(), world, str(out)), nprocs=world, join=True)
    return [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(world)]


def _rank(rank: int, fn, port: int, world: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        result = fn(rank)
    finally:
        dist.destroy_process_group()
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))
