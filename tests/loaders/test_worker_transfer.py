"""WorkerBatch: a batch dict crosses the DataLoader worker pipe as one buffer and comes
back as the plain dict it was (keys in order, dtypes, shapes, values)."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
import torch.multiprocessing  # noqa: F401  (registers torch's reductions with ForkingPickler)
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

import loaders.collate as collate_module
from loaders import DynTileCollate
from loaders.worker_transfer import PIPE_LIMIT, TENSOR_LIMIT, WorkerBatch, unpack_batch
from reference import torch_real_dtypes

DTYPES = [*torch_real_dtypes(), torch.complex64]


def roundtrip(batch):
    """What the main process gets: torch's pickler, as the DataLoader worker queue uses it."""
    return pickle.loads(ForkingPickler.dumps(batch))


def assert_same_batch(got, want):
    assert type(got) is dict
    assert list(got) == list(want)
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert type(got[key]) is type(value), key
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            assert torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


def random_tensor(rng, dtype, shape):
    x = torch.from_numpy(np.asarray(rng.standard_normal(shape) * 50))
    return x.to(dtype) if dtype is not torch.bool else x > 0


def test_small_batch_travels_in_the_pickle():
    rng = np.random.default_rng(0)
    want = {
        "input_ids": random_tensor(rng, torch.int64, (5, 7)),
        "names": ["a", "b"],
        "attention_mask": random_tensor(rng, torch.bool, (5, 7)),
        "lengths": torch.arange(5),
        "collate_stats": {"real": 12},
    }
    reduced = WorkerBatch(want).__reduce__()
    assert reduced[0] is unpack_batch and type(reduced[1][0]) is bytearray
    assert_same_batch(roundtrip(WorkerBatch(want)), want)


def test_large_batch_takes_one_shared_segment():
    rng = np.random.default_rng(1)
    n = PIPE_LIMIT // 8 + 1
    want = {"a": random_tensor(rng, torch.float64, (n,)), "b": random_tensor(rng, torch.int32, (3, 11))}
    buffer = WorkerBatch(want).__reduce__()[1][0]
    assert isinstance(buffer, torch.Tensor) and buffer.is_shared()
    assert_same_batch(roundtrip(WorkerBatch(want)), want)


def test_received_tensors_own_their_memory():
    """As after torch's transfer: no tensor shares, or keeps alive, another's storage."""
    for n in (3, PIPE_LIMIT // 8 + 1):  # both routes
        want = {"lengths": torch.arange(4), "input_ids": torch.ones(n, dtype=torch.int64)}
        got = roundtrip(WorkerBatch(want))
        for v in got.values():
            assert v.untyped_storage().nbytes() == v.numel() * v.element_size()
        got["lengths"].resize_(40).fill_(0)  # grows its own storage, not into a neighbour's
        assert got["input_ids"].eq(1).all()


def test_tensors_over_the_tensor_limit_keep_torchs_transfer():
    big = torch.ones(TENSOR_LIMIT // 4 + 1, dtype=torch.float32)
    want = {"big": big, "a": torch.arange(3), "b": torch.zeros(2)}
    specs = WorkerBatch(want).__reduce__()[1][1]
    assert [len(s) for s in specs] == [2, 5, 5]
    assert_same_batch(roundtrip(WorkerBatch(want)), want)


def test_conjugate_and_negative_views_arrive_resolved_on_every_route():
    c = torch.tensor([1 + 2j, 3 - 1j])
    for want in ({"c": c.conj(), "name": "one tensor"}, {"c": c.conj(), "n": torch._neg_view(torch.ones(2))}):
        got = roundtrip(WorkerBatch(want))
        assert torch.equal(got["c"], c.conj().resolve_conj()) and not got["c"].is_conj()
        if "n" in want:
            assert got["n"].eq(-1).all()


def test_copies_and_pytree_see_a_dict():
    import copy

    from torch.utils import _pytree

    batch = WorkerBatch({"a": torch.arange(3), "b": torch.ones(2)})
    shallow = copy.copy(batch)
    assert type(shallow) is WorkerBatch and shallow["a"] is batch["a"]
    deep = copy.deepcopy(batch)
    assert type(deep) is WorkerBatch and deep["a"] is not batch["a"] and torch.equal(deep["a"], batch["a"])
    mapped = _pytree.tree_map(lambda t: t * 2, batch)
    assert type(mapped) is WorkerBatch and mapped["a"].tolist() == [0, 2, 4]


def test_a_single_tensor_keeps_torchs_transfer():
    want = {"x": torch.arange(6), "name": "s"}
    assert WorkerBatch(want).__reduce__()[0] is dict
    assert_same_batch(roundtrip(WorkerBatch(want)), want)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors", "ignore:Sparse invariant checks")
def test_what_is_not_a_plain_cpu_tensor_is_pickled_as_it_is():
    grad = torch.ones(3, requires_grad=True)
    param = torch.nn.Parameter(torch.zeros(2))
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    want = {
        "a": torch.arange(4),
        "grad": grad,
        "param": param,
        "nested": nested,
        "sparse": torch.eye(3).to_sparse(),
        "b": torch.ones(2, 2),
    }
    specs = WorkerBatch(want).__reduce__()[1][1]
    assert [len(s) for s in specs] == [5, 2, 2, 2, 2, 5]
    got = roundtrip(WorkerBatch(want))
    assert got["grad"].requires_grad and type(got["param"]) is torch.nn.Parameter
    assert got["nested"].is_nested and got["sparse"].is_sparse
    assert list(got) == list(want) and torch.equal(got["a"], want["a"]) and torch.equal(got["b"], want["b"])


def test_a_failure_while_packing_falls_back_to_torchs_transfer(monkeypatch):
    """In a worker, an exception from __reduce__ would drop the batch (the DataLoader
    then waits for it forever): packing falls back to a plain dict instead."""

    def broken(self):
        raise RuntimeError("boom")

    monkeypatch.setattr(WorkerBatch, "_packed", broken)
    want = {"a": torch.arange(3), "b": torch.ones(2)}
    assert WorkerBatch(want).__reduce__()[0] is dict
    assert_same_batch(roundtrip(WorkerBatch(want)), want)


def test_views_zero_size_and_scalars():
    base = torch.arange(24, dtype=torch.float32).view(4, 6)
    want = {
        "t": base.t(),
        "step": base[:, ::2],
        "empty": torch.empty(3, 0, dtype=torch.int64),
        "none": torch.empty(0, dtype=torch.bool),
        "scalar": torch.tensor(2.5),
    }
    got = roundtrip(WorkerBatch(want))
    assert_same_batch(got, want)
    assert got["t"].is_contiguous()


def test_received_tensors_are_writable_and_independent():
    want = {"a": torch.zeros(4, dtype=torch.int64), "b": torch.zeros(4, dtype=torch.int64)}
    got = roundtrip(WorkerBatch(want))
    got["a"].fill_(7)
    assert got["b"].eq(0).all() and got["a"].eq(7).all()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 6), max_size=3)), min_size=0, max_size=6
    ),
    st.integers(0, 2**32 - 1),
)
def test_roundtrip_property(leaves, seed):
    rng = np.random.default_rng(seed)
    want = {f"k{i}": random_tensor(rng, dtype, tuple(shape)) for i, (dtype, shape) in enumerate(leaves)}
    assert_same_batch(roundtrip(WorkerBatch(want)), want)


class _Worker:
    id, num_workers, seed = 0, 1, 0


def test_collate_in_a_worker_returns_a_worker_batch(monkeypatch):
    samples = [{"input_ids": [1, 2, 3]}, {"input_ids": [4]}]
    plain = DynTileCollate()(samples)
    monkeypatch.setattr(collate_module, "get_worker_info", lambda: _Worker())
    batch = DynTileCollate()(samples)
    assert type(batch) is WorkerBatch
    assert_same_batch(roundtrip(batch), plain)
    assert type(DynTileCollate(worker_transfer="torch")(samples)) is dict
    assert type(DynTileCollate()([(torch.ones(2), 1)])) is list  # not a dict batch: as it is


def test_collate_outside_a_worker_returns_a_dict():
    assert type(DynTileCollate()([{"input_ids": [1, 2]}])) is dict


def test_worker_transfer_is_checked():
    with pytest.raises(ValueError, match="worker_transfer should be one of .*'one_buffer'.*'torch'.*'pipe'"):
        DynTileCollate(worker_transfer="pipe")


class Rows(Dataset):
    def __init__(self, lengths):
        rng = np.random.default_rng(5)
        self.rows = [rng.integers(1, 30000, n) for n in lengths]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": torch.from_numpy(self.rows[i]), "labels": self.rows[i].tolist(), "index": i}


@pytest.mark.parametrize("transfer", ["one_buffer", "torch"])
def test_dataloader_workers_deliver_what_the_main_process_collates(transfer):
    lengths = [3, 9, 1, 40, 2, 7] + [PIPE_LIMIT // 8 // 3] * 3  # the last batch takes the shared segment
    collate = DynTileCollate(pad_values={"input_ids": 0, "labels": -100}, worker_transfer=transfer)
    data = Rows(lengths)
    want = list(DataLoader(data, batch_size=3, collate_fn=collate, num_workers=0))
    got = list(
        DataLoader(data, batch_size=3, collate_fn=collate, num_workers=2, timeout=120)
    )  # a lost batch: an error
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert_same_batch(g, w)
