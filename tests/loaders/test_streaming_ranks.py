"""StreamingPacker and StreamingBucketer on 2 ranks of a real torch.distributed group
(gloo on 127.0.0.1): every sample once, equal step counts when one rank's part is 5x
smaller (repeats or drops, reported), no hang, and exact resume through RanksInStep
at random steps of 2 epochs, steps in the dry rank's tail included."""

from __future__ import annotations

import collections
import json
import socket
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WORLD = 2
N = 1203


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _corpus(ids) -> list[dict]:
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(4.2, 0.9, N).astype(np.int64), 1, 600)
    return [{"input_ids": np.zeros(lengths[i], np.int64), "id": int(i)} for i in ids]


def _ids(batch) -> list:
    return [int(s["id"]) for s in batch]


def _run(ds) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = [[int(s["id"]) for s in b] for b in ds]
    return {"batches": batches, "report": ds.report, "warned": [str(w.message) for w in caught]}


def _worker(rank: int, port: int, out_dir: str) -> None:
    from loaders import StreamingBucketer, StreamingPacker

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        whole = _corpus(range(N))
        small = list(range(1000)) if rank == 0 else list(range(1000, 1200))  # rank 1: 5x fewer
        out = {
            "packer": _run(StreamingPacker(whole, max_tokens=2048, buffer_size=200, seq_len=512)),
            "bucketer": _run(StreamingBucketer(whole, max_tokens=4096, buffer_size=256, max_buckets=4)),
            "pad": _run(
                StreamingPacker(_corpus(small), max_tokens=2048, buffer_size=128, source_shards="ranks")
            ),
            "drop": _run(
                StreamingPacker(
                    _corpus(small), max_tokens=2048, buffer_size=128, source_shards="ranks", drop_last=True
                )
            ),
        }
        from torch.utils.data import DataLoader

        from loaders import RanksInStep

        workers = StreamingPacker(
            _corpus(small), max_tokens=2048, buffer_size=64, source_shards="ranks", seq_len=512
        )
        for drop in (False, True):
            t0 = time.monotonic()
            dl = DataLoader(
                workers, batch_size=None, collate_fn=_ids, num_workers=2, multiprocessing_context="forkserver"
            )
            wrapped = RanksInStep(dl, drop_last=drop)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                batches = list(wrapped)
            out[f"workers_drop{drop}"] = {
                "batches": batches,
                "report": wrapped.report,
                "s": time.monotonic() - t0,
            }
        with open(f"{out_dir}/rank{rank}.json", "w") as f:
            json.dump(out, f)
    finally:
        dist.destroy_process_group()


def _spawn(worker, out, seconds: float, hang: str) -> list:
    """``worker(rank, port, out_dir)`` on every rank, each writing ``rank{r}.json`` in ``out``;
    the test fails with ``hang`` if they do not end within ``seconds``."""
    port = _free_port()
    ctx = mp.start_processes(worker, args=(port, str(out)), nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + seconds
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(hang)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("stream_ranks")
    return _spawn(_worker, out, 120, "the ranks hung: a rank that ran dry first kept the other waiting")


def _real(result) -> list:
    """The batches that are not repeats (a dry rank's repeats come after its data)."""
    n = len(result["batches"]) - result["report"]["repeated_batches"]
    return result["batches"][:n]


@pytest.mark.parametrize("case", ["packer", "bucketer"])
def test_every_sample_once_across_ranks_in_equal_steps(ranks, case):
    a, b = ranks[0][case], ranks[1][case]
    assert len(a["batches"]) == len(b["batches"]) == a["report"]["steps"]
    counts = collections.Counter(i for r in (a, b) for batch in _real(r) for i in batch)
    assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}
    shards = [{i for batch in _real(r) for i in batch} for r in (a, b)]
    assert shards[0] == set(range(0, N, 2))  # round robin: each rank reads its own part


def test_a_rank_with_5x_less_data_repeats_to_stay_in_step(ranks):
    a, b = ranks[0]["pad"], ranks[1]["pad"]
    assert len(a["batches"]) == len(b["batches"])
    assert a["report"]["repeated_batches"] == 0 < b["report"]["repeated_batches"]
    assert any("repeated" in w for w in b["warned"])
    for r, ids in ((a, range(1000)), (b, range(1000, 1200))):
        counts = collections.Counter(i for batch in _real(r) for i in batch)
        assert sorted(counts) == list(ids) and set(counts.values()) == {1}
    assert {i for batch in b["batches"] for i in batch} <= set(range(1000, 1200))


def test_a_rank_with_5x_less_data_stops_all_with_drop_last(ranks):
    a, b = ranks[0]["drop"], ranks[1]["drop"]
    assert len(a["batches"]) == len(b["batches"])
    counts = collections.Counter(i for batch in b["batches"] for i in batch)
    assert sorted(counts) == list(range(1000, 1200)) and set(counts.values()) == {1}
    assert a["report"]["unread_source"] and any("dropped" in w for w in a["warned"])
    seen = [i for batch in a["batches"] for i in batch]
    assert len(seen) == len(set(seen)) and a["report"]["dropped_samples"] >= 0


def test_workers_on_ranks_in_step_through_ranks_in_step(ranks):
    a, b = ranks[0]["workers_dropFalse"], ranks[1]["workers_dropFalse"]
    assert len(a["batches"]) == len(b["batches"]) == a["report"]["steps"]
    assert a["report"]["repeated_batches"] == 0 < b["report"]["repeated_batches"]
    for r, ids in ((a, range(1000)), (b, range(1000, 1200))):
        n = len(r["batches"]) - r["report"]["repeated_batches"]
        counts = collections.Counter(i for batch in r["batches"][:n] for i in batch)
        assert sorted(counts) == list(ids) and set(counts.values()) == {1}
    a, b = ranks[0]["workers_dropTrue"], ranks[1]["workers_dropTrue"]
    assert len(a["batches"]) == len(b["batches"]) and a["report"]["dropped_batches"] == 1
    assert sorted(i for batch in b["batches"] for i in batch) == list(range(1000, 1200))


# ------------------------------------------------------------------ resume in step


def _resume_worker(rank: int, port: int, out_dir: str) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from loaders import RanksInStep, StreamingPacker

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    warnings.simplefilter("ignore")
    try:
        data = _corpus(range(600) if rank == 0 else range(600, 720))  # rank 1: 5x fewer

        def run(workers, epoch, state=None, stop=None):
            ds = StreamingPacker(data, max_tokens=2048, buffer_size=64, source_shards="ranks", seq_len=512)
            ds.set_epoch(epoch)
            context = "forkserver" if workers else None
            loader = StatefulDataLoader(
                ds, batch_size=None, collate_fn=_ids, num_workers=workers, multiprocessing_context=context
            )
            wrapped = RanksInStep(loader)
            if state is not None:
                wrapped.load_state_dict(state)
            out = []
            for batch in wrapped:
                out.append(batch)
                if len(out) == stop:
                    break
            # repeats: RanksInStep's (num_workers > 0), or the packer's own (num_workers=0)
            repeats = wrapped.report["repeated_batches"] + ds.report.get("repeated_batches", 0)
            return out, wrapped.state_dict(), {**wrapped.report, "repeats": repeats}

        out = {}
        for workers in (0, 2):
            whole = [run(workers, e) for e in (0, 1)]
            rng = np.random.default_rng(workers)  # the same stops on both ranks
            steps = [(e, i) for e in (0, 1) for i in range(1, len(whole[e][0]))]
            stops = [steps[k] for k in sorted(rng.choice(len(steps), size=4, replace=False))]
            stops += [(0, len(whole[0][0]) - 1), (1, 2)]  # the last step of the tail, and one before it
            checks = []
            for e, i in stops:
                head, state, _ = run(workers, e, stop=i)
                rest, end_state, report = run(workers, e, state=state)
                nxt = run(workers, e + 1, state=end_state)[0] if e == 0 else None
                checks.append(
                    {
                        "epoch": e,
                        "step": i,
                        "dry": state["ranks_in_step"]["dry"],
                        "equal": head + rest == whole[e][0],
                        "report": report == whole[e][2],
                        "next_epoch": nxt is None or nxt == whole[1][0],
                    }
                )
            out[f"workers{workers}"] = {"checks": checks, "repeats": [w[2]["repeats"] for w in whole]}
        with open(f"{out_dir}/rank{rank}.json", "w") as f:
            json.dump(out, f)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    out = tmp_path_factory.mktemp("stream_resume")
    return _spawn(_resume_worker, out, 240, "the ranks hung while resuming")


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_through_ranks_in_step_equals_the_uninterrupted_run(resumed, workers):
    for rank, result in enumerate(resumed):
        got = result[f"workers{workers}"]
        for c in got["checks"]:
            assert c["equal"] and c["report"] and c["next_epoch"], (rank, c)
    dry = resumed[1][f"workers{workers}"]
    assert all(r > 0 for r in dry["repeats"])  # rank 1 has a tail
    if workers:  # RanksInStep's tail: some stops are in it, resumed from the state before the last batch
        assert any(c["dry"] for c in dry["checks"])
