"""Each batching method: every sample's tokens arrive exactly once, at the right place."""

import numpy as np
import pytest
import torch

import dyntile
from dyntile.cli.corpus import Corpus
from dyntile.cli.methods import METHODS, TokenDataset, build_batching, pack_seq_len


def _corpus(n=150, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.lognormal(2.5, 1.0, n).astype(int) + 1, 300)
    lengths[3] = 300
    seqs = [rng.integers(1, 500, int(L)) for L in lengths]
    return Corpus.from_sequences(seqs, "toy")


def _unbatch(batch):
    """Sequences in a batch: runs of one segment id in a row, positions checked on the way."""
    ids, pos, seg = (batch[k].numpy() for k in ("input_ids", "position_ids", "segment_ids"))
    out = []
    for r in range(ids.shape[0]):
        for s in np.unique(seg[r][seg[r] != 0]):
            where = np.flatnonzero(seg[r] == s)
            assert np.array_equal(where, np.arange(where[0], where[-1] + 1))  # contiguous
            np.testing.assert_array_equal(pos[r, where], np.arange(where.size))
            out.append(tuple(ids[r, where].tolist()))
    return out


@pytest.mark.parametrize("name", METHODS)
def test_every_sequence_exactly_once_and_shapes_bounded(name):
    corpus = _corpus()
    plan = dyntile.plan_buckets(corpus.lengths, max_buckets=4)
    b = build_batching(name, corpus, plan, max_tokens=640, pack_len=128, seed=1)
    seen, shapes = [], set()
    for batch in b.loader(TokenDataset(corpus)):
        assert batch["input_ids"].dtype == batch["position_ids"].dtype == torch.int64
        assert batch["segment_ids"].dtype in (torch.int64, torch.int32)
        B, T = batch["input_ids"].shape
        assert B * T <= 640
        shapes.add((B, T))
        seen += _unbatch(batch)
    assert sorted(seen) == sorted(tuple(s.tolist()) for s in corpus.sequences)
    if name == "buckets":
        assert len(shapes) <= len(plan.boundaries) and {T for _, T in shapes} <= set(plan.boundaries)
    if name == "packing":
        assert len(shapes) <= 2


def test_packing_split_gives_one_shape_and_keeps_every_token():
    corpus = _corpus()
    b = build_batching(
        "packing",
        corpus,
        dyntile.plan_buckets(corpus.lengths),
        max_tokens=640,
        pack_len=128,
        seed=0,
        pack_overflow="split",
    )
    batches = list(b.loader(TokenDataset(corpus)))
    assert len({tuple(x["input_ids"].shape) for x in batches}) == 1
    assert sum(int((x["segment_ids"] != 0).sum()) for x in batches) == corpus.lengths.sum()


def test_pack_seq_len_never_exceeds_budget_or_need():
    assert pack_seq_len(np.array([5, 9]), 512, 4096) == 16
    assert pack_seq_len(np.array([5, 900]), 512, 4096) == 512
    assert pack_seq_len(np.array([5, 900]), 512, 300) == 296


def test_unknown_method():
    c = _corpus(10)
    with pytest.raises(ValueError, match="method"):
        build_batching("shuffle", c, dyntile.plan_buckets(c.lengths), max_tokens=640, pack_len=64, seed=0)
