"""The demo's packing row over a stream of the corpus: every sequence once, in the stream's shapes."""

import numpy as np

import dyntile
from dyntile.cli.corpus import Corpus
from dyntile.cli.methods import StreamBatching, TokenDataset, build_batching


def test_stream_packing_keeps_every_sequence_once():
    rng = np.random.default_rng(3)
    lengths = np.minimum(rng.lognormal(2.5, 1.0, 211).astype(int) + 1, 300)
    corpus = Corpus.from_sequences([rng.integers(1, 500, int(n)) for n in lengths], "toy")
    plan = dyntile.plan_buckets(corpus.lengths, max_buckets=4)
    b = build_batching("packing", corpus, plan, max_tokens=640, pack_len=None, seed=1, stream=True)
    assert isinstance(b, StreamBatching) and b.label.endswith("(stream)")
    seen, batches = [], 0
    for batch in b.loader(TokenDataset(corpus)):
        assert tuple(batch["input_ids"].shape) in b.batch_sampler.shapes
        ids, seg = batch["input_ids"].numpy(), batch["segment_ids"].numpy()
        for r in range(ids.shape[0]):
            for s in np.unique(seg[r][seg[r] != 0]):
                seen.append(tuple(ids[r, seg[r] == s].tolist()))
        batches += 1
    assert batches == len(b.batch_sampler)
    assert sorted(seen) == sorted(tuple(s.tolist()) for s in corpus.sequences)


def test_the_choice_note_says_a_stream_chose_on_its_first_samples():
    """The stream's row length is chosen on its first samples: the note's batch count is
    theirs, not the table's, and it says so."""
    from dyntile.cli.demo import _choice_note

    rng = np.random.default_rng(4)
    lengths = np.minimum(rng.lognormal(2.5, 1.0, 5000).astype(int) + 1, 300)
    corpus = Corpus.from_sequences([rng.integers(1, 500, int(n)) for n in lengths], "toy")
    plan = dyntile.plan_buckets(corpus.lengths, max_buckets=4)
    streamed = build_batching("packing", corpus, plan, max_tokens=640, pack_len=None, seed=1, stream=True)
    assert "on the stream's first 4096 samples:" in _choice_note(streamed)
    sampled = build_batching("packing", corpus, plan, max_tokens=640, pack_len=None, seed=1)
    assert "attention:" in _choice_note(sampled) and "stream" not in _choice_note(sampled)
