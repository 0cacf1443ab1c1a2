"""plan_buckets: optimality against brute force, validation, multi-axis plans, real data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.planning import BucketPlan, plan_buckets
from shared_data import load_shared


def brute_force_cost(lengths, k, multiple, p):
    """Best total padded cost over every boundary subset of size <= k (obviously correct)."""
    L = np.asarray(lengths, dtype=np.int64)
    vals = sorted({max(-(-int(x) // multiple), 1) * multiple for x in L})
    best = None
    for r in range(1, min(k, len(vals)) + 1):
        for subset in itertools.combinations(vals[:-1], r - 1):
            bounds = np.array(subset + (vals[-1],))
            padded = bounds[np.searchsorted(bounds, L, side="left")]
            cost = int((padded.astype(object) ** p).sum())
            best = cost if best is None else min(best, cost)
    return best


def plan_cost(plan, lengths, p):
    padded = plan.padded_lengths(lengths).astype(object)
    return int((padded**p).sum())


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 120), min_size=1, max_size=40),
    k=st.integers(1, 5),
    multiple=st.sampled_from([1, 4, 8]),
    cost=st.sampled_from(["linear", "quadratic"]),
)
def test_plan_is_optimal_against_brute_force(lengths, k, multiple, cost):
    plan = plan_buckets(lengths, max_buckets=k, multiple=multiple, cost=cost)
    p = 1 if cost == "linear" else 2
    assert len(plan.boundaries) <= k
    assert all(b % multiple == 0 and b > 0 for b in plan.boundaries)
    assert plan.boundaries[-1] >= max(lengths)
    assert plan_cost(plan, lengths, p) == brute_force_cost(lengths, k, multiple, p)


@pytest.mark.parametrize("cost", ["linear", "quadratic"])
def test_optimal_with_many_distinct_values(cost):
    # enough distinct values that the divide-and-conquer recursion runs many levels
    rng = np.random.default_rng(3)
    L = rng.integers(1, 60, size=300)
    plan = plan_buckets(L, max_buckets=4, multiple=1, cost=cost)
    p = 1 if cost == "linear" else 2
    assert plan_cost(plan, L, p) == brute_force_cost(L, 4, 1, p)


def _weighted_cost(bounds, vals, w, p):
    """Sum over the distinct values of weight x (the boundary each rounds up to) ** p."""
    b = np.asarray(bounds)
    return float((w * b[np.searchsorted(b, vals)].astype(np.float64) ** p).sum())


def test_dp_with_zero_weights_against_brute_force():
    """Zero weights (a multi-axis plan's coordinate descent can give them) make lines
    of equal slope in the DP's convex-hull layer; the partition stays optimal."""
    from dyntile.planning.buckets import _optimal_boundaries

    rng = np.random.default_rng(7)
    for _ in range(200):
        vals = np.unique(rng.integers(1, 60, int(rng.integers(1, 9)))).astype(np.int64)
        w = rng.integers(0, 4, vals.size).astype(np.float64)
        w[-1] = max(w[-1], 1.0)
        k, p = int(rng.integers(1, 5)), int(rng.integers(1, 3))
        best = min(
            _weighted_cost(sub + (int(vals[-1]),), vals, w, p)
            for r in range(min(k, vals.size))
            for sub in itertools.combinations(vals[:-1].tolist(), r)
        )
        got = _optimal_boundaries(vals, w, k, p)
        assert len(got) <= k and got[-1] == vals[-1] and _weighted_cost(got, vals, w, p) == best


def test_fewer_distinct_values_than_buckets_gives_zero_extra_padding():
    plan = plan_buckets([3, 3, 17, 40], max_buckets=8, multiple=8)
    assert plan.boundaries == (8, 24, 40)
    assert plan.padded_lengths([3, 17, 40]).tolist() == [8, 24, 40]


def test_zero_lengths_pad_to_one_multiple():
    assert plan_buckets([0, 0], max_buckets=2, multiple=8).boundaries == (8,)


def test_more_buckets_never_pad_more():
    rng = np.random.default_rng(0)
    L = rng.lognormal(3.5, 1.0, size=2000).astype(np.int64)
    ratios = [plan_buckets(L, k).padding_ratio(L) for k in (1, 2, 4, 8, 16)]
    assert all(a >= b for a, b in zip(ratios, ratios[1:]))
    assert ratios[-1] < ratios[0] / 3


@pytest.mark.parametrize(
    "bad, exc, msg",
    [
        ([3, -3, 5], ValueError, r"lengths\[1\]=-3"),
        ([], ValueError, "non-empty"),
        ([1.5, 2.0], TypeError, "non-negative integers.*float64"),
        ([["a"]], TypeError, "non-negative integers"),
        (np.zeros((2, 2, 2), dtype=int), ValueError, r"shape \(n,\) or \(n, d\)"),
    ],
)
def test_bad_lengths(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        plan_buckets(bad)


def test_lengths_beyond_int64_are_named():
    with pytest.raises(ValueError, match=r"below 2\*\*63, but got lengths\[1\]=9223372036854775808"):
        plan_buckets(np.array([1, 2**63], np.uint64))


def test_bad_lengths_2d_names_row_and_column():
    with pytest.raises(ValueError, match=r"lengths\[2, 1\]=-1"):
        plan_buckets([[1, 2], [3, 4], [5, -1]])


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"max_buckets": 0}, "max_buckets should be >= 1"),
        ({"multiple": 0}, "multiple should be a positive integer"),
        ({"cost": "cubic"}, "cost should be one of"),
        ({"max_buckets": (2, 3)}, "one per axis"),
        ({"max_buckets": 2.5}, r"max_buckets should be an int .* but got 2.5"),
        ({"max_buckets": None}, r"max_buckets should be an int"),
    ],
)
def test_bad_options(kwargs, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        plan_buckets([1, 2, 3], **kwargs)


def test_plans_a_million_lengths():
    rng = np.random.default_rng(1)
    L = rng.integers(0, 4000, size=1_000_000)
    plan = plan_buckets(L, max_buckets=16, multiple=8)
    assert len(plan.boundaries) == 16 and plan.boundaries[-1] == 4000


# ----------------------------------------------------------------------- multi-axis


def area(plan, L, p=1):
    P = plan.padded_lengths(L).astype(np.float64)
    return float((P.prod(axis=1) ** p).sum())


@pytest.mark.parametrize("cost", ["linear", "quadratic"])
def test_multi_axis_descent_beats_independent_axes(cost):
    rng = np.random.default_rng(2)
    L = np.stack([rng.integers(10, 200, 400), rng.integers(10, 200, 400)], axis=1)
    L[:200, 1] = L[:200, 0] // 2 + 5  # correlated axes: the joint plan matters
    p = 1 if cost == "linear" else 2
    joint = plan_buckets(L, max_buckets=3, multiple=8, cost=cost)
    indep = BucketPlan(tuple(plan_buckets(L[:, a], 3, 8, cost).boundaries for a in range(2)), 8, cost)
    assert joint.ndim == 2 and joint.grid[0] <= 3 and joint.grid[1] <= 3
    assert area(joint, L, p) <= area(indep, L, p)


def test_multi_axis_matches_brute_force_when_it_can():
    # per-axis brute force over the joint objective: descent may only be a local
    # optimum, so check it is within a few percent of the best product plan
    rng = np.random.default_rng(5)
    L = rng.integers(1, 40, size=(30, 2))
    vals = [sorted({-(-int(x) // 4) * 4 for x in L[:, a]}) for a in range(2)]
    best = np.inf
    for r0 in range(1, 3):
        for s0 in itertools.combinations(vals[0][:-1], r0 - 1):
            for r1 in range(1, 3):
                for s1 in itertools.combinations(vals[1][:-1], r1 - 1):
                    plan = BucketPlan((s0 + (vals[0][-1],), s1 + (vals[1][-1],)), multiple=4)
                    best = min(best, area(plan, L))
    got = area(plan_buckets(L, max_buckets=2, multiple=4), L)
    assert best <= got <= best * 1.05


def test_image_shapes_plan():
    hw = load_shared("image_shapes_py_bundled.npy")[:, :2]
    plan = plan_buckets(hw, max_buckets=4, multiple=32)
    assert plan.ndim == 2
    assert all(b[-1] >= m for b, m in zip(plan.boundaries, hw.max(axis=0)))
    assert plan.padding_ratio(hw) < plan_buckets(hw, max_buckets=1, multiple=32).padding_ratio(hw)


def test_real_docstring_lengths():
    L = load_shared("lengths_cpython_docstrings.npy")
    one = plan_buckets(L, max_buckets=1).padding_ratio(L)
    eight = plan_buckets(L, max_buckets=8).padding_ratio(L)
    assert one > 0.9  # everything padded to the longest docstring
    assert eight < 0.35  # eight planned shapes remove most of it
    q = plan_buckets(L, max_buckets=8, cost="quadratic")
    assert q.padding_ratio(L, cost="quadratic") <= plan_buckets(L, 8).padding_ratio(L, cost="quadratic")


def test_lengths_rounding_past_int64_are_named():
    """Rounding 2**63 - 7 up to a multiple of 8 wrapped to a negative boundary, and
    reported a boundary the caller never gave; a 0-d max_buckets is an int."""
    with pytest.raises(
        ValueError,
        match=r"lengths\[0\]=9223372036854775801 rounded up to a multiple of 8 .*past "
        r"int64's range",
    ):
        plan_buckets([2**63 - 7], multiple=8)
    with pytest.raises(ValueError, match=r"lengths\[1, 0\]=9223372036854775807 rounded up"):
        plan_buckets([[3, 4], [2**63 - 1, 5]], multiple=2)
    assert plan_buckets([2**63 - 8], multiple=8).boundaries == (2**63 - 8,)
    with pytest.raises(ValueError, match="multiple should be a positive integer below 2\\*\\*63"):
        plan_buckets([5], multiple=10**19)
    assert plan_buckets([5, 9], max_buckets=np.array(2)).boundaries == (8, 16)
