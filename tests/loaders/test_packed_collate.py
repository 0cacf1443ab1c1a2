"""PackedCollate: dense copies, segment metadata, and packing that leaves attention intact."""

import functools

import numpy as np
import pytest
import torch

from dyntile.planning.packing import pack_rows
from loaders import DynTileCollate
from loaders.packed_collate import PackedCollate, collate_packed
from loaders.packing_sampler import PackingBatchSampler


def ragged(lengths, seed=0, vocab=50):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, int(n)) for n in lengths]


def reference_dense(seqs, packed, fill):
    """Slow, obviously correct: copy piece by piece."""
    B, T = packed.shape
    out = np.full((B, T), fill, dtype=np.result_type(*[s.dtype for s in seqs]))
    for i, r, o, n, st in zip(packed.indices, packed.rows, packed.offsets, packed.sizes, packed.starts):
        out[r, o : o + n] = seqs[i][st : st + n]
    return out


def segments_from_ids(seg):
    """cu_seqlens recomputed from segment ids alone (no zero-length samples)."""
    B, T = seg.shape
    bounds = [0]
    for r in range(B):
        for t in range(1, T):
            if seg[r, t] != seg[r, t - 1]:
                bounds.append(r * T + t)
        bounds.append((r + 1) * T)
    return bounds


@pytest.mark.parametrize(
    "lengths, shapes, overflow",
    [
        ([5, 3, 7, 1, 8, 2, 6], [(4, 8)], "extend"),
        ([13, 3, 1], [(4, 8)], "split"),
        ([3, 20, 2, 5], [(4, 8), (2, 24)], "extend"),
        ([1], [(1, 8)], "extend"),
    ],
)
def test_dense_and_metadata_match_reference(lengths, shapes, overflow):
    seqs = ragged(lengths)
    out = collate_packed(
        [{"input_ids": s, "labels": s.copy()} for s in seqs], shapes, overflow=overflow, attention_mask=True
    )
    packed = out["packing"]
    assert packed.same_as(pack_rows(lengths, shapes, overflow=overflow))
    np.testing.assert_array_equal(out["input_ids"].numpy(), reference_dense(seqs, packed, 0))
    seg = out["segment_ids"].numpy()
    pos = out["position_ids"].numpy()
    assert out["cu_seqlens"].dtype == torch.int32
    assert out["cu_seqlens"].tolist() == segments_from_ids(seg)
    assert out["max_seqlen"] == int(np.diff(segments_from_ids(seg)).max())
    B, T = packed.shape
    # position ids count within each piece (continuing across chunks of a split sample)
    for r, o, n, st in zip(packed.rows, packed.offsets, packed.sizes, packed.starts):
        np.testing.assert_array_equal(pos[r, o : o + n], np.arange(st, st + n))
        assert len(set(seg[r, o : o + n])) <= 1 and (n == 0 or seg[r, o] > 0)
    assert np.all(pos[seg == 0] == 0)
    mask = out["attention_mask"].numpy()
    np.testing.assert_array_equal(mask, seg[:, :, None] == seg[:, None, :])
    # labels: data, except -100 at the first token of every piece and on padding
    labels = out["labels"].numpy()
    expect = reference_dense(seqs, packed, -100)
    expect[packed.rows[packed.sizes > 0], packed.offsets[packed.sizes > 0]] = -100
    np.testing.assert_array_equal(labels, expect)
    assert out["lengths"].tolist() == list(lengths)


def test_dicts_of_tensors_arrays_and_lists_give_one_result():
    """Dicts of token sequences go column by column (C-level reads); every kind of
    leaf gives the same batch, and a dict with other leaves takes the general route."""
    rng = np.random.default_rng(3)
    seqs = ragged([5, 0, 7, 3, 8, 2], seed=3)
    as_np = [{"input_ids": s, "labels": s.copy(), "w": rng.standard_normal(len(s))} for s in seqs]
    as_torch = [{k: torch.from_numpy(v) for k, v in d.items()} for d in as_np]
    as_lists = [{k: v.tolist() for k, v in d.items()} for d in as_np]
    outs = [collate_packed(x, [(6, 8)], attention_mask=True) for x in (as_np, as_torch, as_lists)]
    for out in outs[1:]:
        assert out.keys() == outs[0].keys()
        for k, v in outs[0].items():
            if isinstance(v, torch.Tensor):
                assert v.dtype == out[k].dtype and torch.equal(v, out[k]), k
        assert out["max_seqlen"] == outs[0]["max_seqlen"] and out["packing"].same_as(outs[0]["packing"])
    # a tensor of another dtype in one sample is refused, as DynTileCollate refuses it (no
    # promotion); another length is named
    mixed = [dict(d) for d in as_torch]
    mixed[2]["input_ids"] = mixed[2]["input_ids"].to(torch.int32)
    for collate in (functools.partial(collate_packed, shapes=[(6, 8)]), DynTileCollate()):
        with pytest.raises(TypeError, match="key 'input_ids': sample 2 has dtype torch.int32, but sample 0"):
            collate(mixed)
    mixed[2]["input_ids"] = mixed[2]["input_ids"].long()
    mixed[4]["labels"] = mixed[4]["labels"][:-1]
    with pytest.raises(ValueError, match="sample 4: token keys should have one length"):
        collate_packed(mixed, [(6, 8)])
    with pytest.raises(ValueError, match="key 'input_ids': sample 1 is a scalar"):
        collate_packed([{"input_ids": [1, 2]}, {"input_ids": 3}], [(6, 8)])


def test_inputs_of_every_kind():
    base = np.arange(40, dtype=np.int32)
    samples = [
        base[::3][:5],  # non-contiguous numpy
        np.arange(100, 104, dtype=np.int32),
        [7, 8, 9],  # list
        np.zeros(0, np.int32),
    ]  # zero-size
    out = collate_packed(samples, [(2, 8)])
    with pytest.raises(TypeError, match="sample 1 has type Tensor, but sample 0 has type ndarray"):
        collate_packed([samples[0], torch.from_numpy(samples[1])], [(2, 8)])  # one type per key
    # lists are weakly typed, as in pad_batch and DynTileCollate: small ints join int32 arrays
    assert out["input_ids"].dtype == torch.int32
    as_np = [np.asarray(s, dtype=np.int64) for s in samples]
    np.testing.assert_array_equal(out["input_ids"].numpy(), reference_dense(as_np, out["packing"], 0))
    assert out["lengths"].tolist() == [5, 4, 3, 0]
    with pytest.raises(TypeError, match="key 'input_ids': sample 2 .* int32 cannot store"):
        collate_packed(samples[:2] + [[2**40]], [(2, 8)])  # nothing is silently cut


def test_multidim_token_keys_and_other_leaves():
    feats = [
        np.random.default_rng(i).standard_normal((n, 3)).astype(np.float32) for i, n in enumerate([4, 6, 2])
    ]
    samples = [{"x": f, "id": i, "name": f"s{i}"} for i, f in enumerate(feats)]
    out = collate_packed(samples, [(2, 8)], pad_values={"x": np.nan})
    x = out["x"].numpy()
    assert x.shape == (2, 8, 3)
    p = out["packing"]
    for i, r, o, n in zip(p.indices, p.rows, p.offsets, p.sizes):
        np.testing.assert_array_equal(x[r, o : o + n], feats[i])
    assert np.isnan(x[out["segment_ids"].numpy() == 0]).all()
    assert out["id"].tolist() == [0, 1, 2] and out["name"] == ["s0", "s1", "s2"]


def test_bfloat16_tokens():
    samples = [torch.randn(3, dtype=torch.bfloat16), torch.randn(4, dtype=torch.bfloat16)]
    out = collate_packed(samples, [(1, 8)])
    assert out["input_ids"].dtype == torch.bfloat16
    assert torch.equal(out["input_ids"][0, :7], torch.cat(samples))


def test_zero_length_samples_repeat_cu_seqlens():
    out = collate_packed([[1, 2], [], [3]], [(1, 8)])
    assert out["cu_seqlens"].tolist() == [0, 2, 2, 3, 8]
    assert out["segment_ids"][0].tolist() == [1, 1, 3, 0, 0, 0, 0, 0]


@pytest.mark.parametrize(
    "samples, kw, exc, match",
    [
        ([], {}, ValueError, "empty batch"),
        (
            [{"input_ids": [1, 2], "labels": [1]}],
            {},
            ValueError,
            "sample 0: token keys should have one length",
        ),
        ([{"input_ids": [1]}, {"ids": [2]}], {}, KeyError, "sample 1 has token keys"),
        ([{"labels": np.array([1, 2], np.uint8)}], {}, ValueError, "out of range for uint8"),
        ([{"input_ids": [1, 2]}], {"pad_values": {"input_ids": 0.5}}, ValueError, "integral fill"),
        ([[1] * 6, [2] * 6, [3] * 6], {}, ValueError, "need 3 rows"),
        ([[1] * 9], {}, ValueError, "longer than the rows"),
        ([3], {}, TypeError, "sample 0 should be a dict"),
        ([(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))], {}, TypeError, "but got a tuple of sequences"),
        (
            [
                {"input_ids": np.zeros((2, 3)), "x": np.zeros((2, 3))},
                {"input_ids": np.zeros((2, 4)), "x": np.zeros((2, 3))},
            ],
            {},
            ValueError,
            "only the first axis may differ",
        ),
    ],
)
def test_bad_input(samples, kw, exc, match):
    with pytest.raises(exc, match=match):
        collate_packed(samples, [(2, 8)], **kw)


def test_samples_own_keys_and_scalar_leaves():
    out = collate_packed(
        [
            {"input_ids": [1, 2, 3], "position_ids": [5, 6, 7], "y": torch.tensor(3)},
            {"input_ids": [4], "position_ids": [9], "y": torch.tensor(4)},
        ],
        [(1, 8)],
    )
    assert out["position_ids"].tolist() == [[5, 6, 7, 9, 0, 0, 0, 0]]  # the samples' own, packed
    assert torch.equal(out["y"], torch.tensor([3, 4]))  # 0-d tensors stacked
    out = collate_packed(
        [{"input_ids": [1], "z": np.array(2.5)}, {"input_ids": [2], "z": np.array(1.5)}], [(1, 8)]
    )
    assert out["z"].tolist() == [2.5, 1.5]


def test_asked_block_mask_replaces_a_tokenizers_own_mask():
    hf = [{"input_ids": list(range(1, n + 1)), "attention_mask": [1] * n} for n in (3, 5, 2)]
    assert collate_packed(hf, [(2, 8)], attention_mask=True)["attention_mask"].shape == (2, 8, 8)
    assert collate_packed(hf, [(2, 8)])["attention_mask"].shape == (
        2,
        8,
    )  # not asked: the samples' own, packed


def test_boundary_labels_take_the_label_pad_value():
    out = collate_packed(
        [{"input_ids": [1, 2], "labels": [1, 2]}, {"input_ids": [3], "labels": [3]}],
        [(1, 8)],
        pad_values={"labels": -1},
    )
    assert out["labels"].tolist() == [[-1, 2, -1, -1, -1, -1, -1, -1]]


# --------------------------------------------------------------------------- the real proof


class TinyAttention(torch.nn.Module):
    """Token + position embeddings, one causal self-attention layer."""

    def __init__(self, vocab=64, d=16, max_pos=64):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.tok = torch.nn.Parameter(torch.randn(vocab, d, generator=g, dtype=torch.float64))
        self.pos = torch.nn.Parameter(torch.randn(max_pos, d, generator=g, dtype=torch.float64))
        self.qkv = torch.nn.Parameter(torch.randn(d, 3 * d, generator=g, dtype=torch.float64) / d**0.5)

    def forward(self, ids, position_ids, allowed):  # ids (B, T), allowed (B, T, T) bool
        x = self.tok[ids] + self.pos[position_ids]
        q, k, v = (x @ self.qkv).chunk(3, dim=-1)
        T = ids.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed & causal)


def test_attention_on_packed_batch_equals_each_sample_alone():
    lengths = [5, 11, 3, 1, 7, 9, 2, 6]
    seqs = [torch.as_tensor(s) for s in ragged(lengths, seed=3, vocab=64)]
    model = TinyAttention()
    out = collate_packed(seqs, [(4, 16)], attention_mask=True)
    packed_y = model(out["input_ids"], out["position_ids"], out["attention_mask"])
    p = out["packing"]
    for i, r, o, n in zip(p.indices, p.rows, p.offsets, p.sizes):
        alone = model(seqs[i][None], torch.arange(n)[None], torch.ones(1, n, n, dtype=torch.bool))[0]
        torch.testing.assert_close(packed_y[r, o : o + n], alone, rtol=1e-12, atol=1e-12)
    # without the block mask packing would leak between samples: the test can fail
    leaky = model(out["input_ids"], out["position_ids"], torch.ones_like(out["attention_mask"]))
    assert not torch.allclose(leaky, packed_y)


# --------------------------------------------------------------------------- sampler <-> collate


def test_collate_recovers_sampler_rows_on_real_tokens(docstring_tokens):
    data = [{"input_ids": s, "labels": s} for s in docstring_tokens]
    lengths = np.array([len(s) for s in docstring_tokens])
    sampler = PackingBatchSampler(lengths, max_tokens=4096, seq_len=512, seed=1, num_replicas=2, rank=1)
    collate = functools.partial(collate_packed, shapes=sampler.shapes, overflow=sampler.overflow)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate)
    mine = sampler.packed_batches()[1::2]
    n_tokens = 0
    for out, b in zip(loader, mine):
        p = out["packing"]
        assert p.shape == b.shape == tuple(out["input_ids"].shape)
        assert np.array_equal(b.sample_order[p.indices], b.indices)
        for f in ("rows", "offsets", "sizes", "starts"):
            assert np.array_equal(getattr(p, f), getattr(b, f))
        n_tokens += int((out["segment_ids"] > 0).sum())
    assert n_tokens == sum(x.num_tokens for x in mine)


# --------------------------------------------------------------------------- the class's own options


def test_collate_takes_shapes_and_overflow_from_a_sampler():
    lengths = [3, 20, 2, 5, 7]
    sampler = PackingBatchSampler(lengths, max_tokens=32, seq_len=8, overflow="split", seed=0)
    collate = PackedCollate(sampler)
    assert collate.shapes == sampler.shapes and collate.overflow == "split"
    seqs = ragged(lengths)
    for batch in sampler:
        out = collate([seqs[i] for i in batch])
        assert out["packing"].same_as(
            pack_rows([lengths[i] for i in batch], sampler.shapes, overflow="split")
        )
    assert PackedCollate(sampler, overflow="error").overflow == "error"


@pytest.mark.parametrize("dtype", [torch.complex128, torch.float16, torch.bool, torch.uint8])
def test_token_keys_of_every_width(dtype):
    rng = np.random.default_rng(5)
    seqs = [torch.from_numpy(rng.standard_normal((n, 2)) * 3).to(dtype) for n in (3, 0, 6, 2)]
    fill = 1 if dtype is torch.bool else 2
    out = PackedCollate([(2, 8)], pad_values={"x": fill}, label_keys=("x",))([{"x": s} for s in seqs])
    p = out["packing"]
    expect = torch.full((2, 8, 2), fill, dtype=dtype)
    for i, r, o, n in zip(p.indices, p.rows, p.offsets, p.sizes):
        expect[r, o : o + n] = seqs[i]
        if n:
            expect[r, o] = fill  # a label key's first token of every piece
    assert out["x"].dtype == dtype and torch.equal(out["x"], expect)


def test_packed_stats_count_elements_of_token_keys_with_extra_axes():
    c = PackedCollate([(1, 8)])
    c([{"feats": torch.ones(3, 4)}])
    assert (c.stats.real_elements, c.stats.padded_elements) == (12, 32)


def test_collate_pickles_and_keeps_collating():
    import pickle

    collate = PackedCollate([(2, 8)], pad_values={"labels": -7}, attention_mask="block")
    samples = [{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}, {"input_ids": [4], "labels": [4]}]
    got, want = pickle.loads(pickle.dumps(collate))(samples), collate(samples)
    assert got.pop("packing").same_as(want.pop("packing")) and got.keys() == want.keys()
    assert all(torch.equal(v, got[k]) for k, v in want.items() if isinstance(v, torch.Tensor))
    assert want["labels"][0].tolist()[-1] == -7


def test_counts_stats_and_returns_them_on_request():
    collate = PackedCollate([(2, 8)], return_stats=True, pad_values={"input_ids": 5})
    out = collate([{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}, {"input_ids": [4, 5], "labels": [4, 5]}])
    assert out["input_ids"][0].tolist() == [1, 2, 3, 4, 5, 5, 5, 5]
    assert out["labels"][0].tolist() == [-100, 2, 3, -100, 5, -100, -100, -100]
    assert out["collate_stats"]["real_elements"] == 10 and out["collate_stats"]["padded_elements"] == 32
    assert collate.stats.batches == 1 and collate.stats.shapes == {
        ("input_ids", (2, 8)): 1,
        ("labels", (2, 8)): 1,
    }


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (
            {"attention_mask": "dense"},
            ValueError,
            r"attention_mask should be one of \(None, 'block', 'additive'\)",
        ),
        ({"label_keys": "labels"}, TypeError, "label_keys should be a collection of key names"),
        ({"worker_transfer": "pipe"}, ValueError, "worker_transfer should be 'one_buffer' or 'torch'"),
        ({"overflow": "truncate"}, ValueError, "which does not apply here"),
    ],
)
def test_bad_options(kw, exc, match):
    with pytest.raises(exc, match=match):
        PackedCollate([(2, 8)], **kw)
    with pytest.raises(ValueError, match="shapes should be one or two pairs"):
        PackedCollate([(2, 0)])


def test_batches_cross_from_workers_whole():
    seqs = ragged([5, 3, 7, 1, 8, 2, 6, 4], seed=2)
    sampler = PackingBatchSampler([len(s) for s in seqs], max_tokens=16, seq_len=8, seed=0)
    collate = PackedCollate(sampler, attention_mask="block", flash_attention_kwargs=True)
    main = [collate([seqs[i] for i in b]) for b in sampler]
    loader = torch.utils.data.DataLoader(seqs, batch_sampler=sampler, collate_fn=collate, num_workers=1)
    for got, want in zip(loader, main):
        assert type(got) is dict and got.keys() == want.keys()
        for k, v in want.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(got[k], v), k
        assert got["packing"].same_as(want["packing"]) and got["max_length_q"] == want["max_length_q"]
