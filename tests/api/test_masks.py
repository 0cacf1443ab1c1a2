"""padding_mask against masks derived from pad_batch itself."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), ndim=st.integers(1, 3), side=st.sampled_from(["right", "left"]))
def test_mask_marks_exactly_the_data(seed, ndim, side):
    rng = np.random.default_rng(seed)
    arrays = [np.ones(tuple(rng.integers(0, 6, ndim)), np.int8) for _ in range(rng.integers(1, 6))]
    batch, lengths = dt.pad_batch(arrays, axes=list(range(ndim)), multiple=3, side=side, fill=0)
    mask = dt.padding_mask(lengths, batch.shape[1:], side=side)
    np.testing.assert_array_equal(mask, batch.astype(bool))


def test_mask_errors_and_torch():
    torch = pytest.importorskip("torch")
    m = dt.padding_mask(torch.tensor([0, 2]), 3)
    assert isinstance(m, torch.Tensor) and m.tolist() == [[False] * 3, [True, True, False]]
    with pytest.raises(ValueError, match=r"lengths\[1\] has size 5 along axis 0, outside 0..3"):
        dt.padding_mask(np.array([1, 5]), 3)
    with pytest.raises(ValueError, match="2 sizes per sample but shape"):
        dt.padding_mask(np.ones((2, 2), np.int64), 3)
    with pytest.raises(ValueError, match="side should be"):
        dt.padding_mask(np.array([1]), 3, side="up")


def test_mask_lengths_are_integers_and_may_be_empty():
    assert dt.padding_mask([], 4).shape == (0, 4)
    assert dt.padding_mask(np.array([], np.int32), 4).shape == (0, 4)
    assert dt.padding_mask(np.zeros((0, 2), np.int64), (2, 3)).shape == (0, 2, 3)
    assert dt.padding_mask([], (2, 3)).shape == (0, 2, 3)
    assert dt.padding_mask(np.array([1, 3], np.int32), 4).sum() == 4
    for bad in (np.array([1.9, 2.5]), np.array([True])):
        with pytest.raises(TypeError, match="lengths should be integers"):  # 1.9 is not cut to 1
            dt.padding_mask(bad, 4)
    with pytest.raises(ValueError, match="below 2\\*\\*63"):
        dt.padding_mask(np.array([2**63], np.uint64), 4)
    with pytest.raises(ValueError, match=r"shape \(B,\) or \(B, d\)"):
        dt.padding_mask(np.ones((2, 1, 1), np.int64), 4)
