"""The packing cost as one value (RowCost) and shapes chosen once: the same epochs as the keyword options."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.planning.packing import pack_into_shapes, pack_lengths, packing_shapes
from dyntile.planning.packing_cost import RowCost, choose_seq_len, cost_model, row_cost

OPTIONS = [
    dict(),
    dict(attention="dense"),
    dict(attention="dense", d_model=32, step_cost=0),
    dict(attention="varlen", causal=False, attention_weight=0.01, step_cost=7.5),
]


def lengths(seed, n=700):
    return np.random.default_rng(seed).lognormal(3.3, 0.9, n).astype(np.int64) + 1


@pytest.mark.parametrize("options", OPTIONS)
def test_cost_value_chooses_what_the_options_choose(options):
    L = lengths(1)
    cost = row_cost(**options, max_tokens=1024)
    a = choose_seq_len(L, max_tokens=1024, **options)
    b = choose_seq_len(L, max_tokens=1024, cost=cost)
    assert a.model == b.model == cost and a.shapes == b.shapes and a.candidates == b.candidates
    assert packing_shapes(L, max_tokens=1024, **options) == packing_shapes(L, max_tokens=1024, cost=cost)
    x = pack_lengths(L, max_tokens=1024, seed=3, epoch=2, num_replicas=2, **options)
    y = pack_lengths(L, max_tokens=1024, seed=3, epoch=2, num_replicas=2, cost=cost)
    assert len(x) == len(y) and all(p.same_as(q) for p, q in zip(x, y))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 300),
    overflow=st.sampled_from(["extend", "split"]),
    replicas=st.integers(1, 3),
)
def test_packing_into_chosen_shapes_equals_choosing_them(seed, n, overflow, replicas):
    """pack_into_shapes(packing_shapes(...)) is the epoch of pack_lengths, which chooses them."""
    L = lengths(seed, n)
    kw = dict(max_tokens=4096, overflow=overflow)
    shapes = packing_shapes(L, **kw)
    chosen = pack_lengths(L, **kw, seed=seed, num_replicas=replicas)
    given_ = pack_into_shapes(L, shapes, overflow=overflow, seed=seed, num_replicas=replicas, pool_size=65536)
    assert len(chosen) == len(given_) and all(p.same_as(q) for p, q in zip(chosen, given_))


def test_cost_and_its_options_are_not_both_taken():
    cost = row_cost("dense", max_tokens=512)
    for call in (
        lambda: choose_seq_len([3, 9], max_tokens=512, cost=cost, d_model=64),
        lambda: packing_shapes([3, 9], max_tokens=512, cost=cost, attention="varlen", causal=False),
        lambda: pack_lengths([3, 9], max_tokens=512, cost=cost, step_cost=1),
    ):
        with pytest.raises(ValueError, match="pass cost or its options, not both, but got cost and"):
            call()
    with pytest.raises(TypeError, match="cost should be a RowCost"):
        packing_shapes([3, 9], max_tokens=512, cost="dense")


def test_given_shapes_are_checked():
    with pytest.raises(ValueError, match="sample 1 of length 40 fits none of shapes="):
        pack_into_shapes([3, 40, 5], [(2, 16)])
    with pytest.raises(ValueError, match="fits none of shapes=.*overflow='split'"):
        pack_into_shapes([3, 40, 5], [(2, 16)], overflow="split")  # 3 rows of 16, 2 in a batch
    with pytest.raises(ValueError, match="shapes should be one or two pairs"):
        pack_into_shapes([3, 9], [(0, 16)])
    assert [b.shape for b in pack_into_shapes([3, 40, 5], [(4, 16)], overflow="split")] == [(4, 16)]


def test_a_row_cost_built_directly_is_validated():
    assert RowCost("dense", True, 0.5, 3) == RowCost("dense", np.True_, 0.5, 3.0)
    with pytest.raises(ValueError, match="attention should be one of"):
        RowCost("flash", True, 0.1, 0)
    with pytest.raises(TypeError, match="causal should be True or False, but got 1"):
        RowCost("varlen", 1, 0.1, 0)
    with pytest.raises(ValueError, match="step_cost should be a non-negative finite number, but got -1"):
        RowCost("varlen", True, 0.1, -1)
    assert cost_model(attention="dense", max_tokens=160).step_cost == 10.0


def test_sampler_keeps_the_cost_it_chose_with():
    torch = pytest.importorskip("torch")  # noqa: F841
    from loaders import PackingBatchSampler

    L = lengths(5)
    cost = row_cost("dense", d_model=32, max_tokens=2048)
    a = PackingBatchSampler(L, max_tokens=2048, attention="dense", d_model=32, seed=1)
    b = PackingBatchSampler(L, max_tokens=2048, cost=cost, seed=1)
    assert (
        a.cost == b.cost == cost
        and a.shapes == b.shapes == choose_seq_len(L, max_tokens=2048, cost=cost).shapes
    )
    assert list(a) == list(b)


def test_the_cost_search_does_not_import_the_packer():
    """packing_cost and packing share their checks through packing_checks, not through each other."""
    code = "import sys, dyntile.planning.packing_cost; print('dyntile.planning.packing' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _packing_sampler(L, **kw):
    from loaders import PackingBatchSampler

    return PackingBatchSampler(L, **kw)


@pytest.mark.parametrize(
    "name, call",
    [
        ("choose_seq_len", choose_seq_len),
        ("packing_shapes", packing_shapes),
        ("pack_lengths", pack_lengths),
        ("PackingBatchSampler", _packing_sampler),
    ],
)
def test_a_misspelt_cost_option_is_refused_by_every_packer(name, call):
    """Every packing call takes the cost options through one check: a misspelt name is
    refused naming the call, the name and the options it takes, never ignored."""
    with pytest.raises(TypeError, match=rf"^{name} got .*\['atention'\]: its cost options are \['attention'"):
        call(lengths(2), max_tokens=1024, atention="dense")
