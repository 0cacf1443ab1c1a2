"""DynTileCollate: default_collate equivalence, padding against a NumPy reference, errors, stats."""

from __future__ import annotations

import collections
import pickle
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

import loaders._collate_python as _collate_python
import loaders.collate as collate_module
from dyntile.planning import BucketPlan, plan_buckets
from loaders import DynTileCollate, PackedCollate
from test_collate_outputs import python_only

Point = collections.namedtuple("Point", "x y")


def assert_same(a, b, where="batch"):
    """Recursive equality with dtypes (tensors), types and keys."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        # strings inside tuples come back as default_collate's zip tuples; we give lists
        if hasattr(a, "_fields") or hasattr(b, "_fields"):
            assert type(a) is type(b), where
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


# ------------------------------------------------------------------ default_collate equivalence


def equal_size_samples(rng, n):
    return [
        {
            "x": torch.from_numpy(rng.standard_normal((3, 5)).astype(np.float32)),
            "ids": torch.from_numpy(rng.integers(0, 9, 7)),
            "arr": rng.integers(0, 5, (2, 2)).astype(np.int16),
            "label": int(rng.integers(0, 3)),
            "score": float(rng.random()),
            "flag": bool(rng.random() < 0.5),
            "np_scalar": np.float32(rng.random()),
            "name": f"s{i}",
            "pair": (torch.tensor([i, i + 1]), f"p{i}"),
            "point": Point(i, float(i) / 2),
            "nested": {"a": torch.ones(2, dtype=torch.bool)},
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("multiple, side", [(1, "right"), (8, "right"), (8, "left")])
def test_equals_default_collate_on_equal_sizes(n, multiple, side):
    # leaves whose samples agree in size are stacked, never padded up to the multiple
    samples = equal_size_samples(np.random.default_rng(n), n)
    collate = DynTileCollate(multiple=multiple, side=side)
    assert_same(collate(samples), default_collate(samples))
    lists = [{"ids": [1, 2, 3], "w": [0.5, 1.0]} for _ in range(n)]
    out = collate(lists)
    assert (
        out["ids"].tolist() == [[1, 2, 3]] * n
        and out["w"].dtype == torch.float64
        and set(out) == {"ids", "w"}
    )


def test_equals_default_collate_on_tuples_and_bare_tensors():
    rng = np.random.default_rng(0)
    samples = [(torch.from_numpy(rng.random(4)), int(i)) for i in range(3)]
    assert_same(DynTileCollate(multiple=1)(samples), default_collate(samples))
    bare = [torch.arange(6).reshape(2, 3) + i for i in range(4)]
    assert_same(DynTileCollate(multiple=1)(bare), default_collate(bare))


# ------------------------------------------------------------------ padding against a reference


def reference_pad(seqs, target, fill, left, rows=None, dtype=None):
    rows = len(seqs) if rows is None else rows
    out = np.full((rows, target), fill, dtype=dtype or np.asarray(seqs[0]).dtype)
    for i, s in enumerate(seqs):
        s = np.asarray(s)
        if len(s):
            if left:
                out[i, target - len(s) :] = s
            else:
                out[i, : len(s)] = s
    return out


def make_leaf(values: np.ndarray, kind: str):
    if kind == "list":
        return values.tolist()
    if kind == "numpy":
        return values
    if kind == "strided":  # non-contiguous tensor view of the same values
        wide = torch.from_numpy(np.repeat(values, 2))
        return wide[::2]
    return torch.from_numpy(values)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=9),
    kind=st.sampled_from(["tensor", "numpy", "list", "strided"]),
    side=st.sampled_from(["right", "left"]),
    multiple=st.sampled_from([1, 8]),
    use_plan=st.booleans(),
    batch_multiple=st.sampled_from([None, 4]),
)
def test_padding_matches_reference(lengths, kind, side, multiple, use_plan, batch_multiple):
    rng = np.random.default_rng(sum(lengths))
    seqs = [rng.integers(1, 1000, n) for n in lengths]
    samples = [
        {"input_ids": make_leaf(s, kind), "labels": make_leaf(s + 1, kind), "idx": i}
        for i, s in enumerate(seqs)
    ]
    plan = BucketPlan((8, 24, 48)) if use_plan else None
    collate = DynTileCollate(
        plan,
        multiple=multiple,
        side=side,
        batch_multiple=batch_multiple,
        pad_values={"input_ids": 0, "labels": -100},
    )
    out = collate(samples)
    B, longest = len(seqs), max(lengths)
    T = plan.round_up(longest)[0] if plan else -(-longest // multiple) * multiple
    rows = B if batch_multiple is None else -(-B // batch_multiple) * batch_multiple
    left = side == "left"
    assert out["input_ids"].dtype == torch.int64
    np.testing.assert_array_equal(out["input_ids"].numpy(), reference_pad(seqs, T, 0, left, rows))
    np.testing.assert_array_equal(
        out["labels"].numpy(), reference_pad([s + 1 for s in seqs], T, -100, left, rows)
    )
    lens = np.array(lengths + [0] * (rows - B))
    np.testing.assert_array_equal(out["lengths"].numpy(), lens)
    pos = np.arange(T)
    mask = pos < lens[:, None] if not left else pos >= T - lens[:, None]
    np.testing.assert_array_equal(out["attention_mask"].numpy(), mask)
    assert out["idx"].tolist() == list(range(B)) + [0] * (rows - B)  # batch padding reaches numbers too
    assert collate.stats.real_elements == 2 * sum(lengths)
    assert collate.stats.padded_elements == 2 * rows * T


def reference_pad_nd(arrays, target, fill, left):
    """Pad N-D arrays to the per-sample shape ``target`` with plain slicing."""
    out = np.full((len(arrays),) + tuple(target), fill, dtype=arrays[0].dtype)
    for i, a in enumerate(arrays):
        idx = tuple(slice(t - n, t) if left else slice(0, n) for t, n in zip(target, a.shape))
        out[(i,) + idx] = a
    return out


@settings(max_examples=30, deadline=None)
@given(
    data=st.data(),
    B=st.integers(1, 5),
    side=st.sampled_from(["right", "left"]),
    kind=st.sampled_from(["tensor", "numpy"]),
)
def test_nested_samples_match_reference(data, B, side, kind):
    """Nested dicts and tuples holding 1-D and 2-D ragged leaves (padded along axis 0,
    the other axis fixed: ``axes=(0,)``, so also when every sample has one size),
    numbers and strings: every leaf equals its own reference."""
    rng = np.random.default_rng(B)
    lengths = data.draw(st.lists(st.integers(0, 12), min_size=B, max_size=B))
    frames = data.draw(st.lists(st.integers(1, 10), min_size=B, max_size=B))
    wrap = torch.from_numpy if kind == "tensor" else (lambda a: a)
    toks = [rng.integers(1, 99, n) for n in lengths]
    specs = [rng.standard_normal((f, 3)).astype(np.float32) for f in frames]
    samples = [
        {"text": {"ids": wrap(t), "name": f"s{i}"}, "audio": (wrap(sp), float(i)), "label": i}
        for i, (t, sp) in enumerate(zip(toks, specs))
    ]
    collate = DynTileCollate(
        multiple=4,
        side=side,
        pad_values={"text.ids": -1, "audio.0": 0.5},
        pad_keys=("text.ids", "audio.0"),
        axes=(0,),
    )
    out = collate(samples)
    left = side == "left"
    T = -(-max(lengths) // 4) * 4
    F = -(-max(frames) // 4) * 4
    np.testing.assert_array_equal(np.asarray(out["text"]["ids"]), reference_pad(toks, T, -1, left))
    np.testing.assert_array_equal(np.asarray(out["audio"][0]), reference_pad_nd(specs, (F, 3), 0.5, left))
    assert out["audio"][1].tolist() == [float(i) for i in range(B)] and out["label"].tolist() == list(
        range(B)
    )
    assert out["text"]["name"] == [f"s{i}" for i in range(B)]
    assert out["lengths"].tolist() == lengths  # from the first padded leaf
    assert collate.stats.real_elements == sum(lengths) + 3 * sum(frames)


def test_nd_leaves_padded_on_their_ragged_axis():
    rng = np.random.default_rng(1)
    specs = [rng.standard_normal((n, 5)).astype(np.float32) for n in (3, 9, 6)]
    out = DynTileCollate(BucketPlan((8, 16)))([{"spec": s} for s in specs])
    assert out["spec"].shape == (3, 16, 5)
    for i, s in enumerate(specs):
        np.testing.assert_array_equal(out["spec"][i, : len(s)].numpy(), s)
        assert not out["spec"][i, len(s) :].any()
    assert out["lengths"].tolist() == [[3, 5], [9, 5], [6, 5]]
    assert out["attention_mask"].shape == (3, 16)


def test_images_with_a_two_axis_plan_and_channel_first_axes():
    rng = np.random.default_rng(2)
    imgs = [torch.from_numpy(rng.random((3, h, w)).astype(np.float32)) for h, w in ((5, 7), (9, 4))]
    plan = BucketPlan(((8, 16), (8, 16)))
    out = DynTileCollate(plan, axes=(1, 2), fill=-1.0)(imgs)  # bare tensors: no mask keys
    assert out.shape == (2, 3, 16, 8)
    assert torch.equal(out[0, :, :5, :7], imgs[0]) and (out[0, :, 5:] == -1).all()
    with pytest.raises(ValueError, match=r"key 'img': sample 1 has shape \(4, 9, 4\).*only axes \[1, 2\]"):
        DynTileCollate(plan, axes=(1, 2))([{"img": imgs[0]}, {"img": torch.zeros(4, 9, 4)}])


def test_image_mask_covers_both_axes():
    imgs = [np.ones((2, 3), np.uint8), np.ones((4, 1), np.uint8)]
    out = DynTileCollate(multiple=4)([{"img": x} for x in imgs])
    assert out["img"].shape == (2, 4, 4)
    expected = np.zeros((2, 4, 4), bool)
    expected[0, :2, :3] = expected[1, :4, :1] = True
    np.testing.assert_array_equal(out["attention_mask"].numpy(), expected)


def test_tiled_output_equals_dyntile_tile():
    from dyntile import tile

    seqs = [torch.arange(n) for n in (5, 20, 11)]
    padded = DynTileCollate(multiple=8)([{"x": s} for s in seqs])["x"]
    tiled = DynTileCollate(multiple=8, tile=(2, 8))([{"x": s} for s in seqs])["x"]
    assert tiled.shape == (2, 3, 2, 8)
    assert torch.equal(tiled, tile(padded, (2, 8)))


def test_mask_options():
    samples = [{"ids": [1, 2, 3], "attention_mask": [1, 1, 1]}, {"ids": [4], "attention_mask": [1]}]
    out = DynTileCollate(multiple=4)(samples)
    assert out["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]  # the samples' own mask kept
    out = DynTileCollate(multiple=4, mask_key="m", lengths_key=None, mask_dtype=torch.long)(samples)
    assert out["m"].dtype == torch.long and "lengths" not in out
    out = DynTileCollate(multiple=4, mask_from="attention_mask", mask_key="m2")(samples)
    assert out["m2"].sum().item() == 4
    with pytest.raises(KeyError, match="mask_from='nope'"):
        DynTileCollate(mask_from="nope")(samples)


@pytest.mark.parametrize("kind", ["tensors", "lists"])
def test_equal_length_sequences_still_go_to_the_plan(kind):
    """With a plan, a batch whose samples share one length gets the bucket's shape,
    mask and lengths like any other (a batch of one sample, a bucket of equal
    lengths): shapes never depend on the batch."""
    make = torch.arange if kind == "tensors" else (lambda n: list(range(n)))
    samples = [{"ids": make(5), "emb": torch.ones(3)}, {"ids": make(5), "emb": torch.ones(3)}]
    plan = BucketPlan((8, 16))
    for collate in (
        DynTileCollate(plan),
        DynTileCollate(plan, pad_values={"ids": 0}),
        DynTileCollate(plan, pad_keys=["ids"]),
    ):
        out = collate(samples)
        assert out["ids"].shape == (2, 8) and out["attention_mask"].shape == (2, 8)
        assert out["lengths"].tolist() == [5, 5] and out["attention_mask"].sum() == 10
    assert DynTileCollate(plan)(samples)["emb"].shape == (2, 8)  # nothing named: every 1-D leaf
    assert DynTileCollate(plan, pad_values={"ids": 0})(samples)["emb"].shape == (2, 3)  # named: only those
    assert DynTileCollate(plan, mask_from="ids")(samples)["emb"].shape == (2, 3)
    out = DynTileCollate(plan, pad_keys=())(samples)  # opt out: stacked as they are
    assert out["ids"].shape == (2, 5) and out["emb"].shape == (2, 3) and "attention_mask" not in out
    assert DynTileCollate(plan, pad_keys=["ids"])(samples)["emb"].shape == (2, 3)
    assert DynTileCollate(pad_values={"ids": 0})(samples)["emb"].shape == (2, 3)  # no plan: stacked
    one = DynTileCollate(plan, bucket_rows=[4, 4])([samples[0]])
    assert one["ids"].shape == (4, 8) and one["lengths"].tolist() == [5, 0, 0, 0]


def test_fixed_size_features_beside_named_sequences_keep_their_shape():
    """A fixed-size 1-D feature (a box) next to a named sequence: not bucketed, its
    rows follow the sequence's bucket, and the mask and lengths come from the sequence."""
    plan = BucketPlan((8, 64))
    samples = [{"bbox": [1, 2, 3, 4], "input_ids": list(range(n))} for n in (40, 40, 19)]
    out = DynTileCollate(plan, bucket_rows=(64, 8), pad_values={"input_ids": 0})(samples)
    assert out["input_ids"].shape == (8, 64) and out["bbox"].shape == (8, 4)
    assert out["attention_mask"].shape == (8, 64) and out["lengths"].tolist() == [40, 40, 19] + [0] * 5
    assert out["bbox"][3:].eq(0).all()


def test_equal_length_samples_over_the_plan_raise():
    plan = BucketPlan((8, 16))
    samples = [{"ids": torch.arange(20)}, {"ids": torch.arange(20)}]
    with pytest.raises(
        ValueError, match=r"key 'ids': sample 0 has shape \(20,\), over the plan's largest boundary"
    ):
        DynTileCollate(plan)(samples)
    with pytest.raises(ValueError, match=r"key 'ids': sample 0 has shape \(20,\)"):
        DynTileCollate(plan)([{"ids": list(range(20))}])
    assert DynTileCollate(plan, overflow="truncate")(samples)["ids"].shape == (2, 16)


# ------------------------------------------------------------------ overflow and bad input


def test_overflow_policies():
    plan = BucketPlan((8, 16))
    samples = [{"ids": torch.arange(20)}, {"ids": torch.arange(3)}]
    with pytest.raises(
        ValueError, match=r"key 'ids': sample 0 has shape \(20,\), over the plan's largest boundary"
    ):
        DynTileCollate(plan, pad_values={"ids": 0})(samples)
    with pytest.raises(ValueError, match=r"key 'ids': sample 0 has shape \(20,\)"):
        DynTileCollate(plan)(samples)
    cut = DynTileCollate(plan, overflow="truncate", pad_values={"ids": 0})
    out = cut(samples)
    assert out["ids"].shape == (2, 16) and out["ids"][0].tolist() == list(range(16))
    assert out["lengths"].tolist() == [16, 3] and cut.stats.truncated_samples == 1
    two_keys = [
        {"ids": torch.arange(20), "labels": torch.arange(20)},
        {"ids": torch.arange(3), "labels": torch.arange(3)},
    ]
    cut = DynTileCollate(plan, overflow="truncate")
    assert (
        cut(two_keys)["labels"].shape == (2, 16) and cut.stats.truncated_samples == 1
    )  # a sample, not a key
    grow = DynTileCollate(plan, overflow="extend")
    assert grow(samples)["ids"].shape == (2, 24)
    assert grow.plan.boundaries == (8, 16) and grow.stats.plan_extensions == 1  # the plan stays


@pytest.mark.parametrize(
    "samples, exc, msg",
    [
        ([], ValueError, "empty batch"),
        ([{"a": [1], "b": [2]}, {"a": [1]}], KeyError, "sample 1 is missing key 'b'"),
        ([{"a": [1]}, {"a": [1], "c": 3}], KeyError, "sample 1 has extra key 'c'"),
        ([{"a": [1]}, [1]], TypeError, "sample 1 is a list, but sample 0 is a mapping"),
        (
            [{"a": torch.ones(2)}, {"a": torch.ones(3, dtype=torch.float64)}],
            TypeError,
            "key 'a': sample 1 has dtype torch.float64, but sample 0 has (dtype )?torch.float32",
        ),
        (
            [{"a": torch.ones(2)}, {"a": np.ones(3, np.float32)}],
            TypeError,
            "key 'a': sample 1 has type ndarray",
        ),
        (
            [{"a": torch.ones(2)}, {"a": torch.ones(2, 2)}],
            ValueError,
            r"key 'a': sample 1 has shape \(2, 2\) \(2 dimensions\)",
        ),
        (
            [{"a": [1, 2]}, {"a": [1, "x"]}],
            TypeError,
            "key 'a': sample 1 should be a list of numbers, but holds a str",
        ),
        (
            [{"a": [1, 2]}, {"a": [[1], [2]]}],
            TypeError,
            "key 'a': sample 1 should be a list of numbers, but holds a list",
        ),
        (
            [{"a": [[1], [2]]}, {"a": [1, 2]}],
            TypeError,
            "key 'a.0': sample 1 is a int, but sample 0 is a list of numbers",
        ),
        ([{"a": 1}, {"a": "x"}], TypeError, r"key 'a': sample 1 is a str, but sample 0 is a number \(int\)"),
        ([{"a": 1}, {"a": None}], TypeError, r"key 'a': sample 1 is a NoneType, but sample 0 is a number"),
        (
            [{"a": 1.0}, {"a": [1]}],
            TypeError,
            r"key 'a': sample 1 is a list, but sample 0 is a number \(float\)",
        ),
        ([{"a": (1, 2)}, {"a": 3}], TypeError, "key 'a': sample 1 is a int, but sample 0 is a tuple"),
        ([{"a": object()}, {"a": object()}], TypeError, "key 'a': cannot collate values of type object"),
        ([(1, 2), (1,)], ValueError, "sample 1 has 1 elements, but sample 0 has 2"),
        ([{"a": ["x"]}, {"a": ["y", "z"]}], ValueError, "a list of str is collated position by position"),
        ([{"a": [1.5]}, {"a": [2]}], None, None),
        (
            [{"a": torch.ones(2, dtype=torch.uint8)}, {"a": [-1]}],
            TypeError,
            r"key 'a': sample 1 \(a list\) holds values that uint8 cannot store exactly",
        ),
        (
            [{"a": torch.ones(2, dtype=torch.float16)}, {"a": [70000]}],
            TypeError,
            r"key 'a': sample 1 \(a list\) holds values that float16 cannot store exactly",
        ),
        (
            [{"a": [2**53 + 1, 1]}, {"a": [0.5]}],
            TypeError,
            r"key 'a': sample 0 \(a list\) holds values that float64 cannot store exactly",
        ),
    ],
)
def test_bad_input_names_sample_and_key(samples, exc, msg):
    collate = DynTileCollate()
    if exc is None:
        assert collate(samples)["a"].dtype == torch.float64
        return
    with pytest.raises(exc, match=msg):
        collate(samples)


def test_other_sequence_types_collate_like_tuples():
    import collections

    for make in (collections.UserList, tuple, list):
        samples = [make([torch.arange(3), 1.5]), make([torch.arange(3), 2.5])]
        out = DynTileCollate()(samples)
        assert out[0].shape == (2, 3) and out[1].tolist() == [1.5, 2.5]


def test_bad_fill_names_key():
    with pytest.raises(ValueError, match="key 'ids'"):
        DynTileCollate(pad_values={"ids": float("nan")})([{"ids": [1, 2]}, {"ids": [3]}])


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"side": "up"}, ValueError),
        ({"overflow": "wrap"}, ValueError),
        ({"plan": (8, 16)}, TypeError),
        ({"multiple": 0}, ValueError),
        ({"batch_multiple": -1}, ValueError),
        ({"tile": (8,)}, ValueError),
    ],
)
def test_bad_options(kwargs, exc):
    with pytest.raises(exc):
        DynTileCollate(**kwargs)


# ------------------------------------------------------------------ stats, pickling, pinning, packing


def test_stats_and_reset_and_return_stats():
    c = DynTileCollate(multiple=4, return_stats=True)
    b1 = c([{"ids": [1, 2, 3]}, {"ids": [4]}])
    c([{"ids": [1, 2, 3, 4, 5]}, {"ids": [4]}])
    s = c.stats
    assert s.batches == 2 and s.real_elements == 4 + 6 and s.padded_elements == 8 + 16
    assert s.padding_ratio == pytest.approx(1 - 10 / 24) and s.distinct_shapes == 2
    assert b1["collate_stats"]["real_elements"] == 4
    from loaders.collate_stats import CollateStats

    merged = CollateStats()
    merged.update(b1["collate_stats"])
    assert merged.real_elements == 4 and merged.distinct_shapes == 1
    c.reset_stats()
    assert c.stats.batches == 0 and c.stats.padding_ratio == 0.0


def test_pickle_round_trip():
    c = DynTileCollate(BucketPlan((8, 32)), pad_values={"labels": -100}, side="left", batch_multiple=2)
    samples = [{"input_ids": torch.arange(n), "labels": torch.arange(n)} for n in (3, 9, 1)]
    c2 = pickle.loads(pickle.dumps(c))
    assert_same(c(samples), c2(samples))


# ------------------------------------------------------------------ real tokens


def test_real_docstring_tokens_with_plan(docstring_tokens):
    seqs = docstring_tokens[:64]
    plan = plan_buckets(np.array([len(s) for s in docstring_tokens]), max_buckets=8)
    out = DynTileCollate(plan, pad_values={"input_ids": 0})(
        [{"input_ids": torch.from_numpy(s)} for s in seqs]
    )
    T = plan.round_up(max(len(s) for s in seqs))[0]
    np.testing.assert_array_equal(out["input_ids"].numpy(), reference_pad(seqs, T, 0, False))
    assert out["input_ids"].dtype == torch.int32


def test_bucket_rows_give_one_shape_per_bucket():
    from loaders import BucketBatchSampler

    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 200, 300)
    plan = plan_buckets(lengths, max_buckets=4)
    sampler = BucketBatchSampler(lengths, plan=plan, max_tokens=2048, seed=1)
    collate = DynTileCollate(plan, pad_values={"input_ids": 0}, bucket_rows=sampler.batch_sizes)
    rows = dict(zip(plan.bucket_shapes(), sampler.batch_sizes))
    seen = set()
    for idx in sampler:
        batch = collate([{"input_ids": torch.arange(1, int(lengths[i]) + 1)} for i in idx])
        ids, mask, lens = batch["input_ids"], batch["attention_mask"], batch["lengths"]
        assert ids.shape[0] == rows[(ids.shape[1],)]
        B = len(idx)
        assert torch.all(ids[B:] == 0) and not mask[B:].any() and torch.all(lens[B:] == 0)
        assert lens[:B].tolist() == [int(lengths[i]) for i in idx]
        seen.add(tuple(ids.shape))
    assert len(seen) <= plan.num_buckets
    with pytest.raises(ValueError, match="needs a plan"):
        DynTileCollate(bucket_rows=[8])
    with pytest.raises(ValueError, match="2 entries but the plan has 4 buckets"):
        DynTileCollate(plan, bucket_rows=[8, 8])
    with pytest.raises(ValueError, match="larger than its bucket_rows entry 1"):
        DynTileCollate(plan, bucket_rows=[1] * 4, pad_values={"x": 0})([{"x": [1]}, {"x": [2]}])


def test_bucket_rows_come_from_one_leaf():
    """Leaves in different buckets get one row count: that of the mask_from leaf's
    bucket (else the first padded leaf's), the sampler's batch size for it."""
    plan = BucketPlan((8, 16))
    samples = [
        {"x": torch.ones(13), "y": torch.ones(3), "n": 1},
        {"x": torch.ones(5), "y": torch.ones(2), "n": 2},
    ]
    for mask_from, rows, mask_shape in ((None, 2, (2, 16)), ("x", 2, (2, 16)), ("y", 4, (4, 8))):
        collate = DynTileCollate(
            plan, bucket_rows=[4, 2], pad_values={"x": 0, "y": -1}, mask_from=mask_from, return_stats=True
        )
        out = collate(samples)
        assert {k: tuple(v.shape)[:1] for k, v in out.items() if isinstance(v, torch.Tensor)} == {
            "x": (rows,),
            "y": (rows,),
            "n": (rows,),
            "attention_mask": (rows,),
            "lengths": (rows,),
        }
        assert out["attention_mask"].shape == mask_shape
        assert out["x"][2:].eq(0).all() and out["y"][2:].eq(-1).all() and out["lengths"][2:].eq(0).all()
        stats = out["collate_stats"]
        assert stats["padded_elements"] == rows * 16 + rows * 8
        assert stats["shapes"] == [("x", (rows, 16)), ("y", (rows, 8))]


def test_batch_multiple_without_a_ragged_leaf():
    out = DynTileCollate(batch_multiple=4)([{"x": torch.ones(3), "s": 1}, {"x": torch.ones(3), "s": 2}])
    assert out["x"].shape == (4, 3) and out["s"].tolist() == [1, 2, 0, 0]


def test_declared_nd_sequence_of_one_shape_pads_its_first_axis():
    collate = DynTileCollate(pad_values={"labels": -100})
    for samples in (
        [{"labels": torch.zeros(2, 3, dtype=torch.long)}],
        [{"labels": torch.zeros(2, 3, dtype=torch.long)}, {"labels": torch.ones(2, 3, dtype=torch.long)}],
    ):
        out = collate(samples)
        assert out["labels"].shape == (len(samples), 8, 3) and out["labels"][:, 2:].eq(-100).all()
        assert out["attention_mask"].shape == (len(samples), 8) and out["attention_mask"].sum() == 2 * len(
            samples
        )
    with pytest.raises(ValueError, match="at least one axis"):
        DynTileCollate(axes=())


def test_huge_fill_for_batch_padding_is_named():
    with pytest.raises(ValueError, match="key 's': cannot pad the batch dimension"):
        DynTileCollate(batch_multiple=4, pad_values={"s": 10**400})(
            [{"x": [1], "s": 1.0}, {"x": [1, 2], "s": 2.0}]
        )


def test_batch_padding_reaches_every_leaf():
    """batch_multiple / bucket_rows give every tensor leaf the padded rows (numbers and
    stacked leaves included, with their key's fill); lists of strings keep B entries."""
    samples = [
        {
            "input_ids": [1, 2, 3],
            "label": 4,
            "emb": torch.ones(2),
            "text": "a",
            "pair": (torch.zeros(3), 7.5),
        },
        {"input_ids": [5], "label": 6, "emb": torch.ones(2), "text": "b", "pair": (torch.zeros(3), 8.5)},
    ]
    for collate in (
        DynTileCollate(batch_multiple=4, pad_values={"label": -100}),
        DynTileCollate(BucketPlan((8,)), bucket_rows=[4], pad_values={"label": -100}),
    ):
        out = collate(samples)
        assert out["input_ids"].shape == (4, 8) and out["attention_mask"].shape == (4, 8)
        assert out["label"].tolist() == [4, 6, -100, -100]
        assert out["emb"].shape[0] == 4 and out["emb"][2:].eq(0).all()
        assert out["pair"][0].shape[0] == 4 and out["pair"][1].tolist() == [7.5, 8.5, 0.0, 0.0]
        assert out["text"] == ["a", "b"] and out["lengths"].tolist() == [3, 1, 0, 0]
    with pytest.raises(
        ValueError,
        match=r"key 'flag': cannot pad the batch dimension of a torch.bool leaf with "
        r"fill=-100 \(it would be stored as True\); give pad_values\['flag'\]",
    ):
        DynTileCollate(batch_multiple=4, fill=-100)([{"x": [1], "flag": True}, {"x": [1, 2], "flag": False}])


def test_pin_memory_reaches_every_tensor(monkeypatch):
    """With CUDA, pin_memory=True pins every output tensor. Simulated on a CPU build:
    pinning marks a tensor, and every tensor of the batch must carry the mark."""

    real_empty = torch.empty

    def empty(*shape, pin_memory=False, **kw):
        t = real_empty(*shape, **kw)
        t._pinned = pin_memory
        return t

    def pin(self):
        t = self.clone()
        t._pinned = True
        return t

    monkeypatch.setattr(collate_module, "pinning_available", lambda who: True)
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin, raising=False)
    monkeypatch.setattr(
        torch.Tensor, "is_pinned", lambda self: getattr(self, "_pinned", False), raising=False
    )
    samples = [
        {"ids": [1, 2, 3], "label": 4, "emb": np.ones(2), "text": "a", "pair": (np.ones(3), 7.5)},
        {"ids": [5], "label": 6, "emb": np.ones(2), "text": "b", "pair": (np.ones(3), 8.5)},
    ]
    for collate in (DynTileCollate(pin_memory=True), DynTileCollate(pin_memory=True, batch_multiple=4)):
        out = collate(samples)
        tensors = [
            out["ids"],
            out["label"],
            out["emb"],
            out["pair"][0],
            out["pair"][1],
            out["attention_mask"],
            out["lengths"],
        ]
        assert all(t.is_pinned() for t in tensors)
        assert out["text"] == ["a", "b"]


def test_pin_memory_skipped_in_a_worker_with_one_warning(monkeypatch):
    """In a DataLoader worker, pin_memory=True would start CUDA there (impossible in a
    forked worker of a process using CUDA; on a CPU build torch.empty(pin_memory=True)
    raises): the worker's copy skips pinning, warns once, and collates as without it."""

    monkeypatch.setattr(collate_module, "pinning_available", lambda who: True)
    collate = DynTileCollate(pin_memory=True, pad_values={"ids": 0})
    monkeypatch.setattr(collate_module, "get_worker_info", lambda: object())
    samples = [{"ids": [1, 2, 3]}, {"ids": [5]}]
    with pytest.warns(RuntimeWarning, match="does not pin in DataLoader workers"):
        out = collate(samples)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = collate(samples)  # once per worker
    expected = DynTileCollate(pad_values={"ids": 0})(samples)
    for got in (out, again):
        assert_same(dict(got), expected)
        assert not any(t.is_pinned() for t in got.values())


@pytest.mark.parametrize(
    "test",
    [
        test_nd_leaves_padded_on_their_ragged_axis,
        test_images_with_a_two_axis_plan_and_channel_first_axes,
        test_equals_default_collate_on_tuples_and_bare_tensors,
        test_batch_padding_reaches_every_leaf,
    ],
)
def test_tensor_leaves_without_the_native_reader(test):
    """The same answers when tensors are read through torch's bindings (a build without
    dyntile.cpu._torch_tensors, or another torch version)."""
    from dyntile import tensor_reader

    with tensor_reader.use_native(False):
        test()
        for samples, exc, msg in [
            (
                [{"a": torch.ones(2)}, {"a": torch.ones(3, dtype=torch.float64)}],
                TypeError,
                "key 'a': sample 1 has dtype torch.float64",
            ),
            (
                [{"a": torch.ones(2, 1)}, {"a": torch.ones(2)}],
                ValueError,
                r"key 'a': sample 1 has shape \(2,\)",
            ),
        ]:
            with pytest.raises(exc, match=msg):
                DynTileCollate()(samples)


def test_tensor_leaves_of_every_kind_match_the_bindings_route():
    """2-D and 3-D tensor leaves (views, offsets, bf16) collate the same with and
    without the native reader."""
    from dyntile import tensor_reader

    rng = np.random.default_rng(5)
    base = torch.from_numpy(rng.standard_normal((6, 11, 7)).astype(np.float32))
    batches = [
        [{"x": base[i, : 2 + i]} for i in range(5)],  # views with offsets
        [{"x": base[i, ::2, : 1 + i].t()} for i in range(4)],  # strided, transposed
        [{"x": base[i, : 3 + i].to(torch.bfloat16)[None]} for i in range(3)],
    ]  # 3-D, bf16
    for samples in batches:
        fast = DynTileCollate(multiple=4, axes=(-2, -1) if samples[0]["x"].dim() > 2 else None)(samples)
        with tensor_reader.use_native(False):
            slow = DynTileCollate(multiple=4, axes=(-2, -1) if samples[0]["x"].dim() > 2 else None)(samples)
        assert fast.keys() == slow.keys()
        for k in fast:
            assert torch.equal(fast[k], slow[k]), k


def _walk_only(collate: DynTileCollate, samples):
    """``collate(samples)`` by the Python executor (its plans made without a native form)."""
    return python_only(collate)(samples)


def _no_python_executor(monkeypatch):
    """Fail the test if a batch reaches the Python executor (a test that the native one runs)."""
    monkeypatch.setattr(_collate_python, "run", lambda *a: pytest.fail("ran the Python executor"))


@pytest.mark.parametrize("route", ["native", "bindings", "walk"])
def test_equal_rows_that_require_grad_keep_their_grad_fn(route, request):
    """1-D tensors of one length that require grad are stacked as default_collate
    stacks them: the batch records autograd (0-d tensors already did); gradients reach
    every sample. Rows of other lengths are padded, as pad_batch pads them (detached)."""
    from dyntile import tensor_reader

    if route == "bindings":
        switch = tensor_reader.use_native(False)
        switch.__enter__()
        request.addfinalizer(lambda: switch.__exit__(None, None, None))
    leaves = [torch.arange(3.0, requires_grad=True), torch.ones(3), torch.full((3,), 2.0, requires_grad=True)]
    collate = DynTileCollate()
    run = (lambda s: _walk_only(collate, s)) if route == "walk" else collate
    params = [torch.nn.Parameter(t.detach().clone()) for t in leaves]
    for samples, leaf, pick in [
        ([{"x": t, "ids": [1] * (i + 1)} for i, t in enumerate(leaves)], lambda s: s["x"], lambda o: o["x"]),
        ([{"x": t} for t in leaves], lambda s: s["x"], lambda o: o["x"]),
        ([(t,) for t in leaves], lambda s: s[0], lambda o: o[0]),
        (leaves, lambda s: s, lambda o: o),
        (params, lambda s: s, lambda o: o),
    ]:
        out = pick(run(samples))
        assert out.grad_fn is not None
        assert torch.equal(out.detach(), default_collate([leaf(s) for s in samples]).detach())
        (out * torch.arange(1.0, 4.0)).sum().backward()
        for t in map(leaf, samples):
            if t.requires_grad:
                assert t.grad.tolist() == [1.0, 2.0, 3.0]
                t.grad = None
    padded = collate([torch.ones(2, requires_grad=True), torch.ones(3)])
    assert padded.grad_fn is None and padded.shape == (2, 8)


# a "label" key of numbers beside the rows: name -> the value of sample i (one kind, or mixed)
NUMBER_KEYS = {
    None: None,
    "int": lambda i: 3 * i - 2,
    "float": lambda i: i / 4,
    "bool": lambda i: i % 2 == 0,
    "int then bool": lambda i: True if i else 5,
    "float then int": lambda i: i if i else 0.5,
    "bool then int": lambda i: 7 if i else False,
    "past int64": lambda i: 2**63 + i,
    "ints and a list": lambda i: [i] if i == 1 else i,
    "0-d int64": lambda i: torch.tensor(i - 1),
    "0-d bool": lambda i: torch.tensor(i % 2 == 0),
    "0-d float16": lambda i: torch.tensor(i / 2, dtype=torch.float16),
    "0-d views": lambda i: torch.arange(10.0)[9 - i],
    "0-d of two dtypes": lambda i: torch.tensor(i, dtype=torch.int32 if i else torch.int64),
    "0-d needing grad": lambda i: torch.tensor(float(i), requires_grad=True),
    "0-d and a 1-d": lambda i: torch.tensor([i]) if i == 1 else torch.tensor(i),
    "0-d and a number": lambda i: 3 if i == 1 else torch.tensor(i),
}


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=7),
    equal=st.booleans(),
    kind=st.sampled_from(["list", "tensor", "mixed", "strided"]),
    side=st.sampled_from(["right", "left"]),
    use_plan=st.booleans(),
    named=st.sampled_from(["default", "none", "labels"]),
    mask_from=st.sampled_from([None, "labels", "missing", "label"]),
    return_stats=st.booleans(),
    outputs=st.sampled_from(["both", "no mask", "no lengths", "float mask", "mask key in data"]),
    native=st.booleans(),
    number=st.sampled_from(list(NUMBER_KEYS)),
    number_first=st.booleans(),
)
def test_flat_rows_route_equals_the_walk(
    lengths,
    equal,
    kind,
    side,
    use_plan,
    named,
    mask_from,
    return_stats,
    outputs,
    native,
    number,
    number_first,
):
    """Flat dicts of 1-D sequences (and maybe a key of Python numbers beside them, e.g.
    a class label) take the one-pass route (with the native module, or through
    pad_rows without it): outputs, dtypes, counters and errors equal the general
    walk's, whatever the options (equal lengths, plans, named keys, mask_from, left
    padding, mask and lengths keys and dtype) and the numbers' kinds."""
    from dyntile import tensor_reader

    with tensor_reader.use_native(native):
        if equal:
            lengths = [lengths[0]] * len(lengths)
        rng = np.random.default_rng(sum(lengths) + len(lengths))
        seqs = [rng.integers(1, 500, n) for n in lengths]

        def leaf(a, i):
            if kind == "list" or (kind == "mixed" and i == 0):
                return a.tolist()
            t = torch.from_numpy(np.repeat(a, 2))[::2] if kind == "strided" else torch.from_numpy(a.copy())
            return t

        samples = [{"input_ids": leaf(s, 0), "labels": leaf(s * 2, 1)} for s in seqs]
        if number is not None:
            value = NUMBER_KEYS[number]
            samples = [
                dict({"label": value(i)}, **x) if number_first else dict(x, label=value(i))
                for i, x in enumerate(samples)
            ]
        if outputs == "mask key in data":  # a sample's own attention_mask is kept, not replaced
            samples = [
                dict(x, attention_mask=leaf(np.ones(len(s), np.int64), 0)) for x, s in zip(samples, seqs)
            ]
        pad_keys = {"default": None, "none": (), "labels": ("labels",)}[named]
        options = dict(
            plan=BucketPlan((8, 32)) if use_plan else None,
            side=side,
            pad_keys=pad_keys,
            pad_values={"input_ids": 0, "labels": -100} if named == "default" else None,
            mask_from=mask_from,
            return_stats=return_stats,
            mask_key=None if outputs == "no mask" else "attention_mask",
            lengths_key=None if outputs == "no lengths" else "lengths",
            mask_dtype=torch.float32 if outputs == "float mask" else torch.bool,
        )
        fast, walk = DynTileCollate(**options), DynTileCollate(**options)
        try:
            want = _walk_only(walk, samples)
        except Exception as e:  # the same error, by the same route
            with pytest.raises(type(e), match=re.escape(str(e)[:40])):
                fast(samples)
            return
        assert_same_batch(fast(samples), want)
        assert fast.stats.as_dict() == walk.stats.as_dict() and fast.stats.shapes == walk.stats.shapes


def assert_same_batch(got: dict, want: dict) -> None:
    """The same keys in the same order, tensors of one dtype and value, other values equal."""
    assert list(got) == list(want)
    for k in want:
        if isinstance(want[k], torch.Tensor):
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
        else:
            assert got[k] == want[k], k


def test_flat_rows_route_is_taken(monkeypatch):
    """The common batch does not reach the Python executor (a test that the native one can fail)."""
    from dyntile import tensor_reader

    if tensor_reader.native_module() is None:
        pytest.skip("dyntile.cpu._torch_tensors not built for this torch")
    collate = DynTileCollate(pad_values={"input_ids": 0})
    _no_python_executor(monkeypatch)
    out = collate([{"input_ids": [1, 2, 3]}, {"input_ids": torch.tensor([4]).tolist()}])
    assert out["input_ids"].tolist() == [[1, 2, 3, 0, 0, 0, 0, 0], [4, 0, 0, 0, 0, 0, 0, 0]]
    assert out["lengths"].tolist() == [3, 1]


@pytest.mark.parametrize("leaf", [list, torch.tensor])
def test_native_flat_rows_route_is_taken(leaf, monkeypatch):
    """With the native module, lists and tensors are padded (and masked) without
    pad_rows or the Python mask (a test that the native route can fail)."""
    from dyntile import tensor_reader

    if tensor_reader.native_module() is None:
        pytest.skip("dyntile.cpu._torch_tensors not built for this torch")
    _no_python_executor(monkeypatch)
    collate = DynTileCollate(pad_values={"labels": -100}, side="left")
    out = collate(
        [
            {"input_ids": leaf([1, 2, 3]), "labels": leaf([5, 6, 7])},
            {"input_ids": leaf([4]), "labels": leaf([8])},
        ]
    )
    assert out["input_ids"].tolist() == [[0] * 5 + [1, 2, 3], [0] * 7 + [4]]
    assert out["labels"].tolist() == [[-100] * 5 + [5, 6, 7], [-100] * 7 + [8]]
    assert out["attention_mask"].tolist() == [[False] * 5 + [True] * 3, [False] * 7 + [True]]
    assert out["lengths"].tolist() == [3, 1] and collate.stats.batches == 1


@pytest.mark.parametrize(
    "numbers, dtype",
    [
        ([3, -1], torch.int64),
        ([0.5, 2.0], torch.float64),
        ([True, False], torch.bool),
        ([torch.tensor(7), torch.tensor(-2)], torch.int64),
        ([torch.tensor(1.5, dtype=torch.bfloat16), torch.tensor(-3.0, dtype=torch.bfloat16)], torch.bfloat16),
    ],
)
def test_native_route_stacks_numbers_beside_the_rows(numbers, dtype, monkeypatch):
    """A key of Python numbers or 0-d tensors beside the rows (a class label, a score)
    is stacked by the one-call route too, as default_collate stacks it, and not
    counted as padding (a test that the route can fail: the walk is switched off)."""
    from dyntile import tensor_reader

    if tensor_reader.native_module() is None:
        pytest.skip("dyntile.cpu._torch_tensors not built for this torch")
    _no_python_executor(monkeypatch)
    collate = DynTileCollate(pad_values={"input_ids": 0})
    samples = [{"label": numbers[0], "input_ids": [1, 2, 3]}, {"label": numbers[1], "input_ids": [4]}]
    out = collate(samples)
    assert list(out) == ["label", "input_ids", "attention_mask", "lengths"]
    assert out["label"].dtype == dtype and torch.equal(
        out["label"], default_collate([s["label"] for s in samples])
    )
    assert out["lengths"].tolist() == [3, 1] and out["input_ids"].shape == (2, 8)
    assert collate.stats.as_dict()["padded_elements"] == 16 and collate.stats.shapes == {
        ("input_ids", (2, 8)): 1
    }


def test_native_route_reads_keys_in_any_order_and_equal_key_objects(monkeypatch):
    """Samples whose keys come in another order, or are equal strings that are other
    objects, are read by the one-call route as the walk reads them."""
    from dyntile import tensor_reader

    if tensor_reader.native_module() is None:
        pytest.skip("dyntile.cpu._torch_tensors not built for this torch")
    other_ids = "".join(["input", "_ids"])  # equal to "input_ids", not the same object
    literal = "input_ids"
    assert other_ids == literal and other_ids is not literal
    samples = [
        {"input_ids": [1, 2, 3], "labels": [4, 5, 6]},
        {"labels": [7], "input_ids": [8]},
        {other_ids: [9, 10], "labels": [11, 12]},
        {"labels": [13, 14, 15, 16], other_ids: [17, 18, 19, 20]},
    ]
    options = dict(pad_values={"input_ids": 0, "labels": -100})
    want = _walk_only(DynTileCollate(**options), samples)
    fast = DynTileCollate(**options)
    _no_python_executor(monkeypatch)
    got = fast(samples)
    assert_same_batch(got, want)
    assert got["labels"][1].tolist() == [7] + [-100] * 7 and got["input_ids"][3].tolist()[:4] == [
        17,
        18,
        19,
        20,
    ]


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    ],
)
@pytest.mark.parametrize("side", ["right", "left"])
def test_native_flat_rows_route_equals_the_walk_for_every_dtype(dtype, side):
    """Tensor rows of every dtype the kernels move (strided views among them), beside a
    key of lists, with a float mask and per-key fills, over two batches (the second
    reuses the per-key fill bits worked out for the first)."""
    rng = np.random.default_rng(7)
    options = dict(
        pad_values={"x": 1, "ids": -1}, side=side, mask_from="x", mask_dtype=torch.float32, return_stats=True
    )
    fast, walk = DynTileCollate(**options), DynTileCollate(**options)
    for n in (3, 5):
        lengths = rng.integers(0, 12, n)
        base = [torch.from_numpy(rng.integers(0, 2, 2 * m)).to(dtype) for m in lengths]
        samples = [{"ids": rng.integers(0, 99, m).tolist(), "x": b[::2]} for m, b in zip(lengths, base)]
        assert_same_batch(fast(samples), _walk_only(walk, samples))
    assert fast.stats.as_dict() == walk.stats.as_dict()
    from dyntile import tensor_reader

    if tensor_reader.native_module() is not None:
        assert fast._last.native is not None and len(fast._plans) == 1  # one plan, run natively


def test_flat_rows_route_with_other_keys_and_samples_equals_the_walk():
    """Non-string keys are named as the walk names them (str), and a non-mapping
    after a dict gets the walk's error."""
    samples = [{0: [1, 2, 3], 1: [4]}, {0: [5], 1: [6, 7]}]
    for options in ({}, {"pad_values": {"0": -1}}, {"pad_keys": ("1",)}):
        fast, walk = DynTileCollate(**options), DynTileCollate(**options)
        got, want = fast(samples), _walk_only(walk, samples)
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)
        assert fast.stats.shapes == walk.stats.shapes
    with pytest.raises(TypeError, match="sample 1 is a ndarray, but sample 0 is a mapping"):
        DynTileCollate()([{"a": [1, 2]}, np.arange(3)])
    with pytest.raises(TypeError, match="sample 1 is a list, but sample 0 is a mapping"):
        DynTileCollate()([{0: [1, 2]}, [[3, 4]]])  # a list answers the int key 0
    mixed = DynTileCollate()([{"a": [1, 2]}, collections.OrderedDict(a=[3])])  # mappings of two types
    assert mixed["a"].tolist() == [[1, 2, 0, 0, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]]


def test_tensor_and_parameter_mixed_in_a_key_is_named():
    with pytest.raises(TypeError, match="key 'x': sample 1 has type Parameter, but sample 0 has type Tensor"):
        DynTileCollate()([{"x": torch.ones(2, 3)}, {"x": torch.nn.Parameter(torch.ones(3, 3))}])


def test_tile_with_batch_padding_tiles_the_grown_batch():
    """A tiled 1-D leaf of ceil(rows/tm) == B tile rows was grown again: (4, 1, 2, 8),
    or a crash naming no key when the mask was on."""
    samples = [{"x": [1, 2, 3]}, {"x": [4]}]
    for collate in (
        DynTileCollate(batch_multiple=4, tile=(2, 8), return_stats=True),
        DynTileCollate(BucketPlan((8, 16)), bucket_rows=[4, 4], tile=(2, 8), return_stats=True),
    ):
        out = collate(samples)
        padded = torch.tensor([[1, 2, 3, 0, 0, 0, 0, 0], [4] + [0] * 7, [0] * 8, [0] * 8])
        assert out["x"].shape == (2, 1, 2, 8)
        assert torch.equal(out["x"], padded.reshape(2, 2, 1, 8).permute(0, 2, 1, 3))
        assert out["attention_mask"].shape == (4, 8) and out["lengths"].tolist() == [3, 1, 0, 0]
        assert (
            out["collate_stats"]["shapes"] == [("x", (4, 8))]
            and out["collate_stats"]["padded_elements"] == 32
        )


def test_namedtuple_fields_are_named_alike_for_pad_values_and_batch_rows():
    """The walk named fields by position ("0"), batch-row growth by name ("label"):
    one of the two pad_values was silently ignored."""
    nt = collections.namedtuple("NT", ["ids", "label"])
    out = DynTileCollate(pad_values={"ids": -1, "label": -100}, batch_multiple=4)(
        [nt([1, 2, 3], 0), nt([4], 1)]
    )
    assert out.ids[1].tolist() == [4] + [-1] * 7 and out.ids[3].tolist() == [-1] * 8
    assert out.label.tolist() == [0, 1, -100, -100]


@pytest.mark.parametrize(
    "samples, options, match",
    [
        (
            [{"ids": [2**64]}, {"ids": [1]}],
            {},
            "sample 0 holds 18446744073709551616, which no integer dtype holds",
        ),
        ([{"ids": [2**64]}, {"ids": [1]}], {"batch_multiple": 2}, "sample 0 holds 18446744073709551616"),
    ],
)
def test_numbers_numpy_reads_as_objects_raise_not_stopiteration(samples, options, match):
    """A bare StopIteration escaped the collate: out of a DataLoader it ends the epoch
    without a word."""
    with pytest.raises(ValueError, match=match):
        DynTileCollate(**options)(samples)


def test_complex_lists_collate_on_either_route():
    samples = [{"a": [1j]}, {"a": [2, 3]}]
    expected = torch.tensor([[1j, 0, 0, 0], [2, 3, 0, 0]], dtype=torch.complex128)
    for options in ({}, {"batch_multiple": 1}):
        assert torch.equal(DynTileCollate(multiple=4, **options)(samples)["a"], expected)


def test_options_are_fixed_once_built():
    collate = DynTileCollate(pad_values={"a": 0})
    batch = [{"a": [1, 2, 3]}, {"a": [4]}]
    first = collate(batch)
    for name, value in (
        ("multiple", 4),
        ("plan", BucketPlan((8, 16))),
        ("pad_values", {"a": -1}),
        ("side", "left"),
    ):
        with pytest.raises(AttributeError, match=f"DynTileCollate's '{name}' is fixed once it is built"):
            setattr(collate, name, value)
    for name in ("plan", "multiple"):
        with pytest.raises(AttributeError, match=f"DynTileCollate's '{name}' is fixed once it is built"):
            delattr(collate, name)
    with pytest.raises(TypeError):
        collate.pad_values["a"] = -1  # a read-only mapping
    assert collate.pad_values == {"a": 0} and "pad_values={'a': 0}" in repr(collate)
    assert_same_batch(collate(batch), first)
    collate.reset_stats()  # not an option
    clone = pickle.loads(pickle.dumps(collate))
    assert clone.pad_values == {"a": 0} and type(clone.pad_values) is type(collate.pad_values)
    assert_same_batch(clone(batch), first)


def test_bucket_rows_are_read_only_and_pickle():
    plan = BucketPlan((8, 16))
    rows = DynTileCollate(plan, pad_values={"a": 0}, bucket_rows=[4, 2])
    with pytest.raises(TypeError):
        rows.bucket_rows[(8,)] = 8
    batch = [{"a": [1, 2, 3]}, {"a": [4]}]
    clone = pickle.loads(pickle.dumps(rows))
    assert type(clone.bucket_rows) is type(rows.bucket_rows) and clone.bucket_rows == rows.bucket_rows
    assert_same_batch(clone(batch), rows(batch))


def test_an_extended_batch_is_padded_by_the_plan_and_its_own_sizes(monkeypatch):
    """overflow='extend' pads a batch over the plan to its longest sample rounded up to
    ``multiple``, whatever came before (36 tokens: 40, after a batch of 50 too); the plan
    stays, and batches within it still take the one-call route."""
    from dyntile import tensor_reader

    collate = DynTileCollate(BucketPlan((8, 32)), pad_values={"a": 0}, overflow="extend")

    def width(n):
        return collate([{"a": list(range(n))}, {"a": [1]}])["a"].shape[1]

    assert [width(n) for n in (36, 50, 36, 20)] == [40, 56, 40, 32]
    assert collate.plan.boundaries == (8, 32) and collate.stats.plan_extensions == 3
    if tensor_reader.native_module() is not None:
        _no_python_executor(monkeypatch)
    out = collate([{"a": list(range(12))}, {"a": [1]}])
    assert out["a"].shape == (2, 32) and out["lengths"].tolist() == [12, 1]


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
@pytest.mark.parametrize(
    "extra",
    [
        lambda: torch.quantize_per_tensor(torch.ones(()), 0.1, 0, torch.qint8),  # 0-d, quantized
        lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8),  # 1-D, quantized, one length
        lambda: torch.zeros(2, dtype=torch.uint3),  # sub-byte, one length
        lambda: torch.zeros(2, dtype=torch.bits8),
        lambda: torch.ones(2, 3),  # 2-D, one shape
        lambda: torch.tensor(5),  # 0-d
    ],
)
def test_tensors_the_kernels_do_not_move_beside_rows_are_stacked(extra):
    """A leaf the one-call route does not take (another rank, a dtype NumPy cannot
    carry) sends the batch to the walk, which stacks it as default_collate does."""
    samples = [{"ids": [1, 2], "x": extra()}, {"ids": [3], "x": extra()}]
    out = DynTileCollate(pad_values={"ids": 0})(samples)
    want = torch.stack([s["x"] for s in samples])
    assert out["x"].dtype == want.dtype and out["x"].shape == want.shape
    bits = (
        (lambda t: t.int_repr())
        if want.is_quantized
        else (lambda t: t.view(torch.uint8))
        if want.dtype in (torch.uint3, torch.bits8)
        else (lambda t: t)
    )
    assert torch.equal(bits(out["x"]), bits(want))
    assert out["ids"].tolist() == [[1, 2, 0, 0, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]]


def test_a_subclass_overriding_collate_runs_on_every_batch():
    class Marked(DynTileCollate):
        def _collate(self, samples):
            out = super()._collate(samples)
            out["seen"] = True
            return out

    collate = Marked(pad_values={"input_ids": 0})
    batch = [{"input_ids": [1, 2, 3]}, {"input_ids": [4]}]
    assert ["seen" in collate(batch) for _ in range(3)] == [True, True, True]


def test_a_collate_pickled_without_the_native_state_still_collates():
    collate = DynTileCollate(pad_values={"a": 0})
    state = collate.__getstate__()
    state.update(_row_specs={}, _native_args=None, _pin=False)  # as an older dyntile pickled it
    old = DynTileCollate.__new__(DynTileCollate)
    old.__setstate__(state)
    assert old([{"a": [1, 2]}, {"a": [3]}])["a"].tolist() == [
        [1, 2, 0, 0, 0, 0, 0, 0],
        [3, 0, 0, 0, 0, 0, 0, 0],
    ]


@pytest.mark.parametrize("make", [DynTileCollate, lambda: PackedCollate([(2, 8)])])
def test_token_lists_numpy_would_round_are_refused(make):
    """A token list of integers with one past int64 (NumPy reads it as float64, rounding
    it) is refused by both collates, naming the key and the sample."""
    batch = [{"input_ids": [1, 2]}, {"input_ids": [2**63 + 5, 1]}]
    with pytest.raises(
        TypeError,
        match=r"key 'input_ids'.*sample 1 is a list of integers with one past int64, .* 9223372036854775813",
    ):
        make()(batch)
