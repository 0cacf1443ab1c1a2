"""The collate's rules and its planner, rule by rule (loaders/_collate_spec.py)."""

from __future__ import annotations

import collections
from types import MappingProxyType

import numpy as np
import pytest
import torch

from dyntile import tensor_reader
from dyntile.planning import BucketPlan
from loaders import DynTileCollate
from loaders._collate_spec import (
    IGNORE_INDEX,
    CollateRules,
    LeafSpec,
    NodeSpec,
    kind_of,
    plan_batch,
    signature,
)

Point = collections.namedtuple("Point", "x y")
needs_native = pytest.mark.skipif(tensor_reader.native_module() is None, reason="native module not built")


def rules(**options) -> CollateRules:
    """The rules of a collate built with ``options`` (as DynTileCollate derives them)."""
    return DynTileCollate(**options)._rules


# ------------------------------------------------------------------ rules


def test_fill_is_the_keys_pad_value_then_the_ignore_index_for_labels_then_fill():
    r = CollateRules(pad_values=MappingProxyType({"input_ids": 3, "inner.ids": 4, "labels": -1}), fill=9)
    assert r.fill_for("input_ids") == 3 and r.fill_for("outer.input_ids") == 3  # the last part of a path
    assert r.fill_for("inner.ids") == 4 and r.fill_for("other.ids") == 9
    assert r.fill_for("labels") == -1 and r.fill_for("label") == IGNORE_INDEX == -100
    assert r.fill_for("x.label_ids") == -100 and r.fill_for("target") == 9
    assert CollateRules(label_keys=frozenset({"target"})).fill_for("label") == 0


def test_declared_sequences_always_pad():
    assert rules(pad_values={"ids": 0}).always_pads("ids", 1) and not rules(
        pad_values={"ids": 0}
    ).always_pads("x", 1)
    assert rules(pad_keys=("ids",)).always_pads("nested.ids", 2)
    assert rules(mask_from="x").always_pads("x", 1)
    plan = BucketPlan((8, 16))
    assert rules(plan=plan).always_pads("anything", 1) and not rules(plan=plan).always_pads("anything", 2)
    assert not rules(plan=plan, pad_keys=()).always_pads("anything", 1)  # pads only what differs
    assert not rules().always_pads("ids", 1)


def test_token_and_label_keys_align_and_others_do_not():
    r = rules()
    assert all(r.aligns(k) for k in ("input_ids", "attention_mask", "token_type_ids", "labels", "label"))
    assert not r.aligns("embedding") and not rules(label_keys=()).aligns("labels")


def test_padded_axes_target_sizes_and_rows():
    r = rules()
    shapes = np.array([[3, 5], [4, 5]])
    assert r.padded_axes(shapes, "x") == (0,) and rules(axes=(-1,)).padded_axes(shapes, "x") == (1,)
    assert r.padded_axes(np.array([[3, 5], [3, 5]]), "x") == (0,)  # one shape: the first axis
    assert rules(plan=BucketPlan(((8,), (8, 16)))).padded_axes(shapes, "x") == (0, 1)
    assert r.target_sizes(np.array([9]), (0,)) == (16,)
    assert rules(plan=BucketPlan((8, 24))).target_sizes(np.array([9]), (0,)) == (24,)
    assert r.rows_for(5, (), "x") == 5 and rules(batch_multiple=4).rows_for(5, (), "x") == 8
    with_rows = rules(plan=BucketPlan((8, 24)), bucket_rows=[6, 2])
    assert with_rows.rows_for(1, (24,), "x") == 2 and with_rows.rows_for(3, (40,), "x") == 3
    with pytest.raises(ValueError, match="larger than its bucket_rows entry 2"):
        with_rows.rows_for(3, (24,), "x")


def test_the_native_layout_needs_options_it_executes():
    assert rules().native_layout == (8, None)
    assert rules(plan=BucketPlan((8, 24))).native_layout[1].tolist() == [8, 24]
    for options in (
        {"batch_multiple": 2},
        {"tile": (2, 2)},
        {"plan": BucketPlan(((8,), (8,)))},
        {"plan": BucketPlan((8,)), "bucket_rows": [8]},
    ):
        assert rules(**options).native_layout is None, options


# ------------------------------------------------------------------ kinds and plans


@pytest.mark.parametrize(
    "value, kind",
    [
        ([1, 2], "rows"),
        ([], "rows"),
        ([1.5], "rows"),
        ([[1], [2]], "seq"),
        ((1, "a"), "seq"),
        (Point(1, 2), "namedtuple"),
        ({"a": 1}, "map"),
        (collections.OrderedDict(a=1), "map"),
        (torch.ones(2), "array"),
        (np.ones((2, 2)), "array"),
        (3, "numbers"),
        (2.5, "numbers"),
        (True, "numbers"),
        (np.float32(1), "numbers"),
        (np.bool_(True), "np_scalars"),
        ("s", "keep"),
        (b"b", "keep"),
        (None, "keep"),
        (np.str_("s"), "keep"),
    ],
)
def test_kind_of_each_value(value, kind):
    assert kind_of(value) == kind


def test_a_value_of_no_kind_is_named_by_its_key():
    with pytest.raises(TypeError, match="key 'x': cannot collate values of type object"):
        plan_batch(rules(), {"x": object()})


def test_a_plan_follows_the_structure_of_sample_0():
    spec = plan_batch(
        rules(pad_values={"ids": 0}),
        {
            "ids": [1, 2],
            "attention_mask": [1, 1],
            "emb": [0.5, 1.5],
            "meta": {"name": "a", "pos": Point(1, 2.0)},
            "pair": (1, "b"),
        },
    )
    root = spec.root
    assert (
        isinstance(root, NodeSpec)
        and root.kind == "map"
        and root.fields == ("ids", "attention_mask", "emb", "meta", "pair")
    )
    ids, mask, emb, meta, pair = root.children
    assert ids == LeafSpec("ids", "rows", 1, always=True, align=False)  # declared: pads anyway
    assert mask == LeafSpec("attention_mask", "rows", 1, always=False, align=True)
    assert emb == LeafSpec("emb", "rows", 1)  # a feature: neither
    assert meta.children[1].kind == "namedtuple" and meta.children[1].cls is Point
    assert meta.children[1].children[0].key == "meta.pos.x"
    assert [c.key for c in pair.children] == ["pair.0", "pair.1"]
    assert spec.native is None  # a nested value: Python


@needs_native
@pytest.mark.parametrize(
    "sample, options",
    [
        ({"ids": [1.5]}, {}),  # floats: not the native lists
        ({"ids": [1], "nested": {"a": [1]}}, {}),  # a structure
        ({"ids": [1], "name": "a"}, {}),  # strings
        ({"ids": torch.ones(2, 2)}, {}),  # another rank
        ({"ids": [1]}, {"batch_multiple": 2}),  # batch padding
        ({"label": 1}, {}),  # numbers alone
        ({"ids": [1]}, {"mask_from": "other"}),  # mask_from is no row key
        ({"ids": [1]}, {"pad_values": {"ids": 2**70}}),  # a fill the dtype cannot hold
        ({0: [1]}, {}),  # a key that is no str
        ({"ids": torch.ones(2, dtype=torch.complex64)}, {}),  # complex: conjugate bits
    ],
)
def test_what_the_native_executor_leaves_to_python(sample, options):
    assert plan_batch(rules(**options), sample).native is None


def test_the_signature_is_the_type_and_a_dicts_keys():
    assert signature({"a": 1, "b": 2}) == (dict, "a", "b") != signature({"b": 2, "a": 1})
    assert signature((1, 2)) == (tuple,) and signature(collections.OrderedDict(a=1)) == (
        collections.OrderedDict,
    )


def test_plans_are_cached_by_signature_and_a_mismatch_plans_again():
    collate = DynTileCollate(pad_values={"ids": 0})
    collate([{"ids": [1, 2]}, {"ids": [3]}])
    first = collate._last
    collate([{"ids": [4]}, {"ids": [5, 6]}])
    assert collate._last is first and len(collate._plans) == 1  # one plan, reused
    out = collate([{"ids": [1.5]}, {"ids": [2.5, 3.5]}])  # floats: the same plan, run in Python
    assert out["ids"].dtype == torch.float64 and collate._last is first and len(collate._plans) == 1
    out = collate([(torch.ones(2), "a"), (torch.ones(3), "b")])  # another structure
    assert out[0].shape == (2, 8) and len(collate._plans) == 2
    out = collate([{"ids": [[1], [2]]}, {"ids": [[3], [4]]}])  # same keys, another structure
    assert out["ids"][0].tolist() == [[1], [3]]
