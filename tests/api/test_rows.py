"""pad_rows (the collate's one-call route) against a reference padded by slicing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt
from dyntile.planning import BucketPlan
from reference import pad_reference

torch = pytest.importorskip("torch")


def check(rows, got, T, fill, left, dtype):
    batch, lengths, longest, total = got
    sizes = [len(r) for r in rows]
    expect = pad_reference([np.asarray(r, dtype) for r in rows], (T,), fill, left, dtype)
    np.testing.assert_array_equal(np.asarray(batch), expect)
    assert lengths.dtype == np.int64 and lengths.tolist() == sizes
    assert longest == max(sizes) and total == sum(sizes)


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=20),
    multiple=st.sampled_from([1, 8, 16]),
    left=st.booleans(),
    kind=st.sampled_from(["tensor", "list"]),
    seed=st.integers(0, 2**16),
)
def test_matches_reference(sizes, multiple, left, kind, seed):
    rng = np.random.default_rng(seed)
    rows = [rng.integers(-1000, 1000, n) for n in sizes]
    samples = [torch.from_numpy(r) for r in rows] if kind == "tensor" else [r.tolist() for r in rows]
    got = dt.pad_rows(samples, multiple=multiple, fill=-7, side="left" if left else "right")
    T = -(-max(sizes) // multiple) * multiple
    assert isinstance(got[0], torch.Tensor if kind == "tensor" else np.ndarray)
    check(rows, got, T, -7, left, np.int64)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.bfloat16, torch.bool, torch.uint8])
def test_tensor_dtypes_are_kept(dtype):
    rows = [torch.arange(n).to(dtype) for n in (3, 0, 5)]
    batch, lengths, longest, total = dt.pad_rows(rows, multiple=4)
    assert batch.dtype == dtype and batch.shape == (3, 8)
    for b, r in zip(batch, rows):
        assert torch.equal(b[: len(r)], r) and not b[len(r) :].any()
    assert (lengths.tolist(), longest, total) == ([3, 0, 5], 5, 8)


def test_plan_sizes_and_lists_of_floats_and_bools():
    plan = BucketPlan((8, 16))
    batch, lengths, longest, total = dt.pad_rows([[1.5, 2.0], [3.0, 4, 5]], plan=plan, fill=-1)
    assert batch.dtype == np.float64 and batch.shape == (2, 8)
    assert batch.tolist() == [[1.5, 2.0] + [-1] * 6, [3.0, 4.0, 5.0] + [-1] * 5] and (longest, total) == (
        3,
        5,
    )
    batch, *_ = dt.pad_rows([[True], [False, True]], multiple=2)
    assert batch.dtype == np.bool_ and batch.tolist() == [[True, False], [False, True]]


@pytest.mark.parametrize(
    "samples",
    [
        [np.arange(3), np.arange(2)],  # NumPy arrays: pad_batch's route
        [torch.arange(3), torch.arange(2, dtype=torch.int32)],  # mixed dtypes, promoted
        [[1, 2], ["a"]],  # not numbers
        [],
        ([1, 2], [3]),  # a tuple of samples
    ],
)
def test_other_rows_are_padded_or_refused_as_pad_batch_does(samples):
    """pad_rows takes every batch of 1-D rows pad_batch takes, and refuses the others with
    pad_batch's own error: it never answers None for a second try."""
    try:
        want, want_lengths = dt.pad_batch(samples)
    except (TypeError, ValueError) as e:
        with pytest.raises(type(e)) as got:
            dt.pad_rows(samples)
        assert str(got.value) == str(e)
        return
    batch, lengths, longest, total = dt.pad_rows(samples)
    assert np.array_equal(np.asarray(batch), np.asarray(want))
    assert lengths.tolist() == np.asarray(want_lengths).tolist()
    assert (longest, total) == (max(map(len, samples)), sum(map(len, samples)))


def test_refuses_samples_of_another_rank_naming_one():
    with pytest.raises(ValueError, match=r"pad_rows pads 1-D rows, but sample 0 has shape \(2, 2\)"):
        dt.pad_rows([torch.ones(2, 2), torch.ones(3, 2)])


def test_refuses_rows_over_the_plan_as_pad_batch_does():
    rows = [torch.arange(20), torch.arange(3)]
    with pytest.raises(ValueError, match="16") as got:
        dt.pad_rows(rows, plan=BucketPlan((8, 16)))
    with pytest.raises(ValueError) as want:
        dt.pad_batch(rows, plan=BucketPlan((8, 16)))
    assert str(got.value) == str(want.value)


def test_bad_side_is_an_error():
    with pytest.raises(ValueError, match="side"):
        dt.pad_rows([[1]], side="up")


@pytest.mark.parametrize("kind", ["lists", "tensors"])
def test_plan_row_length_equals_round_up(kind):
    """The row routes' cached row length for a one-axis plan is plan.round_up's, errors included."""
    from dyntile.planning import BucketPlan

    plan = BucketPlan((8, 24, 48, 1000))
    row = (lambda n: [7] * n) if kind == "lists" else (lambda n: torch.full((n,), 7))
    for n in list(range(0, 60)) + [999, 1000]:
        batch, _, longest, _ = dt.pad_rows([row(n), row(0)], plan=plan)
        assert longest == n and batch.shape[1] == plan.round_up(n)[0]
    for n in (1001, 3000):
        with pytest.raises(ValueError, match="over the largest boundary 1000"):
            dt.pad_rows([row(n)], plan=plan)
        with pytest.raises(ValueError, match="over the largest boundary 1000"):
            dt.pad_batch([row(n)], plan=plan)
