"""pad_batch / pad_to against the NumPy reference, and every documented error."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt
from dyntile import padding
from reference import pad_reference

KERNEL_DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def ragged_views(rng, n, ndim, dtype, max_len=9):
    """Random samples, some non-contiguous (strided, reversed) views."""
    out = []
    for _ in range(n):
        shape = tuple(int(s) for s in rng.integers(0, max_len, ndim))
        kind = rng.integers(0, 3)
        if kind == 0:
            a = random_array(rng, shape, dtype)
        elif kind == 1:  # every other element along each axis
            a = random_array(rng, tuple(2 * s for s in shape), dtype)[
                tuple(slice(None, None, 2) for _ in shape)
            ]
        else:  # negative strides
            a = random_array(rng, shape, dtype)[tuple(slice(None, None, -1) for _ in shape)]
        out.append(a)
    return out


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 7),
    ndim=st.integers(1, 3),
    dtype=st.sampled_from(KERNEL_DTYPES),
    side=st.sampled_from(["right", "left"]),
    multiple=st.sampled_from([1, 3, 8]),
)
def test_pad_batch_matches_reference(seed, n, ndim, dtype, side, multiple):
    rng = np.random.default_rng(seed)
    arrays = ragged_views(rng, n, ndim, dtype)
    fill = True if dtype == "bool" else 7
    batch, lengths = dt.pad_batch(arrays, multiple=multiple, axes=list(range(ndim)), fill=fill, side=side)
    target = tuple(-(-max(a.shape[k] for a in arrays) // multiple) * multiple for k in range(ndim))
    expected = pad_reference(arrays, target, fill, side == "left", dtype)
    assert batch.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(batch, expected)
    shapes = np.array([a.shape for a in arrays])
    np.testing.assert_array_equal(lengths, shapes[:, 0] if ndim == 1 else shapes)
    assert lengths.dtype == np.int64


def test_images_hwc_pad_only_ragged_axes():
    rng = np.random.default_rng(1)
    imgs = [random_array(rng, (h, w, 3), "uint8") for h, w in [(5, 7), (9, 2), (1, 1)]]
    batch, lengths = dt.pad_batch(imgs, multiple=4, fill=255)
    assert batch.shape == (3, 12, 8, 3)  # channels untouched
    np.testing.assert_array_equal(batch, pad_reference(imgs, (12, 8, 3), 255, False, np.uint8))
    np.testing.assert_array_equal(lengths, [[5, 7, 3], [9, 2, 3], [1, 1, 3]])


def test_threaded_kernels_stay_correct(monkeypatch):
    from dyntile import threads

    monkeypatch.setattr(threads, "PARALLEL_COPY_BYTES", 1)  # every copy takes the OpenMP path
    monkeypatch.setattr(threads, "max_threads", lambda: 2)
    assert threads.copy_threads(10) == 2
    rng = np.random.default_rng(2)
    arrays = ragged_views(rng, 37, 2, "float32", max_len=40)
    batch, _ = dt.pad_batch(arrays, axes=[0, 1], fill=-1.0, side="left")
    np.testing.assert_array_equal(batch, pad_reference(arrays, batch.shape[1:], -1.0, True, np.float32))
    x = random_array(rng, (3, 45, 29), "int16")[:, ::-1]
    t = dt.tile(x, (8, 16), fill=5)
    np.testing.assert_array_equal(dt.untile(t, x.shape), x)


def test_zero_length_and_all_empty():
    batch, lengths = dt.pad_batch([np.zeros(0, np.int32), np.arange(3, dtype=np.int32)], fill=-5)
    np.testing.assert_array_equal(batch, [[-5] * 8, [0, 1, 2] + [-5] * 5])
    batch, lengths = dt.pad_batch([np.zeros(0), np.zeros(0)])
    assert batch.shape == (2, 0) and list(lengths) == [0, 0]


def test_lists_and_scalars_types():
    batch, lengths = dt.pad_batch([[1, 2, 3], [4]], multiple=1)
    assert batch.dtype == np.int64
    np.testing.assert_array_equal(batch, [[1, 2, 3], [4, 0, 0]])
    # lists are weakly typed: they take the arrays' dtype
    batch, _ = dt.pad_batch([np.array([1, 2], np.int16), [3, 4, 5]], multiple=1)
    assert batch.dtype == np.int16


def test_promotion_and_unsafe_mixes():
    batch, _ = dt.pad_batch([np.ones(2, np.int16), np.ones(3, np.float32)])
    assert batch.dtype == np.float32
    with pytest.raises(TypeError, match=r"sample 0 \(int64\).*rounded"):
        dt.pad_batch([np.ones(2, np.int64), np.ones(3, np.float64)])
    with pytest.raises(TypeError, match="sample 1.*cannot store exactly"):
        dt.pad_batch([np.ones(2, np.int16), [1.5, 2]])
    batch, _ = dt.pad_batch([np.ones(2, np.int64), np.ones(3, np.float64)], dtype=np.float64)
    assert batch.dtype == np.float64


def test_int_lists_never_round_in_a_float_batch():
    """Lists are typed by their own values: an int list beside a float list makes a
    float64 batch only when float64 holds its ints exactly (else the error names it)."""
    big = 2**53 + 1
    with pytest.raises(
        TypeError, match=r"sample 0 \(a list\) .*float64 cannot store exactly, e.g. .*9007199254740993"
    ):
        dt.pad_batch([[big, 1], [0.5]])
    with pytest.raises(
        TypeError, match=r"sample 1 \(a list\) .*int64 cannot store exactly"
    ):  # arrays set the dtype
        dt.pad_batch([np.array([big, 1]), [0.5]])
    batch, _ = dt.pad_batch([[2**53, -(2**62)], [0.5]], multiple=1)  # powers of two are exact
    assert batch.tolist() == [[2.0**53, -(2.0**62)], [0.5, 0.0]]
    batch, _ = dt.pad_batch([[big, 0.5]], multiple=1)  # within one list: numpy.asarray's float64
    assert batch.dtype == np.float64
    batch, _ = dt.pad_batch([np.ones(2, np.float32), [float("nan"), 1]], multiple=1)  # NaN is stored exactly
    assert np.isnan(batch[1, 0]) and batch.dtype == np.float32


@pytest.mark.parametrize(
    "sample",
    [[2**63 + 5, 1], [[1, 2**64 - 1], [0, 3]], [np.uint64(2**63 + 5), -1], [True, 2**63, 2**53 + 1]],
    ids=["int past int64", "nested", "uint64 scalar and a negative", "bool beside"],
)
def test_an_int_list_numpy_would_round_is_refused(sample):
    """NumPy reads a list of integers with one past int64 as float64, which rounds it
    (``np.asarray([2**63 + 5, 1])``): every route refuses it, naming the integer
    (``2**63`` itself is a power of two, stored exactly, and padded as NumPy reads it)."""
    assert np.asarray(sample).dtype == np.float64  # the rounding this guards against
    with pytest.raises(
        TypeError, match=r"sample 0 is a list of integers with one past int64, .* cannot store .*\d{16}"
    ):
        dt.pad_batch([sample, sample])
    with pytest.raises(TypeError, match="past int64"):
        dt.concat_rows([sample, sample])
    big = np.asarray([2**63 + 5, 1], dtype=np.uint64)  # the array the message asks for pads exactly
    assert dt.pad_batch([big, big[:1]], multiple=1)[0].tolist() == [[2**63 + 5, 1], [2**63 + 5, 0]]


def test_big_ints_beside_a_float_follow_numpy():
    """With a float in the list the list is a float64 list, as NumPy reads it."""
    batch, _ = dt.pad_batch([[0.5, 2**63 + 5]], multiple=1)
    assert batch.dtype == np.float64 and batch[0, 1] == float(2**63 + 5)


def test_shapes_must_be_integers():
    with pytest.raises(TypeError, match=r"shape\[0\] should be an integer, but got 3.7"):
        dt.pad_to(np.ones(2), (3.7,))
    with pytest.raises(TypeError, match=r"shape\[0\] should be an integer"):
        dt.pad_batch([np.ones(2)], shape=(3.7,))
    with pytest.raises(ValueError, match="sizes >= 0"):
        dt.padding_mask(np.array([1]), (-1,))
    with pytest.raises(TypeError, match="out should be an array"):
        dt.pad_to(np.ones(2), (3,), out=[0, 0, 0])
    assert dt.pad_to(np.ones(2), np.int64(3)).tolist() == [1.0, 1.0, 0.0]
    with pytest.raises(TypeError, match=r"shape\[0\] should be an integer"):
        dt.pad_jagged(np.ones(3), [3], shape=(4.0,))
    assert dt.pad_batch([np.arange(3)], shape=np.array(8))[0].shape == (1, 8)  # 0-d arrays are ints
    assert dt.padding_mask(np.array([3, 5]), np.array(8)).shape == (2, 8)


def test_promote_false_rejects_mixed_dtypes():
    with pytest.raises(TypeError, match="sample 1 has dtype int64, but sample 0 has int32; promote=False"):
        dt.pad_batch([np.ones(2, np.int32), np.ones(3, np.int64)], promote=False)
    batch, _ = dt.pad_batch([np.ones(2, np.int32), [1, 2, 3]], promote=False)
    assert batch.dtype == np.int32


def test_other_dtypes_take_numpy_fallback():
    arrays = [np.arange(3) + 1j, np.arange(5) * 1j]
    batch, _ = dt.pad_batch(arrays, fill=2 + 1j, side="left", multiple=1)
    np.testing.assert_array_equal(batch, pad_reference(arrays, (5,), 2 + 1j, True, np.complex128))
    stamps = [np.array([1, 2], "datetime64[s]"), np.array([3], "datetime64[s]")]
    batch, _ = dt.pad_batch(stamps, multiple=1, fill=np.datetime64(0, "s"))
    assert batch.dtype == np.dtype("datetime64[s]") and batch[1, 1] == np.datetime64(0, "s")


def test_byteswapped_input():
    a = np.arange(5, dtype=">i4")
    batch, _ = dt.pad_batch([a, np.arange(2, dtype="<i4")], multiple=1)
    np.testing.assert_array_equal(batch, [[0, 1, 2, 3, 4], [0, 1, 0, 0, 0]])


def test_plan_and_shape_targets():
    class Plan:  # the BucketPlan protocol pad_batch relies on
        ndim = 1

        def round_up(self, sizes):
            (s,) = sizes
            for b in (16, 64):
                if s <= b:
                    return (b,)
            raise ValueError(f"size {s} is over the largest boundary 64")

    batch, _ = dt.pad_batch([np.ones(3), np.ones(17)], plan=Plan())
    assert batch.shape == (2, 64)
    with pytest.raises(ValueError, match="over the largest boundary"):
        dt.pad_batch([np.ones(65)], plan=Plan())
    batch, _ = dt.pad_batch([np.ones(3), np.ones(5)], shape=(10,))
    assert batch.shape == (2, 10)
    torch = pytest.importorskip("torch")  # the one-call row routes leave a protocol plan to round_up
    batch, _ = dt.pad_batch([torch.ones(3), torch.ones(17)], plan=Plan())
    assert batch.shape == (2, 64)
    assert dt.pad_rows([[1, 2], [3]], plan=Plan())[0].shape == (2, 16)


def test_a_plan_that_is_no_plan_is_named():
    """plan=(8, 16) (boundaries, not a BucketPlan): a TypeError saying what to pass,
    on every padding call, as DynTileCollate says it (not an AttributeError)."""
    torch = pytest.importorskip("torch")
    calls = [
        lambda: dt.pad_batch([np.ones(3)], plan=(8, 16)),
        lambda: dt.pad_batch([torch.ones(3)], plan=(8, 16)),
        lambda: dt.pad_batch([[1, 2]], plan=(8, 16)),
        lambda: dt.pad_jagged(np.ones(3), [3], plan=(8, 16)),
        lambda: dt.pad_rows([[1, 2]], plan=(8, 16)),
        lambda: dt.pad_rows([torch.ones(3)], plan=(8, 16)),
        lambda: dt.pad_rows([[1]], plan=[8, 16]),
    ]
    for call in calls:
        with pytest.raises(
            TypeError,
            match=r"plan should be a dyntile BucketPlan .*but got (tuple|list) .*"
            r"pass plan=BucketPlan\(\(8, 16\)\)",
        ):
            call()
    with pytest.raises(TypeError, match="plan should be a dyntile BucketPlan .*but got str 'buckets'$"):
        dt.pad_batch([np.ones(3)], plan="buckets")


def test_out_argument():
    arrays = [np.arange(3.0), np.arange(5.0)]
    out = np.full((2, 8), np.nan)
    res, _ = dt.pad_batch(arrays, out=out)
    assert res is out
    np.testing.assert_array_equal(out, pad_reference(arrays, (8,), 0.0, False, np.float64))
    big = np.zeros((2, 16))
    view = big[:, ::2]  # non-contiguous out is filled correctly too
    dt.pad_batch(arrays, out=view, fill=1)
    np.testing.assert_array_equal(view, pad_reference(arrays, (8,), 1.0, False, np.float64))
    with pytest.raises(ValueError, match=r"out has shape \(2, 7\), but this batch has shape \(2, 8\)"):
        dt.pad_batch(arrays, out=np.empty((2, 7)))
    with pytest.raises(TypeError, match="out has dtype float32"):
        dt.pad_batch(arrays, out=np.empty((2, 8), np.float32))
    with pytest.raises(TypeError, match="out should be a NumPy array"):
        dt.pad_batch(arrays, out=[[0] * 8] * 2)


@pytest.mark.parametrize(
    "arrays, kwargs, exc, pattern",
    [
        ([], {}, ValueError, "empty sequence"),
        ([np.ones(3), np.ones((2, 2))], {}, ValueError, "sample 0 has 1 and sample 1 has 2"),
        ([np.ones(3), np.float64(2.0)], {}, ValueError, "sample 1 is a scalar"),
        ([np.ones(3, np.int32)], {"fill": float("nan")}, ValueError, "integral fill"),
        ([np.ones(3, np.uint8)], {"fill": 300}, ValueError, r"out of range for uint8 \(accepted: 0 to 255\)"),
        ([np.ones(3, np.float16)], {"fill": 1e6}, ValueError, "overflows float16"),
        ([np.ones(3)], {"fill": "x"}, TypeError, "fill should be a number"),
        (
            [np.ones(6)],
            {"shape": (4,)},
            ValueError,
            "sample 0 has shape \\(6,\\), larger than shape=\\(4,\\)",
        ),
        (
            [np.ones((2, 3)), np.ones((2, 4))],
            {"axes": [0]},
            ValueError,
            "not padded.*sample 1 has \\(2, 4\\)",
        ),
        ([np.ones(3)], {"side": "top"}, ValueError, "side should be 'right' or 'left'"),
        ([np.ones(3)], {"multiple": 0}, ValueError, "multiple should be a positive integer"),
        ([np.ones(3)], {"axes": [1]}, ValueError, "axis 1 is out of bounds"),
        ([[1, [2]], [3]], {}, TypeError, "sample 0 could not be read|sample 0 is not a numeric"),
        ("abc", {}, TypeError, "sequence of arrays"),
    ],
)
def test_bad_input_errors(arrays, kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        dt.pad_batch(arrays, **kwargs)


def test_pad_to():
    x = np.arange(6).reshape(2, 3)[:, ::-1]
    y = dt.pad_to(x, (3, 5), fill=-1, side="left")
    np.testing.assert_array_equal(y, pad_reference([x], (3, 5), -1, True, x.dtype)[0])
    out = np.empty((3, 5), x.dtype)
    assert dt.pad_to(x, (3, 5), out=out) is out
    with pytest.raises(ValueError, match=r"axis 1 would be cut \(3 > 2\)"):
        dt.pad_to(x, (3, 2))
    with pytest.raises(ValueError, match="ranks differ"):
        dt.pad_to(x, (3,))


def test_compiled_kernel_is_used():
    from dyntile.cpu import pad, tile

    for mod in (pad, tile):
        assert mod.__file__.endswith((".so", ".pyd")), f"{mod.__name__} is not compiled: {mod.__file__}"
    assert padding._pad is pad


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_threaded_copy_in_forked_child_does_not_hang(monkeypatch):
    """A DataLoader worker forked after a threaded copy must still finish its copies
    (GNU OpenMP's pool does not survive fork: dyntile runs one thread there)."""
    from dyntile import threads
    from forking import check_in_forked_child

    monkeypatch.setattr(threads, "PARALLEL_COPY_BYTES", 1)
    arrays = [np.arange(n, dtype=np.float32) for n in range(1, 200)]
    expected, _ = dt.pad_batch(arrays)  # threaded in the parent
    check_in_forked_child(
        lambda: np.array_equal(dt.pad_batch(arrays)[0], expected) and threads.max_threads() == 1, "pad_batch"
    )


_NUMBERS = {
    "bool": st.booleans(),
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=True, allow_infinity=True),
}


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(_NUMBERS)), min_size=1, max_size=3, unique=True),
    data=st.data(),
    side=st.sampled_from(["right", "left"]),
    multiple=st.integers(1, 5),
)
def test_number_lists_match_numpy_asarray(kinds, data, side, multiple):
    """Lists of Python numbers are read directly; the result equals padding each
    ``numpy.asarray(list)`` (bool < int64 < float64; empty lists carry no type),
    except that a list of ints float64 would round is refused in a float64 batch."""
    element = st.one_of(*[_NUMBERS[k] for k in kinds])
    lists = data.draw(st.lists(st.lists(element, max_size=9), min_size=1, max_size=6))
    typed = [np.asarray(x) for x in lists if x]
    want = np.result_type(*[a.dtype for a in typed]) if typed else np.dtype(np.int64)
    with np.errstate(invalid="ignore"):  # 2**63 - 1 rounds up to 2**63, outside int64
        rounds = [a.dtype.kind == "i" and (a.astype(np.float64).astype(np.int64) != a).any() for a in typed]
    if want.kind == "f" and any(rounds):
        with pytest.raises(TypeError, match="float64 cannot store exactly"):
            dt.pad_batch(lists, multiple=multiple, side=side, fill=1)
        return
    batch, lengths = dt.pad_batch(lists, multiple=multiple, side=side, fill=1)
    assert batch.dtype == want
    T = -(-max(map(len, lists)) // multiple) * multiple
    ref = pad_reference([np.asarray(x, want) for x in lists], (T,), 1, side == "left", want)
    np.testing.assert_array_equal(batch, ref)
    np.testing.assert_array_equal(lengths, [len(x) for x in lists])


_DIGIT_EDGES = [
    0,
    1,
    -1,
    7,
    2**30 - 1,
    2**30,
    -(2**30 - 1),
    -(2**30),
    -(2**30) - 1,
    2**31,
    2**60 - 1,
    2**60,
    -(2**60 - 1),
    -(2**60),
    2**62 + 5,
    2**63 - 1,
    -(2**63),
    -(2**63) + 1,
]


def test_int_lists_read_every_digit_count():
    """The inline int reader (1- and 2-digit ints; larger ones through the C API) on
    the edges of CPython's 30-bit digits, in the one-pass route (ints only), the
    two-pass route (a bool joins: ``scan`` + ``pad_into``) and ``concat_ints``."""
    from dyntile.cpu import number_lists

    rows = [_DIGIT_EDGES, _DIGIT_EDGES[::-1][:5], [], [-5]]
    ref = pad_reference([np.array(r, np.int64) for r in rows], (24,), 3, False, np.int64)
    batch, lengths = dt.pad_batch(rows, multiple=8, fill=3)
    np.testing.assert_array_equal(batch, ref)
    with_bool = [r + [True] for r in rows]
    batch, _ = dt.pad_batch(with_bool, multiple=8, fill=3)
    assert batch.dtype == np.int64
    np.testing.assert_array_equal(
        batch, pad_reference([np.array(r, np.int64) for r in with_bool], (24,), 3, False, np.int64)
    )
    values, lens = number_lists.concat_ints(rows)
    np.testing.assert_array_equal(values, np.concatenate([np.array(r, np.int64) for r in rows]))
    # one past int64 at either end: never wrapped, the one-pass reader hands over
    assert number_lists.concat_ints([[1, 2**63]]) is None
    assert number_lists.concat_ints([[-(2**63) - 1]]) is None
    # an int subclass (here a bool, in the one-pass reader) is not an exact int
    assert number_lists.concat_ints([[1, True]]) is None


def test_number_lists_hand_over_to_the_general_path():
    # NumPy scalars and int subclasses are not read directly, but still padded
    batch, _ = dt.pad_batch([[np.int32(3), 4], [True]], multiple=1)
    np.testing.assert_array_equal(batch, [[3, 4], [1, 0]])
    # ints beyond int64 are never wrapped: NumPy's reading (here float64) decides
    batch, _ = dt.pad_batch([[2**63, 1]], multiple=1)
    assert batch.dtype == np.float64 and batch[0, 0] == 2.0**63
    with pytest.raises(TypeError, match="sample 1"):
        dt.pad_batch([[1, 2], [1, "x"]])
    # a fill only a float batch can hold does not stop the int route's hand-over
    batch, _ = dt.pad_batch([[1.5, 2], [3.0]], fill=0.5, multiple=1)
    np.testing.assert_array_equal(batch, [[1.5, 2.0], [3.0, 0.5]])
    with pytest.raises(ValueError, match="integral fill"):
        dt.pad_batch([[1, 2], [3]], fill=0.5)
    # out= and plans take the same route
    out = np.full((2, 16), 9)[:, ::2]
    res, _ = dt.pad_batch([[1, 2], []], out=out, fill=-1)
    assert res is out and out.tolist() == [[1, 2] + [-1] * 6, [-1] * 8]


def test_promote_false_keeps_tensors_and_arrays_apart():
    torch = pytest.importorskip("torch")
    with pytest.raises(
        TypeError, match="sample 2 is a NumPy array, but sample 0 is a torch tensor; promote=False"
    ):
        dt.pad_batch([torch.arange(3), [1, 2], np.arange(2)], promote=False)
    batch, _ = dt.pad_batch([torch.arange(3), [1, 2]], promote=False)  # lists join either kind
    assert batch.tolist() == [[0, 1, 2, 0, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0, 0, 0]]
    batch, _ = dt.pad_batch([torch.arange(3), np.arange(2)])  # promote=True mixes them
    assert isinstance(batch, torch.Tensor)


def test_kernel_entries_check_ranks_before_reading_shapes():
    """The Cython entries read no shape of an array of the wrong rank (a 0-d out has
    no dims to read: that was a crash)."""
    from dyntile.cpu import number_lists, pad, tile

    calls = [
        lambda: tile.tile_into(np.zeros(4, np.float32), np.zeros((1, 1, 1, 4, 4), np.float32), 0),
        lambda: tile.untile_into(np.zeros(4, np.float32), np.zeros(3, np.float32)),
        lambda: number_lists.pad_into([[1]], np.zeros((), np.int64), 0, False),
        lambda: pad.pad_pointers(
            np.zeros(1, np.intp),
            np.zeros((1, 1), np.int64),
            np.zeros((1, 1), np.int64),
            np.zeros((), np.int64),
            0,
            False,
        ),
        lambda: pad.pad_pointers(
            np.zeros(1, np.intp),
            np.zeros((1, 0), np.int64),
            np.zeros((1, 0), np.int64),
            np.zeros((1, 3), np.int64),
            0,
            False,
        ),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()


def test_strings_are_refused_and_cpu_is_the_host():
    with pytest.raises(TypeError, match="pads numbers .* not strings"):
        dt.pad_batch([np.array(["a", "b"]), np.array(["c"])])
    records = dt.pad_batch([np.ones(2, "i4,f4"), np.ones(1, "i4,f4")], multiple=1)[
        0
    ]  # records pad with zeros
    assert records.shape == (2, 2) and records[1, 1].tolist() == (0, 0.0)
    assert dt.pad_batch([np.array([1, 2], object)], multiple=4)[0].tolist() == [[1, 2, 0, 0]]
    assert dt.pad_batch([np.ones(2)], device="cpu", multiple=4)[0].tolist() == [[1.0, 1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="device should be None, 'cpu' or 'cuda'"):
        dt.pad_batch([np.ones(2)], device="gpu")


def test_signed_zero_fills_and_float_multiples_are_not_mixed_up_by_the_caches():
    """-0.0 == 0.0 (and 8.0 == 8) with one hash: the fill caches handed out the other
    zero, and a float multiple was taken once an int one had been seen."""
    torch = pytest.importorskip("torch")
    for first, second in ((0.0, -0.0), (-0.0, 0.0), (0j, -0j)):
        for samples in (
            [np.ones(1, np.complex128 if isinstance(first, complex) else np.float64)],
            [[1.0]],
            [torch.ones(1)],
        ):
            if isinstance(first, complex) and not isinstance(samples[0], np.ndarray):
                continue
            dt.pad_batch(samples, fill=first)
            got, _ = dt.pad_batch(samples, fill=second)
            pad = np.asarray(got)[0, 1:]
            assert (np.signbit(pad.real) == (np.copysign(1, second.real) < 0)).all(), (first, second, samples)
            tiled = np.asarray(dt.tile(np.ones((1, 1), np.asarray(samples[0]).dtype), (2, 2), fill=second))
            assert (np.signbit(tiled.reshape(-1)[1:].real) == (np.copysign(1, second.real) < 0)).all()
    dt.pad_batch([[1, 2]], multiple=8)
    with pytest.raises(TypeError, match="multiple should be an integer"):
        dt.pad_batch([[1, 2]], multiple=8.0)


@pytest.mark.parametrize(
    "dtype, fill, exc, match",
    [
        (np.complex64, 1e39, ValueError, "overflows complex64"),
        (np.complex64, complex(0, 1e39), ValueError, "overflows complex64"),
        (np.complex64, 10**400, ValueError, "fill=<an integer of 1329 bits> overflows complex64"),
        (np.float32, 10**400, ValueError, "overflows float32"),
        ("m8[s]", 2**63, ValueError, "out of range for timedelta64"),
    ],
    ids=["complex-real", "complex-imag", "complex-huge-int", "float-huge-int", "timedelta"],
)
def test_complex_and_datetime_fills_are_range_checked(dtype, fill, exc, match):
    for call in (
        lambda: dt.pad_batch([np.ones(1, dtype)], fill=fill),
        lambda: dt.tile(np.ones((1, 1), dtype), (2, 2), fill=fill),
    ):
        with pytest.raises(exc, match=match):
            call()


def test_longdouble_fills_keep_their_precision():
    third = np.longdouble(1) / 3
    for fill in (2**63 - 1, third):
        got, _ = dt.pad_batch([np.ones(1, np.longdouble)], fill=fill, multiple=2)
        assert got[0, 1] == np.full((), fill, np.longdouble)


def test_list_values_must_fit_an_explicit_dtype():
    """dtype= cast lists unsafely: 300 became 44 in int8, 70000.0 inf in float16."""
    with pytest.raises(
        ValueError, match=r"sample 0 \(a list\) holds 300, which dtype=int8 cannot hold \(out of range\)"
    ):
        dt.pad_batch([[300, 1]], dtype=np.int8)
    with pytest.raises(ValueError, match="holds 70000.0, which dtype=float16 cannot hold"):
        dt.pad_batch([[1.0], [70000.0]], dtype=np.float16)
    with pytest.raises(ValueError, match="holds -1, which dtype=uint8"):
        dt.pad_batch([[-1]], dtype=np.uint8)
    got, _ = dt.pad_batch([[255, 0], [7]], dtype=np.uint8, multiple=1)  # ints by value, also into unsigned
    assert got.dtype == np.uint8 and got.tolist() == [[255, 0], [7, 0]]
    got, _ = dt.pad_batch([[0.1, 2]], dtype=np.float32, multiple=1)  # floats may round
    assert got.dtype == np.float32 and got[0, 0] == np.float32(0.1)
    with pytest.raises(TypeError, match="same_kind"):
        dt.pad_batch([[1.5]], dtype=np.uint8)
