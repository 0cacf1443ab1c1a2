"""pad_batch judges a batch's kind once and runs that kind's route: every kind (token
rows read natively or gathered by torch.cat, N-D tensors, NumPy arrays, lists of
numbers, mixed batches) pads one ragged batch as NumPy slicing does, and a batch a
reader refuses is named by the sample, whatever kind its first sample is."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt
from dyntile import tensor_reader
from reference import pad_reference

torch = pytest.importorskip("torch")


def ways(rows: list, dtype) -> dict:
    """The batch ``rows`` (NumPy arrays) as each kind of input, with the options that
    send it to that kind's route (``axes=0``: the N-D tensors' reader on 1-D rows, and
    axis 0 padded even where the rows share one length)."""
    tensors = [torch.from_numpy(r.copy()) for r in rows]
    axis0 = {} if rows[0].ndim == 1 else {"axes": 0}
    kinds = {
        "arrays": (rows, axis0),
        "tensors": (tensors, {"axes": 0}),
        # (an empty list keeps no shape of an empty array, and no type)
        "mixed": (
            [r.tolist() if i % 2 and r.size else r for i, r in enumerate(rows)],
            {"dtype": dtype, **axis0},
        ),
    }
    if rows[0].ndim == 1:
        kinds["token rows"] = (tensors, {})
        if any(r.size for r in rows) or dtype == np.int64:  # all empty: int64, as numpy.asarray reads []
            kinds["number lists"] = ([r.tolist() for r in rows], {})
    return kinds


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 19), min_size=1, max_size=9),
    width=st.sampled_from([None, 3]),
    dtype=st.sampled_from([np.int64, np.float64]),
    side=st.sampled_from(["right", "left"]),
    multiple=st.integers(1, 5),
    native=st.booleans(),
)
def test_every_kind_pads_as_numpy_slicing(lengths, width, dtype, side, multiple, native):
    g = np.random.default_rng(len(lengths))
    rows = [g.integers(-9, 9, (n,) if width is None else (n, width)).astype(dtype) for n in lengths]
    longest = -(-max(lengths) // multiple) * multiple
    target = (longest,) if width is None else (longest, width)
    expect = pad_reference(rows, target, -1, side == "left", dtype)
    for kind, (samples, options) in ways(rows, dtype).items():
        with tensor_reader.use_native(native):  # off: token rows are gathered by one torch.cat
            batch, got = dt.pad_batch(samples, multiple=multiple, fill=-1, side=side, **options)
        assert np.asarray(batch).dtype == dtype, kind
        np.testing.assert_array_equal(np.asarray(batch), expect, err_msg=kind)
        sizes = np.asarray(got) if width is None else np.asarray(got)[:, 0]
        assert sizes.tolist() == lengths, kind


@pytest.mark.parametrize(
    "first, bad",
    [
        (np.arange(3), np.ones((2, 2))),
        (torch.arange(3), torch.ones(2, 2)),
        ([1, 2, 3], [[1, 2], [3, 4]]),
    ],
    ids=["arrays", "tensors", "lists"],
)
def test_a_sample_a_reader_refuses_is_named(first, bad):
    """Sample 2 has another rank: each kind's reader refuses the batch, and the error
    names sample 2 and what the batch has, not a route's internals."""
    with pytest.raises(ValueError, match=r"sample 0 has 1 and sample 2 has 2"):
        dt.pad_batch([first, first, bad])


def test_pad_rows_pads_every_kind_of_1d_rows_as_pad_batch_does():
    """pad_rows pads the row kinds in one call and every other kind of 1-D rows by
    pad_batch's route for it: the same batch, never a ``None`` for a second try."""
    rows = [torch.arange(3), torch.arange(5)]
    batch, lengths, longest, total = dt.pad_rows(rows, multiple=4)
    assert batch.tolist() == [[0, 1, 2, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 0, 0, 0]]
    assert (lengths.tolist(), longest, total) == ([3, 5], 5, 8)
    for other in (
        [np.arange(3), np.arange(7)],
        [torch.arange(3), np.arange(2)],
        [[1, np.int64(2)], [3]],
        [torch.arange(3), torch.arange(2, dtype=torch.int32)],
    ):
        want, want_lengths = dt.pad_batch(other, multiple=4)
        batch, lengths, longest, total = dt.pad_rows(other, multiple=4)
        assert np.array_equal(np.asarray(batch), np.asarray(want)), other
        assert lengths.tolist() == np.asarray(want_lengths).tolist()
        assert (longest, total) == (max(map(len, other)), sum(map(len, other)))


def test_pad_rows_raises_what_pad_batch_raises():
    mixed = [torch.arange(3), torch.arange(2, dtype=torch.int32)]
    with pytest.raises(TypeError) as rows_error:
        dt.pad_rows(mixed, promote=False)
    with pytest.raises(TypeError) as batch_error:
        dt.pad_batch(mixed, promote=False)
    assert str(rows_error.value) == str(batch_error.value)
    with pytest.raises(ValueError, match=r"over the largest boundary 16"):
        dt.pad_rows([torch.arange(17)], plan=dt.BucketPlan((8, 16)))
    with pytest.raises(ValueError, match=r"same number of dimensions"):
        dt.pad_rows([np.ones(2), np.ones((2, 2))])
    with pytest.raises(ValueError, match=r"pad_rows pads 1-D rows, but sample 0 has shape \(2, 2\)"):
        dt.pad_rows([np.ones((2, 2)), np.ones((3, 2))])
    with pytest.raises(ValueError, match=r"at least one"):
        dt.pad_rows([])
