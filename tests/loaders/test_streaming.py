"""StreamingPacker and StreamingBucketer in one process: against the map-style samplers,
every sample once, exact resume under torchdata's StatefulDataLoader, bounded state and
memory, real sources (a generator, datasets streamed from local shards), bad input."""

from __future__ import annotations

import collections
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from dyntile.planning import BucketPlan  # noqa: E402
from loaders import (  # noqa: E402
    DynTileCollate,
    PackedCollate,
    PackingBatchSampler,
    StreamingBucketer,
    StreamingPacker,
)
from loaders.stream_source import StreamSource  # noqa: E402


def _corpus(n: int, seed: int = 0, top: int = 700) -> list[dict]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(4.5, 0.9, n).astype(np.int64), 1, top)
    return [{"input_ids": np.full(k, i % 30000, np.int64), "id": i} for i, k in enumerate(lengths)]


def _ids(batch) -> tuple:
    return tuple(int(s["id"]) for s in batch)


def _ids_collate(batch) -> tuple:  # module level: DataLoader workers pickle it
    return _ids(batch)


def _each_once(batches, n: int) -> None:
    counts = collections.Counter(i for b in batches for i in b)
    assert sorted(counts) == list(range(n)) and set(counts.values()) == {1}


# ------------------------------------------------------------------ against the map-style samplers


def test_padding_within_a_point_of_the_packing_sampler():
    data = _corpus(6001, seed=1)
    lengths = np.array([len(s["input_ids"]) for s in data])
    stream = StreamingPacker(data, max_tokens=4096, buffer_size=1024, seed=3)
    real = slots = 0
    for batch in stream:
        packed = PackedCollate(stream)(batch)["packing"]
        real, slots = real + packed.num_tokens, slots + packed.shape[0] * packed.shape[1]
    offline = PackingBatchSampler(lengths, max_tokens=4096, pool_size=1024, seed=3).packed_batches()
    off_pad = 1 - sum(b.num_tokens for b in offline) / sum(b.shape[0] * b.shape[1] for b in offline)
    assert real == lengths.sum()
    assert abs((1 - real / slots) - off_pad) < 0.01


@pytest.mark.parametrize("workers", [0, 2])
def test_packer_through_packed_collate_each_sample_once(workers):
    data = _corpus(1503, seed=2)
    packer = StreamingPacker(data, max_tokens=2048, buffer_size=300, max_len=1024)
    loader = DataLoader(packer, batch_size=None, collate_fn=PackedCollate(packer), num_workers=workers)
    seen = []
    for out in loader:
        B, T = out["input_ids"].shape
        assert (B, T) in packer.shapes
        seen.append(out["id"].tolist())
        assert int(out["lengths"].sum()) == int((out["segment_ids"] > 0).sum())
    _each_once(seen, len(data))


@pytest.mark.parametrize("workers", [0, 2])
def test_bucketer_through_dyntile_collate_each_sample_once(workers):
    data = _corpus(1201, seed=4)
    bucketer = StreamingBucketer(data, max_tokens=4096, buffer_size=512, max_buckets=4)
    loader = DataLoader(
        bucketer, batch_size=None, collate_fn=DynTileCollate(bucketer.plan), num_workers=workers
    )
    seen = []
    for out in loader:
        n, width = out["input_ids"].shape
        assert width in bucketer.plan.boundaries and n * width <= 4096
        assert int(out["lengths"].max()) <= width
        seen.append(out["id"].tolist())
    _each_once(seen, len(data))


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 256), min_size=1, max_size=120),
    overflow=st.sampled_from(["extend", "split"]),
    buffer=st.integers(4, 50),
    seed=st.integers(0, 3),
)
def test_each_batch_decodes_to_its_shape_and_windows_yield_whole_batches(lengths, overflow, buffer, seed):
    """The packer's rows, less the spare rows carried on, dealt again: the collate's decoder
    (pack_rows) finds rows that fit the shape, every sample is yielded once, and a window
    that carries rows on yields batches of B rows each (without split samples, whose
    rows stay together in one batch)."""
    from dyntile.planning.packing import pack_rows

    data = [{"input_ids": np.zeros(n, np.int64), "id": i} for i, n in enumerate(lengths)]
    packer = StreamingPacker(
        data, max_tokens=256, seq_len=64, buffer_size=buffer, overflow=overflow, seed=seed
    )
    batches = [_ids(b) for b in packer]
    _each_once(batches, len(data))
    rows = [pack_rows([lengths[i] for i in b], packer.shapes, overflow=overflow) for b in batches]
    assert all(r.shape in packer.shapes for r in rows)
    if overflow == "split":
        return
    short = sum(int(r.rows.max(initial=0)) + 1 < r.shape[0] for r in rows)
    n_windows = -(-len(data) // max(1, buffer // 2))
    assert short <= n_windows * len(packer.shapes)


def _step_costs(packer, lengths, workers: int) -> np.ndarray:
    """The packing cost model's cost of each batch a loader yields, recomputed from the
    batch's lengths (slots, and the causal attention pairs of each sample)."""
    from dyntile.planning.packing import pack_rows

    loader = DataLoader(packer, batch_size=None, collate_fn=_ids_collate, num_workers=workers)
    out = []
    for ids in loader:
        n = lengths[list(ids)]
        B, T = pack_rows(n, packer.shapes, overflow=packer.overflow).shape
        out.append(B * T + packer._cost.attention_weight * float((n * (n + 1) / 2).sum()))
    return np.array(out)


@pytest.mark.parametrize("workers", [0, 2])
def test_ranks_take_batches_of_comparable_cost_at_each_step(workers):
    """2 simulated ranks, no communication: the cost gap between the ranks' step-i batches
    is far below that of the same batches in an order blind to cost, and below the
    batches of each window in decreasing cost (balance_steps=1)."""
    import warnings

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(4.5, 1.2, 6000).astype(np.int64), 1, 1000)
    data = [{"input_ids": np.zeros(n, np.int64), "id": i} for i, n in enumerate(lengths)]
    gap = {}
    for steps in (8, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 2 ranks without a process group: warned, not kept in step
            a, b = (
                _step_costs(
                    StreamingPacker(
                        data,
                        max_tokens=2048,
                        buffer_size=512,
                        seq_len=512,
                        num_replicas=2,
                        rank=r,
                        balance_steps=steps,
                    ),
                    lengths,
                    workers,
                )
                for r in (0, 1)
            )
        n = min(a.size, b.size) - 8  # the epoch's tail is not balanced
        a, b = a[:n], b[:n]
        gap[steps] = np.abs(a - b).mean()
        if steps == 8:  # the same batches, paired in an order blind to cost
            blind = np.mean([np.abs(a - rng.permutation(b)).mean() for _ in range(20)])
    assert gap[8] < 0.35 * blind and gap[8] < gap[1], (gap, blind)


# ------------------------------------------------------------------ resume


def _epoch(make, workers: int, epoch: int, state=None, stop: int | None = None):
    """Batches of one epoch (from ``state``; up to ``stop``), and the state at ``stop``."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    ds = make()
    ds.set_epoch(epoch)
    loader = StatefulDataLoader(ds, batch_size=None, collate_fn=_ids_collate, num_workers=workers)
    if state is not None:
        loader.load_state_dict(state)
    out = []
    for b in loader:
        out.append(b)
        if stop is not None and len(out) == stop:
            return out, loader.state_dict()
    return out, None


@pytest.mark.parametrize(
    "kind,workers,n_stops",
    [("packer", 0, 10), ("bucketer", 0, 10), ("packer", 2, 10), ("bucketer", 2, 10)],
)
def test_resume_at_random_steps_equals_the_uninterrupted_run(kind, workers, n_stops):
    data = _corpus(901, seed=5)
    if kind == "packer":

        def make():
            return StreamingPacker(data, max_tokens=1024, buffer_size=128, max_len=1024, seed=7)
    else:

        def make():
            return StreamingBucketer(data, max_tokens=2048, buffer_size=128, max_buckets=4, seed=7)

    whole = [_epoch(make, workers, e)[0] for e in (0, 1)]
    assert whole[0] != whole[1]
    for e in (0, 1):
        _each_once(whole[e], len(data))
    steps = [(e, i) for e in (0, 1) for i in range(1, len(whole[e]))]
    rng = np.random.default_rng(workers)
    for k in rng.choice(len(steps), size=n_stops, replace=False):
        e, i = steps[k]
        head, state = _epoch(make, workers, e, stop=i)
        assert head == whole[e][:i]
        assert len(pickle.dumps(state)) < 64 * 1024
        rest, _ = _epoch(make, workers, e, state=state)
        assert rest == whole[e][i:], f"resumed at step {i} of epoch {e}"
        if e == 0:
            assert _epoch(make, workers, 1)[0] == whole[1]


def test_state_of_a_4096_sample_buffer_is_small():
    data = _corpus(9000, seed=6, top=60)
    for ds in (
        StreamingPacker(data, max_tokens=4096, buffer_size=4096),
        StreamingBucketer(data, max_tokens=16384, buffer_size=4096, max_buckets=8),
    ):
        sizes = []
        for _ in ds:  # at every step, the carried samples' positions at their most included
            state = ds.state_dict()
            sizes.append(len(pickle.dumps(state)))
            assert not any(isinstance(v, (np.ndarray, torch.Tensor)) for v in state["cursor"].values())
        assert max(sizes) <= 64 * 1024


def test_state_from_another_configuration_is_refused():
    import warnings

    data = _corpus(300, seed=7)
    a = StreamingPacker(data, max_tokens=1024, buffer_size=64, max_len=1024)
    next(iter(a))
    b = StreamingPacker(data, max_tokens=1024, buffer_size=128, max_len=1024)
    with pytest.raises(ValueError, match="buffer_size=64 .this loader: 128"):
        b.load_state_dict(a.state_dict())
    c = StreamingBucketer(data, max_tokens=2048, buffer_size=64)
    with pytest.raises(ValueError, match="another configuration"):
        c.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="state_dict"):
        a.load_state_dict({"epoch": 0})
    d = StreamingPacker(data, max_tokens=1024, buffer_size=64, max_len=1024, balance_steps=2)
    with pytest.raises(ValueError, match="balance_steps=8 .this loader: 2"):
        d.load_state_dict(a.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 2 ranks without a process group
        r0, r1 = (
            StreamingPacker(data, max_tokens=1024, buffer_size=64, max_len=1024, num_replicas=2, rank=r)
            for r in (0, 1)
        )
        next(iter(r0))
        r1.load_state_dict(r0.state_dict())
        with pytest.raises(ValueError, match="saved by reader 0 of 2 .* this is reader 1 of 2"):
            next(iter(r1))


# ------------------------------------------------------------------ bounded memory


def _rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_rss_stays_flat_while_300k_samples_stream():
    def samples():
        rng = np.random.default_rng(0)
        for n in np.clip(rng.lognormal(3.5, 0.8, 300_000).astype(np.int64), 1, 400):
            yield np.zeros(n, np.int32)

    packer = StreamingPacker(samples, max_tokens=4096, buffer_size=4096, seq_len=512)
    rss, seen = [], 0
    for k, batch in enumerate(packer):
        seen += len(batch)
        if k % 200 == 0:
            rss.append(_rss_mib())
    assert seen == 300_000
    warm = rss[len(rss) // 4 :]
    assert max(warm) - min(warm) < 24, rss  # 300k samples of ~40 int32 tokens are ~50 MiB


@pytest.mark.parametrize("loader", [StreamingPacker, StreamingBucketer])
def test_at_most_a_window_of_samples_is_alive_at_each_batch(loader):
    """A window keeps its samples until it is done, and no longer: counted by weak
    references to the samples still alive whenever a batch is yielded."""
    import weakref

    refs = []

    def samples():
        rng = np.random.default_rng(3)
        for n in rng.integers(1, 60, 3001):
            a = np.zeros(int(n), np.int32)
            refs.append(weakref.ref(a))
            yield a

    buffer = 257
    kw = {"seq_len": 64} if loader is StreamingPacker else {}
    ds = loader(samples, max_tokens=256, buffer_size=buffer, **kw)
    most, seen = 0, 0
    for batch in ds:
        seen += len(batch)
        most = max(most, sum(r() is not None for r in refs))
        del batch
    assert seen == 3001
    assert buffer // 2 < most <= buffer, most


# ------------------------------------------------------------------ real sources


def test_a_generator_function_is_a_source_each_epoch():
    def gen():
        for i in range(257):
            yield {"input_ids": list(range(1 + i % 50)), "id": i}

    packer = StreamingPacker(gen, max_tokens=512, buffer_size=64)
    for e in (0, 1):
        packer.set_epoch(e)
        _each_once([_ids(b) for b in packer], 257)
    with pytest.raises(TypeError, match="one-shot generator"):
        StreamingPacker(gen(), max_tokens=512)


def _write_shards(tmp_path, data, fmt: str, n_shards: int = 4) -> list[str]:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    files = []
    for k in range(n_shards):
        rows = data[k::n_shards]
        path = tmp_path / f"shard{k}.{fmt}"
        if fmt == "jsonl":
            import json

            path.write_text(
                "".join(
                    json.dumps({"input_ids": r["input_ids"].tolist(), "id": r["id"]}) + "\n" for r in rows
                )
            )
        else:
            table = pa.table(
                {"input_ids": [r["input_ids"].tolist() for r in rows], "id": [r["id"] for r in rows]}
            )
            pq.write_table(table, path)
        files.append(str(path))
    return files


@pytest.mark.parametrize("fmt,workers", [("jsonl", 0), ("parquet", 2)])
def test_a_datasets_stream_from_local_shards(tmp_path, fmt, workers):
    datasets = pytest.importorskip("datasets")
    data = _corpus(403, seed=8, top=300)
    files = _write_shards(tmp_path, data, fmt)
    ds = datasets.load_dataset(
        "json" if fmt == "jsonl" else "parquet", data_files=files, split="train", streaming=True
    )
    ds = ds.with_format("torch")
    packer = StreamingPacker(ds, max_tokens=2048, buffer_size=128, max_len=512)
    assert packer._source.shards == {"workers"}  # datasets splits its shards among workers itself
    loader = DataLoader(packer, batch_size=None, collate_fn=PackedCollate(packer), num_workers=workers)
    seen = [out["id"].tolist() for out in loader]
    _each_once(seen, len(data))


# ------------------------------------------------------------------ measuring a window at once

_LAYOUTS = {
    "tensor": lambda n, d: {"input_ids": torch.arange(n), "id": torch.tensor(n)},
    "tensor+labels": lambda n, d: {"input_ids": torch.arange(n), "labels": torch.zeros(n + d)},
    "int32 tensor": lambda n, d: {"input_ids": torch.arange(n, dtype=torch.int32), "labels": [0] * (n + d)},
    "array+mask": lambda n, d: {"input_ids": np.arange(n), "attention_mask": [1] * (n + d), "id": n},
    "list": lambda n, d: {"input_ids": list(range(n))},
    "other keys": lambda n, d: {"input_ids": list(range(n)), "tokens": (0,) * (n + d)},
    "0-d ids": lambda n, d: {"input_ids": torch.tensor(n)},
    "2-d ids": lambda n, d: {"input_ids": torch.zeros(n, 2), "labels": torch.zeros(n + d, 2)},
    "no ids": lambda n, d: {"tokens": [1] * n},
    "bare list": lambda n, d: [0] * n,
    "bare tensor": lambda n, d: torch.zeros(n),
    "bare tuple": lambda n, d: (0,) * n,
}


def _measured(src: StreamSource, samples: list, bulk: bool):
    """Lengths from position 5 of reader 1 of 3, or the error (type, message)."""
    try:
        if bulk:
            return src.measure_many(samples, 5, 1, 3).tolist()
        return [src.measure(x, 5 + p, (5 + p) * 3 + 1, 3) for p, x in enumerate(samples)]
    except Exception as e:
        return type(e), str(e)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_window_is_measured_as_sample_by_sample(data):
    """measure_many (a key at a time where the window has one layout) gives what measure
    gives each sample in turn: the lengths, or the same error naming the same sample."""
    layouts = data.draw(st.lists(st.sampled_from(sorted(_LAYOUTS)), min_size=1, max_size=3, unique=True))
    n = data.draw(st.integers(0, 40))
    samples = [  # lengths 1..9, and sometimes a token key one longer or shorter
        _LAYOUTS[data.draw(st.sampled_from(layouts))](
            data.draw(st.integers(1, 9)), data.draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
        )
        for _ in range(n)
    ]
    for exact in (True, False):
        src = StreamSource([], exact=exact)
        assert _measured(src, samples, bulk=True) == _measured(src, samples, bulk=False)


def test_a_label_shorter_than_its_sample_is_named_in_a_window_of_tensors():
    data = [{"input_ids": torch.zeros(k), "labels": torch.zeros(k)} for k in range(1, 60)]
    data[37]["labels"] = torch.zeros(3)
    with pytest.raises(ValueError, match="sample 37 of this reader: its measured length is 38"):
        list(StreamingPacker(data, max_tokens=1024, seq_len=128, buffer_size=32))
    assert len(list(StreamingBucketer(data, max_tokens=1024, max_buckets=2, buffer_size=64))) > 0


def test_reading_a_window_leaves_the_collector_as_it_was():
    import gc

    def gen():
        for i in range(90):
            if i == 70:
                raise OSError("unreadable")
            yield [1] * (1 + i % 9)

    was = gc.isenabled()
    try:
        for on in (True, False):
            gc.enable() if on else gc.disable()
            with pytest.raises(RuntimeError, match="sample 70"):
                list(StreamingPacker(gen, max_tokens=256, seq_len=32, buffer_size=32))
            assert gc.isenabled() == on
            clean = [[1] * (1 + i % 9) for i in range(90)]
            assert sum(map(len, StreamingPacker(clean, max_tokens=256, seq_len=32, buffer_size=32))) == 90
            assert gc.isenabled() == on
    finally:
        gc.enable() if was else gc.disable()


def test_a_window_does_not_reach_the_oldest_generation():
    """The collector's generation-1 collections come between windows, when the window
    before is gone: a window alive at one would move to the oldest generation, and
    enough moved there start full collections. Counted at every 4th batch: its samples
    found among the oldest generation's objects (a few carried to a second window are)."""
    import gc

    if not gc.isenabled():
        pytest.skip("the collector is off")
    lengths = np.random.default_rng(5).integers(1, 40, 16_000).tolist()

    def samples():  # made as they are read, as a stream's are
        for i, n in enumerate(lengths):
            yield {"input_ids": [1] * n, "id": i}

    packer = StreamingPacker(samples, max_tokens=1024, seq_len=128, buffer_size=1024, shuffle=False)
    old, seen = 0, 0
    for k, batch in enumerate(packer):
        if k % 4 == 0:
            oldest = {id(o) for o in gc.get_objects(generation=2)}
            old += sum(id(s) in oldest for s in batch)
            seen += len(batch)
    assert seen > 2000
    assert old < seen / 40, (old, seen)  # whole windows moved there: about 6%


# ------------------------------------------------------------------ bad input


def test_errors_name_the_sample_in_any_chunk_of_a_window():
    """A window is read and measured a chunk at a time: an error names the sample's
    position in the part, whichever chunk it lies in."""
    from loaders.stream_source import READ_CHUNK

    bad = READ_CHUNK + 37
    data = _corpus(3 * READ_CHUNK)
    data[bad]["labels"] = np.zeros(len(data[bad]["input_ids"]) + 1)
    with pytest.raises(ValueError, match=f"sample {bad} of this reader: its measured length"):
        list(StreamingPacker(data, max_tokens=2048, seq_len=1024, buffer_size=3 * READ_CHUNK))

    def gen():
        for i, s in enumerate(_corpus(3 * READ_CHUNK)):
            if i == 2 * READ_CHUNK + 5:
                raise OSError("unreadable")
            yield s

    with pytest.raises(RuntimeError, match=f"sample {2 * READ_CHUNK + 5} of this reader"):
        list(StreamingPacker(gen, max_tokens=2048, seq_len=1024, buffer_size=3 * READ_CHUNK))


def test_measured_length_that_disagrees_with_the_tokens():
    data = _corpus(50)
    packer = StreamingPacker(
        data, max_tokens=2048, length=lambda s: len(s["input_ids"]) + (s["id"] == 17), seq_len=512
    )
    with pytest.raises(ValueError, match="sample 17 of this reader: its measured length"):
        list(packer)
    with pytest.raises(KeyError, match="pass length="):
        StreamingPacker([{"tokens": [1, 2]}], max_tokens=64)


def test_zero_length_samples_are_kept():
    data = [{"input_ids": np.arange(n), "id": i} for i, n in enumerate([3, 0, 5, 0, 2])]
    packer = StreamingPacker(data, max_tokens=16, seq_len=8, buffer_size=5)
    outs = [PackedCollate(packer)(b) for b in packer]
    assert sorted(i for o in outs for i in o["id"].tolist()) == [0, 1, 2, 3, 4]


def test_a_sample_longer_than_every_shape():
    data = _corpus(100, top=200)
    data[61] = {"input_ids": np.zeros(900, np.int64), "id": 61}
    with pytest.raises(ValueError, match="sample 61 of this reader has length 900"):
        list(StreamingPacker(data, max_tokens=2048, seq_len=256, overflow="error", buffer_size=32))
    with pytest.raises(ValueError, match="sample 61 .* length 900"):
        list(StreamingPacker(data, max_tokens=2048, seq_len=256, max_len=512, buffer_size=32))
    split = StreamingPacker(data, max_tokens=2048, seq_len=256, overflow="split", buffer_size=32)
    _each_once([PackedCollate(split)(b)["id"].tolist() for b in split], 100)
    with pytest.raises(ValueError, match="sample 61 .* length 900"):
        list(
            StreamingBucketer(data, plan=BucketPlan((128, 256)), max_tokens=1024, max_len=512, buffer_size=32)
        )


def test_a_source_that_raises_mid_stream():
    def gen():
        for i in range(100):
            if i == 57:
                raise OSError("shard 3 is unreadable")
            yield {"input_ids": [1] * (1 + i % 40), "id": i}

    packer = StreamingPacker(gen, max_tokens=512, seq_len=64, buffer_size=32)
    got = []
    with pytest.raises(RuntimeError, match="sample 57 of this reader: OSError: shard 3") as err:
        for batch in packer:
            got.append(_ids(batch))
    assert isinstance(err.value.__cause__, OSError)
    ids = [i for b in got for i in b]  # whole batches of the first window; its spare rows wait
    assert got and len(ids) == len(set(ids)) and max(ids) < 32


def test_a_source_shorter_than_one_batch():
    data = _corpus(3)
    for ds in (
        StreamingPacker(data, max_tokens=8192, seq_len=1024),
        StreamingBucketer(data, max_tokens=8192, max_buckets=2),
    ):
        assert sorted(i for b in ds for i in _ids(b)) == [0, 1, 2]


def test_buffer_smaller_than_one_batch():
    with pytest.raises(ValueError, match="buffer_size=4 is smaller than one batch of 8 rows"):
        StreamingPacker(_corpus(20), max_tokens=1024, seq_len=128, buffer_size=4)
    with pytest.raises(ValueError, match="buffer_size=4 is smaller than one batch of bucket"):
        StreamingBucketer(_corpus(20), max_tokens=1024, buffer_size=4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="source_shards"):
        StreamingPacker([[1]], max_tokens=64, seq_len=8, source_shards="nodes")
    with pytest.raises(ValueError, match="buffer_size"):
        StreamingPacker([[1]], max_tokens=64, seq_len=8, buffer_size=0)
    with pytest.raises(ValueError, match="no sample"):
        StreamingPacker([], max_tokens=64)
    with pytest.raises(TypeError, match=r"\['atention'\]: its cost options are \['attention'"):
        StreamingPacker([[1]], max_tokens=64, seq_len=8, atention="dense")


def test_a_datasets_stream_split_by_node_is_not_split_again(tmp_path):
    datasets = pytest.importorskip("datasets")
    from datasets.distributed import split_dataset_by_node

    data = _corpus(120, seed=9, top=100)
    files = _write_shards(tmp_path, data, "parquet")
    ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    seen = []
    for rank in (0, 1):
        node = split_dataset_by_node(ds, rank=rank, world_size=2)
        packer = StreamingPacker(
            node, max_tokens=1024, buffer_size=64, seq_len=128, num_replicas=2, rank=rank
        )
        assert packer._source.shards == {"ranks", "workers"}
        seen += [_ids(b) for b in packer]
    _each_once(seen, len(data))


def test_the_cost_options_as_one_value_choose_the_same_shapes():
    from dyntile.planning import row_cost

    rng = np.random.default_rng(3)
    data = [[1] * int(n) for n in rng.lognormal(3.5, 1.0, 600).clip(1, 900)]
    by_options = StreamingPacker(data, max_tokens=2048, buffer_size=256, attention="dense", d_model=64)
    by_value = StreamingPacker(
        data, max_tokens=2048, buffer_size=256, cost=row_cost("dense", d_model=64, max_tokens=2048)
    )
    assert by_value.shapes == by_options.shapes
    assert by_options.shapes != StreamingPacker(data, max_tokens=2048, buffer_size=256).shapes
    with pytest.raises(ValueError, match="pass cost or its options, not both"):
        StreamingPacker(data, max_tokens=2048, cost=row_cost("dense"), attention="dense")
