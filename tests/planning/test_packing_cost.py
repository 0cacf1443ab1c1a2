"""choose_seq_len: the packed row length of least cost, against the real packer's epochs."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.planning import BucketPlan, packing_cost
from dyntile.planning.packing import pack_lengths, packing_shapes
from dyntile.planning.packing_cost import choose_seq_len, row_cost
from shared_data import load_shared


def docstring_lengths():
    return load_shared("lengths_cpython_docstrings.npy")


def lognormal_lengths(n=5000, seed=0):
    return (np.random.default_rng(seed).lognormal(4.0, 1.0, n)).astype(np.int64) + 1


def epoch_cost(L, batches, attention, causal, weight, step):
    """The cost of an epoch of pack_lengths, counted from its batches (the reference)."""
    L = np.asarray(L)
    slots = sum(b.shape[0] * b.shape[1] for b in batches)
    if attention == "dense":
        scores = sum(b.shape[0] * b.shape[1] ** 2 for b in batches)
    else:
        sizes = np.concatenate([b.sizes for b in batches]).astype(float)
        scores = float(np.sum(sizes * (sizes + 1) / 2 if causal else sizes**2))
    return slots + weight * scores + step * len(batches), slots, scores, len(batches)


def longest_sample_T(L, max_tokens, multiple=8, overflow="extend"):
    """T of the longest-sample rule without its last-batch refinement: the longest sample rounded up."""
    T0 = max(-(-int(np.max(L)) // multiple) * multiple, multiple)
    return T0 if T0 <= max_tokens else max_tokens // multiple * multiple


# ------------------------------------------------------------ the choice on real and synthetic data


@pytest.mark.parametrize("max_tokens", [2048, 4096])
def test_docstrings_pick_rows_shorter_than_the_longest_sample(max_tokens):
    L = docstring_lengths()
    longest = int(L.max())
    varlen = choose_seq_len(L, max_tokens=max_tokens)
    dense = choose_seq_len(L, max_tokens=max_tokens, attention="dense")
    for c in (varlen, dense):
        assert c.seq_len < longest and len(c.shapes) == 2 and c.shapes[1][1] == 1600
        assert c.cost < c.longest.cost and c.cost == min(x.cost for x in c.candidates)
        assert c.longest.shapes == packing_shapes(L, longest_sample_T(L, max_tokens), max_tokens=max_tokens)
        assert all(b * t <= max_tokens for b, t in c.shapes)
    assert dense.seq_len <= varlen.seq_len
    assert packing_shapes(L, max_tokens=max_tokens) == varlen.shapes
    assert packing_shapes(L, max_tokens=max_tokens, attention="dense") == dense.shapes


@pytest.mark.parametrize("attention", ["varlen", "dense"])
@pytest.mark.parametrize("overflow", ["extend", "split"])
def test_lognormal_lengths_pick_a_short_row_and_the_packer_agrees(attention, overflow):
    L = lognormal_lengths()
    c = choose_seq_len(L, max_tokens=8192, attention=attention, overflow=overflow)
    assert c.seq_len < L.max() and c.sampled == L.size
    batches = pack_lengths(L, max_tokens=8192, attention=attention, overflow=overflow, seed=3)
    assert {b.shape for b in batches} <= set(c.shapes) and len(c.shapes) <= 2
    # the choice's figures are the real epoch's (one pool, one rank)
    cost, slots, scores, n = epoch_cost(L, batches, attention, True, 1 / (6 * 768), 8192 / 16)
    assert (c.chosen.batches, c.chosen.slots) == (n, slots)
    assert math.isclose(c.chosen.scores, scores, rel_tol=1e-12) and math.isclose(c.cost, cost, rel_tol=1e-12)
    assert math.isclose(c.chosen.padded_fraction, 1 - L.sum() / slots, rel_tol=1e-12)
    # every sample whole unless split, in one batch
    seen = np.concatenate([b.sample_order for b in batches])
    assert np.array_equal(np.sort(seen), np.arange(L.size))
    for b in batches:
        whole = b.sizes == L[b.indices]
        assert whole.all() if overflow == "extend" else np.all(whole | (L[b.indices] > c.seq_len))


def test_dense_rows_no_longer_than_varlen_rows():
    for seed in range(4):
        L = lognormal_lengths(3000, seed)
        for max_tokens in (4096, 16384):
            v = choose_seq_len(L, max_tokens=max_tokens).seq_len
            d = choose_seq_len(L, max_tokens=max_tokens, attention="dense").seq_len
            assert d <= v, (seed, max_tokens, d, v)


def test_large_corpora_are_costed_on_a_quantile_sample():
    L = lognormal_lengths(60_000, 1)
    c = choose_seq_len(L, max_tokens=8192, attention="dense")
    assert c.sampled == packing_cost.SAMPLE < L.size
    batches = pack_lengths(L, c.seq_len, max_tokens=8192)
    slots = sum(b.shape[0] * b.shape[1] for b in batches)
    assert abs(c.chosen.batches - len(batches)) <= 0.01 * len(batches)
    assert abs(c.chosen.slots - slots) <= 0.01 * slots


# --------------------------------------------------------------------------- invariants


@settings(max_examples=40, deadline=None)
@given(
    L=st.lists(st.integers(0, 300), min_size=1, max_size=150),
    budget=st.integers(300, 2000),
    attention=st.sampled_from(["varlen", "dense"]),
    causal=st.booleans(),
    overflow=st.sampled_from(["extend", "split", "error"]),
    m=st.sampled_from([1, 8, 16]),
    step=st.sampled_from([None, 0, 50.5]),
)
def test_choice_invariants_and_reference_cost(L, budget, attention, causal, overflow, m, step):
    L = np.array(L)
    kw = dict(
        max_tokens=budget, multiple=m, overflow=overflow, attention=attention, causal=causal, step_cost=step
    )
    try:
        c = choose_seq_len(L, **kw)
    except ValueError as e:  # the longest-sample rule's own refusals: a sample over the budget
        assert "needs" in str(e) or "longer than seq_len" in str(e), e
        return
    (B, T) = c.shapes[0]
    assert len(c.shapes) <= 2 and T % m == 0 and all(b * t <= budget for b, t in c.shapes)
    assert c.cost == min(x.cost for x in c.candidates) and c.chosen in c.candidates
    Ts = [x.seq_len for x in c.candidates]
    assert Ts == sorted(set(Ts)) and c.longest in c.candidates
    if overflow == "error":
        assert T >= L.max()
    # the same shapes again from the chosen T, and by default from packing_shapes
    assert packing_shapes(L, T, max_tokens=budget, multiple=m, overflow=overflow) == c.shapes
    assert packing_shapes(L, **kw) == c.shapes
    # order does not matter; the figures are those of the real epoch
    assert choose_seq_len(L[::-1], **kw).shapes == c.shapes
    batches = pack_lengths(L, **kw, seed=1)
    cost, slots, scores, n = epoch_cost(
        L, batches, attention, causal, 1 / 4608, budget / 16 if step is None else step
    )
    assert (c.chosen.batches, c.chosen.slots) == (n, slots)
    assert math.isclose(c.cost, cost, rel_tol=1e-9)


def test_deterministic_and_reported():
    L = lognormal_lengths(4000, 2)
    a, b = choose_seq_len(L, max_tokens=4096), choose_seq_len(L, max_tokens=4096)
    assert a == b and a.candidates == b.candidates
    strided = np.repeat(L.astype(np.int32), 2)[::2]  # another dtype, not contiguous
    assert not strided.flags.c_contiguous and choose_seq_len(strided, max_tokens=np.int64(4096)) == a
    text = a.describe()
    assert "x" in text and "cost" in text and "varlen attention" in text and "longest-sample rule" in text
    parts = a.chosen
    assert math.isclose(parts.cost, parts.slots + parts.attention + parts.overhead)


def test_cost_weights_defaults_and_options():
    assert row_cost(max_tokens=2048) == packing_cost.RowCost("varlen", True, 1 / 4608, 128.0)
    assert row_cost("dense", d_model=64).attention_weight == 1 / 384
    assert row_cost(attention_weight=0.01, step_cost=0).step_cost == 0.0
    L = lognormal_lengths(3000)
    narrow = choose_seq_len(L, max_tokens=4096, attention="dense", d_model=64)
    wide = choose_seq_len(L, max_tokens=4096, attention="dense", attention_weight=1 / (6 * 64))
    assert narrow == wide
    # no attention weight and no step cost: slots alone decide
    slots_only = choose_seq_len(L, max_tokens=4096, attention="dense", attention_weight=0, step_cost=0)
    assert slots_only.cost == min(x.slots for x in slots_only.candidates)


# ------------------------------------------------------------ explicit shapes are used as given


def test_explicit_seq_len_batch_rows_and_plan_ignore_the_cost():
    L = lognormal_lengths(2000)
    for kw in (
        dict(seq_len=256, max_tokens=4096),
        dict(seq_len=512, max_tokens=4096, overflow="split"),
        dict(batch_rows=4),
        dict(batch_rows=2, max_tokens=4096),
        dict(max_tokens=4096, plan=BucketPlan((64, 512))),
    ):
        plain = pack_lengths(L, **kw, seed=2)
        for opts in (dict(attention="dense"), dict(attention="dense", d_model=32, step_cost=0)):
            other = pack_lengths(L, **kw, **opts, seed=2)
            assert len(other) == len(plain) and all(x.same_as(y) for x, y in zip(plain, other))
    T0 = longest_sample_T(L, 10**9)
    assert packing_shapes(L, batch_rows=4) == ((4, T0),)
    assert packing_shapes(L, batch_rows=2, max_tokens=4096, attention="dense") == ((2, T0),)
    assert packing_shapes(L, max_tokens=4096, plan=BucketPlan((64, 512)), attention="dense")[0] == (8, 512)


# --------------------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    "kw, err, match",
    [
        (
            dict(attention="flash"),
            ValueError,
            r"attention should be one of \('varlen', 'dense'\), but got 'flash'",
        ),
        (dict(attention=None), ValueError, "attention should be one of"),
        (dict(causal="yes"), TypeError, "causal should be True or False, but got 'yes'"),
        (dict(d_model=0), ValueError, "d_model should be a positive integer, but got 0"),
        (dict(d_model=64.0), TypeError, "d_model should be an integer"),
        (dict(d_model=True), TypeError, "d_model should be a positive integer"),
        (dict(d_model=64, attention_weight=0.1), ValueError, "pass d_model or attention_weight, not both"),
        (dict(attention_weight=-0.5), ValueError, "attention_weight should be a non-negative finite number"),
        (
            dict(attention_weight=float("nan")),
            ValueError,
            "attention_weight should be a non-negative finite number",
        ),
        (
            dict(attention_weight="0.1"),
            TypeError,
            "attention_weight should be a non-negative number, but got '0.1'",
        ),
        (dict(step_cost=float("inf")), ValueError, "step_cost should be a non-negative finite number"),
        (dict(step_cost=-1), ValueError, "step_cost should be a non-negative finite number, but got -1"),
    ],
)
def test_bad_options_are_named(kw, err, match):
    L = [3, 50, 7]
    with pytest.raises(err, match=match):
        choose_seq_len(L, max_tokens=128, **kw)
    with pytest.raises(err, match=match):
        packing_shapes(L, max_tokens=128, **kw)
    with pytest.raises(err, match=match):  # refused even where the shapes are given
        pack_lengths(L, 64, max_tokens=128, **kw)


def test_choose_needs_a_budget_and_keeps_the_rules_errors():
    with pytest.raises(ValueError, match="choose_seq_len needs a token budget"):
        choose_seq_len([3, 4], max_tokens=None)
    with pytest.raises(ValueError, match="max_tokens should be a positive integer, but got 0"):
        choose_seq_len([3, 4], max_tokens=0)
    with pytest.raises(ValueError, match="sample 1 of length 50 needs a row of 56"):
        choose_seq_len([3, 50, 7], max_tokens=40)
    with pytest.raises(TypeError, match="dtype float64"):
        choose_seq_len([3.5], max_tokens=40)


def test_empty_and_zero_lengths():
    assert choose_seq_len(np.zeros(0, np.int64), max_tokens=64).shapes == ((8, 8),)
    c = choose_seq_len([0, 0, 0], max_tokens=64)
    assert c.shapes == ((8, 8),) and c.chosen.batches == 1 and c.chosen.padded_fraction == 1.0
