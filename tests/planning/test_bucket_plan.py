"""BucketPlan: lookups against a reference, token-budget batch sizes, persistence."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.planning import BucketPlan


def reference_round_up(bounds, size):
    return min(b for b in bounds if b >= size)


@settings(max_examples=50, deadline=None)
@given(
    bounds=st.lists(st.integers(1, 60), min_size=1, max_size=6, unique=True),
    sizes=st.lists(st.integers(0, 480), min_size=1, max_size=20),
)
def test_lookups_match_reference(bounds, sizes):
    bounds = tuple(sorted(8 * b for b in bounds))
    plan = BucketPlan(bounds, multiple=8)
    sizes = [s for s in sizes if s <= bounds[-1]] or [0]
    assert [plan.round_up(s) for s in sizes] == [(reference_round_up(bounds, s),) for s in sizes]
    assert plan.bucket_of(sizes).tolist() == [bounds.index(reference_round_up(bounds, s)) for s in sizes]
    assert plan.padded_lengths(sizes).tolist() == [reference_round_up(bounds, s) for s in sizes]
    padded = sum(reference_round_up(bounds, s) for s in sizes)
    assert plan.padding_ratio(sizes) == pytest.approx(1 - sum(sizes) / padded)


def test_multi_axis_lookups():
    plan = BucketPlan(((8, 16), (32, 64, 96)), multiple=8)
    assert plan.ndim == 2 and plan.grid == (2, 3) and plan.num_buckets == 6
    assert plan.round_up((9, 33)) == (16, 64)
    L = np.array([[1, 1], [9, 33], [16, 96], [3, 70]])
    assert plan.bucket_of(L).tolist() == [0, 4, 5, 2]
    assert plan.padded_lengths(L).tolist() == [[8, 32], [16, 64], [16, 96], [8, 96]]
    assert plan.bucket_shapes()[4] == (16, 64)
    assert plan.padding_ratio(L, cost="linear") == pytest.approx(
        1 - (1 + 9 * 33 + 16 * 96 + 210) / (256 + 1024 + 1536 + 768)
    )


def test_overflow_errors_name_the_size():
    plan = BucketPlan((16, 64))
    with pytest.raises(ValueError, match="size 65 on axis 0 is over the largest boundary 64"):
        plan.round_up(65)
    with pytest.raises(ValueError, match=r"lengths\[2\]=100 is over the largest boundary 64"):
        plan.bucket_of([1, 2, 100])
    with pytest.raises(ValueError, match="needs 1 sizes"):
        plan.round_up((1, 2))
    with pytest.raises(ValueError, match=r"lengths\[1, 1\]=99"):
        BucketPlan(((8,), (64,))).bucket_of([[1, 1], [2, 99]])


@pytest.mark.parametrize(
    "bounds, msg",
    [
        ((), "non-empty"),
        ((8, 12), "multiples of 8"),
        ((16, 8), "strictly increasing"),
        ((0, 8), "positive multiples"),
    ],
)
def test_invalid_boundaries(bounds, msg):
    with pytest.raises(ValueError, match=msg):
        BucketPlan(bounds, multiple=8)


def test_plan_is_immutable():
    plan = BucketPlan((8, 16))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.boundaries = (8,)
    assert hash(plan) == hash(BucketPlan([8, 16]))


@pytest.mark.parametrize(
    "budget, cost, multiple, expected",
    [
        (4096, "linear", 8, (256, 64, 16)),
        (1000, "linear", 8, (56, 15, 3)),  # 15 -> 8 would waste half the budget; 3 < 8 stays 3
        (1000, "linear", 1, (62, 15, 3)),
        (70000, "quadratic", 8, (272, 16, 1)),  # 70000 // 65536 = 1
    ],
)
def test_batch_sizes(budget, cost, multiple, expected):
    plan = BucketPlan((16, 64, 256))
    sizes = plan.batch_sizes(budget, cost=cost, multiple=multiple)
    assert sizes == expected
    p = 1 if cost == "linear" else 2
    for bs, b in zip(sizes, plan.boundaries):
        assert 1 <= bs and bs * b**p <= budget


def test_batch_sizes_budget_too_small_names_bucket():
    with pytest.raises(ValueError, match=r"smaller than one sample of bucket 2 \(padded shape \(256,\)"):
        BucketPlan((16, 64, 256)).batch_sizes(200)
    # buckets that hold no samples need not fit: they get size 1
    assert BucketPlan((16, 64, 256)).batch_sizes(200, required=[0, 1]) == (12, 3, 1)
    with pytest.raises(ValueError, match="bucket 1"):
        BucketPlan((16, 64, 256)).batch_sizes(50, required=[1])
    with pytest.raises(ValueError, match="positive"):
        BucketPlan((16,)).batch_sizes(0)


def test_batch_sizes_multi_axis_use_area():
    plan = BucketPlan(((8, 16), (32,)))
    assert plan.batch_sizes(1024, multiple=1) == (4, 2)


def test_extend():
    plan = BucketPlan((8, 32), multiple=8)
    assert plan.extend(70).boundaries == (8, 32, 72)
    assert plan.extend(20) == plan
    assert BucketPlan(((8,), (16,))).extend((4, 17)).boundaries == ((8,), (16, 24))


@pytest.mark.parametrize(
    "plan",
    [
        BucketPlan((8, 32, 1600)),
        BucketPlan((16, 48), multiple=16, cost="quadratic"),
        BucketPlan(((32, 64), (128,)), multiple=32),
    ],
)
def test_json_and_file_round_trip(plan, tmp_path):
    assert BucketPlan.from_json(plan.to_json()) == plan
    plan.save(tmp_path / "plan.json")
    assert BucketPlan.load(tmp_path / "plan.json") == plan


def test_from_json_rejects_other_text():
    with pytest.raises(ValueError, match="not a BucketPlan"):
        BucketPlan.from_json('{"boundaries": [8]}')
    with pytest.raises(ValueError, match="not a BucketPlan"):
        BucketPlan.from_json("nope")


def test_bucket_of_one_sample_gives_an_int():
    from dyntile.planning import BucketPlan

    assert BucketPlan((8, 16)).bucket_of(5) == 0 and BucketPlan((8, 16)).bucket_of(9) == 1
    grid = BucketPlan(((8, 16), (8, 32)))
    assert grid.bucket_of([9, 20]) == grid.bucket_of([[9, 20]])[0] == 3
