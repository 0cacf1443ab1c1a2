"""pad_jagged against pad_batch-free references: rows cut from values by hand, padded by slicing."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt
from dyntile.planning import BucketPlan
from reference import pad_reference

DTYPES = [
    "int8",
    "uint16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "bool",
    "complex64",
    "complex128",
]


def random_values(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(1, 100, shape).astype(dtype)
    v = rng.standard_normal(shape) * 10 + 1
    return (v + 1j * v).astype(dtype) if dtype.kind == "c" else v.astype(dtype)


def reference(values, lengths, T, fill, left):
    """Cut the rows out one by one, then pad them by slicing."""
    values = np.asarray(values)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    rows = [values[starts[i] : starts[i + 1]] for i in range(len(lengths))]
    return pad_reference(rows, (T,) + values.shape[1:], fill, left, values.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rest", [(), (3,), (2, 5)])
@pytest.mark.parametrize("side", ["right", "left"])
def test_matches_reference(dtype, rest, side):
    rng = np.random.default_rng(len(rest) * 100 + DTYPES.index(dtype))
    lengths = [int(n) for n in rng.integers(0, 13, 7)] + [0]
    values = random_values(rng, (sum(lengths),) + rest, dtype)
    fill = 1 if dtype == "bool" else 7
    batch, out_lengths = dt.pad_jagged(values, lengths, multiple=8, fill=fill, side=side)
    T = -(-max(lengths) // 8) * 8
    assert batch.shape == (len(lengths), T) + rest and batch.dtype == values.dtype
    np.testing.assert_array_equal(batch, reference(values, lengths, T, fill, side == "left"))
    assert out_lengths.dtype == np.int64 and out_lengths.tolist() == lengths


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 20), min_size=0, max_size=12),
    rest=st.sampled_from([(), (1,), (3,), (2, 2)]),
    extra=st.integers(0, 5),
    left=st.booleans(),
    step=st.sampled_from([1, 2]),
)
def test_property_rows_round_trip(lengths, rest, extra, left, step):
    """Every row comes back where the reference puts it, whatever the strides of values."""
    rng = np.random.default_rng(len(lengths))
    base = random_values(rng, (sum(lengths) * step,) + rest, "int32")
    values = base[::step]  # non-contiguous when step == 2
    T = max(lengths, default=0) + extra
    batch, _ = dt.pad_jagged(values, lengths, shape=(T,), fill=-1, side="right" if not left else "left")
    np.testing.assert_array_equal(batch, reference(values, lengths, T, -1, left))


def test_torch_in_torch_out():
    values = torch.arange(1, 10)
    batch, lengths = dt.pad_jagged(values, torch.tensor([4, 0, 5]), multiple=4, fill=-100)
    assert isinstance(batch, torch.Tensor) and isinstance(lengths, torch.Tensor)
    expect = torch.nn.utils.rnn.pad_sequence(
        list(values.split([4, 0, 5])), batch_first=True, padding_value=-100
    )
    assert torch.equal(batch[:, :5], expect) and (batch[:, 5:] == -100).all() and batch.shape == (3, 8)
    assert lengths.tolist() == [4, 0, 5]


def test_torch_only_dtype_and_grad():
    values = torch.randn(7, 2, dtype=torch.bfloat16, requires_grad=True)
    batch, _ = dt.pad_jagged(values, [3, 4], shape=(5, 2), fill=0.5)
    assert batch.dtype == torch.bfloat16 and batch.shape == (2, 5, 2)
    assert torch.equal(batch[0, :3], values[:3].detach()) and torch.equal(batch[1, :4], values[3:].detach())
    assert (batch[0, 3:] == 0.5).all()


def test_plan_and_empty_cases():
    batch, _ = dt.pad_jagged(np.arange(17), [17], plan=BucketPlan((16, 64)))
    assert batch.shape == (1, 64)
    batch, lengths = dt.pad_jagged(np.zeros((0, 3), np.float32), [])
    assert batch.shape == (0, 0, 3) and lengths.shape == (0,)
    batch, _ = dt.pad_jagged(np.zeros(0, np.int16), [0, 0], fill=3)
    assert batch.shape == (2, 0)
    batch, _ = dt.pad_jagged(np.zeros(0, np.int16), [0, 0], shape=(2,), fill=3)
    np.testing.assert_array_equal(batch, np.full((2, 2), 3))


def test_non_native_byte_order():
    values = np.arange(5, dtype=">i4")
    batch, _ = dt.pad_jagged(values, [2, 3], multiple=4)
    np.testing.assert_array_equal(batch, [[0, 1, 0, 0], [2, 3, 4, 0]])


@pytest.mark.parametrize(
    "values, lengths, kw, exc, match",
    [
        (np.arange(5), [2, 2], {}, ValueError, "lengths sum to 4, but values has 5 rows"),
        (np.arange(5), [6, -1], {}, ValueError, r"lengths\[1\] is negative"),
        (np.arange(5), [2.0, 3.0], {}, TypeError, "1-D sequence of integers"),
        (np.arange(5), [[2, 3]], {}, TypeError, "1-D sequence of integers"),
        (np.arange(5), [True, False], {}, TypeError, "1-D sequence of integers"),
        (np.arange(5), [2, 3], {"shape": (2,)}, ValueError, "never cuts"),
        (np.zeros((5, 2)), [2, 3], {"shape": (4, 3)}, ValueError, r"shape should be \(T,\) or \(T, 2\)"),
        (np.array(3), [1], {}, ValueError, "0-d"),
        (np.arange(5), [2, 3], {"side": "top"}, ValueError, "side should be"),
        (np.arange(5), [2, 3], {"fill": 0.5}, ValueError, "fill"),
        (np.arange(5, dtype=np.uint8), [2, 3], {"fill": -1}, ValueError, "uint8"),
        (np.arange(5), [2, 3], {"multiple": 0}, ValueError, "multiple should be a positive integer"),
        (np.arange(5), [2, 3], {"plan": BucketPlan(((8,), (8,)))}, ValueError, "pads one axis"),
        (np.arange(70), [70], {"plan": BucketPlan((16, 64))}, ValueError, "64"),
        (["a", "b"], [1, 1], {}, TypeError, "not a numeric array"),
    ],
)
def test_bad_input(values, lengths, kw, exc, match):
    with pytest.raises(exc, match=match):
        dt.pad_jagged(values, lengths, **kw)


# --------------------------------------------------------------------------- concat_rows


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=10),
    kind=st.sampled_from(["int-lists", "float-lists", "numpy", "torch", "torch-2d"]),
)
def test_concat_rows_matches_concatenate_and_round_trips(lengths, kind):
    rng = np.random.default_rng(sum(lengths))
    arrays = [rng.integers(-(2**40), 2**40, (n, 3) if kind == "torch-2d" else n) for n in lengths]
    if kind == "float-lists":
        samples = [(a / 7).tolist() for a in arrays]
    elif kind == "int-lists":
        samples = [a.tolist() for a in arrays]
    elif kind == "numpy":
        samples = [a[::-1] for a in arrays]  # negative strides
    else:
        samples = [torch.from_numpy(a) for a in arrays]
    values, out_lengths = dt.concat_rows(samples)
    expect = np.concatenate(
        [np.asarray(s, dtype=np.float64 if kind == "float-lists" else np.int64) for s in samples]
    )
    assert isinstance(values, torch.Tensor) == kind.startswith("torch")
    np.testing.assert_array_equal(np.asarray(values), expect)
    assert np.asarray(out_lengths).tolist() == lengths
    batch, _ = dt.pad_jagged(values, out_lengths, multiple=4, fill=-1)  # the round trip pad_batch makes
    np.testing.assert_array_equal(
        np.asarray(batch), np.asarray(dt.pad_batch(samples, multiple=4, fill=-1, axes=0)[0])
    )


def test_concat_rows_types_follow_pad_batch():
    assert dt.concat_rows([[1, 2], [True]])[0].dtype == np.int64  # bools join ints
    assert dt.concat_rows([[1], [], [2.5]])[0].dtype == np.float64
    assert dt.concat_rows([[], []])[0].dtype == np.int64  # empty lists: no type
    assert dt.concat_rows([np.arange(2, dtype=np.int16), [3]])[0].dtype == np.int16
    values, lengths = dt.concat_rows([torch.arange(2, dtype=torch.int32), torch.arange(3)])
    assert values.dtype == torch.int64 and lengths.tolist() == [2, 3]  # tensors promote like pad_batch
    values, _ = dt.concat_rows([torch.zeros(2, dtype=torch.bfloat16), torch.ones(1, dtype=torch.bfloat16)])
    assert values.dtype == torch.bfloat16 and values.tolist() == [0, 0, 1]


@pytest.mark.parametrize(
    "samples, exc, match",
    [
        ([], ValueError, "at least one sample"),
        (
            [np.zeros((2, 3)), np.zeros((1, 4))],
            ValueError,
            r"sample 1 has shape \(1, 4\).*only the first axis",
        ),
        ([[1], 3], ValueError, "sample 1 is a scalar"),
        ([[1], ["a"]], TypeError, "not a numeric array"),
        ([np.zeros(2), np.zeros((2, 2))], ValueError, "same number of dimensions"),
    ],
)
def test_concat_rows_bad_input(samples, exc, match):
    with pytest.raises(exc, match=match):
        dt.concat_rows(samples)


class _DeviceArray:
    """Stands in for a CUDA array (Numba, CuPy): only the interface is looked at."""

    __cuda_array_interface__ = {"shape": (3,), "typestr": "<i8", "data": (0, False), "version": 3}


def test_device_arrays_are_refused_not_copied():
    with pytest.raises(TypeError, match="pad_jagged runs on the host"):
        dt.pad_jagged(_DeviceArray(), [3])
    with pytest.raises(TypeError, match="concat_rows runs on the host"):
        dt.concat_rows([_DeviceArray(), _DeviceArray()])
    with pytest.raises(TypeError, match="mix CUDA device and host arrays"):
        dt.concat_rows([np.arange(3), _DeviceArray()])


def test_shape_and_plan_together_are_refused():
    """pad_jagged ignored plan= beside shape= (pad_batch refuses the pair)."""
    with pytest.raises(ValueError, match="either shape= or plan=, not both"):
        dt.pad_jagged(np.arange(3), [1, 2], shape=(4,), plan=BucketPlan((8,)))
