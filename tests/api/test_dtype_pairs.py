"""pad_batch and pad_jagged over pairs of dtypes, against a NumPy reference.

Every datetime and timedelta unit, records, and the numeric kinds: a batch of two
dtypes either pads into NumPy's promoted dtype with NumPy's values, or raises a
``TypeError``, and only where NumPy's promotion would lose values (judged here on each
dtype's extreme values, not by dyntile's rule) or mixes kinds dyntile keeps apart
(records of another layout; times with numbers; datetimes with timedeltas).
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile as dt
from reference import pad_reference

UNITS = ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"]
NUMBERS = [
    "?",
    "i1",
    "i2",
    "i4",
    "i8",
    "u1",
    "u2",
    "u4",
    "u8",
    "f2",
    "f4",
    "f8",
    "g",
    "c8",
    "c16",
    ">i4",
    ">f8",
]
TIMES = [f"{k}8[{u}]" for k in "Mm" for u in UNITS] + ["M8[2D]", "m8[10ms]", "m8", ">M8[s]", ">m8[us]"]
RECORDS = [
    [("a", "i4")],
    [("b", "f4")],
    [("a", "f4")],
    [("a", "i4"), ("b", "f8")],
    np.dtype([("a", "i4"), ("b", "f8")], align=True),
    [("a", "u1"), ("b", "m8[s]")],
]
DTYPES = [np.dtype(d) for d in NUMBERS + TIMES + RECORDS]
_NAT = np.iinfo(np.int64).min


def _extremes(dtype: np.dtype) -> np.ndarray:
    """Values of ``dtype`` at the edges of its range (NaT, NaN and inf included)."""
    if dtype.kind in "mM":
        return (
            np.array([_NAT, _NAT + 1, -1, 0, 1, 2**62, 2**63 - 1], np.int64)
            .astype(dtype.byteorder + "i8")
            .view(dtype)
        )
    if dtype.kind == "b":
        return np.array([False, True])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([info.min, info.min + 1, 0, info.max - 1, info.max], dtype)
    info = np.finfo(dtype)
    real = np.array([info.min, -info.tiny, 0, info.tiny, info.max, np.inf, -np.inf, np.nan], info.dtype)
    with np.errstate(invalid="ignore"):  # inf * 1j: nan in the real part
        return real.astype(dtype) if dtype.kind == "f" else (real + 1j * real[::-1]).astype(dtype)


def _exact(src: np.dtype, dst: np.dtype) -> bool:
    """Whether NumPy's cast of ``src`` into ``dst`` and back keeps ``src``'s extreme values."""
    values = _extremes(src)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            back = values.astype(dst).astype(src)
    except (TypeError, ValueError):
        return False
    if src.kind in "mM":
        return np.array_equal(back.view(src.byteorder + "i8"), values.view(src.byteorder + "i8"))
    return np.array_equal(back, values, equal_nan=src.kind in "fc")


def _kind(dtype: np.dtype) -> str:
    return {"M": "datetime", "m": "timedelta", "V": "record"}.get(dtype.kind, "number")


def expected_dtype(d1: np.dtype, d2: np.dtype):
    """NumPy's dtype for a batch of ``d1`` and ``d2`` samples, or ``None`` where dyntile
    must refuse the pair."""
    try:
        result = np.result_type(d1, d2)
    except (TypeError, OverflowError):  # OverflowError: time units whose common divisor overflows
        return None
    if _kind(d1) != _kind(d2):
        return None
    if _kind(d1) == "record":
        return result if d1 == d2 else None
    if not (_exact(d1, result) and _exact(d2, result)):
        return None
    return result if result.kind == "V" else result.newbyteorder("=")  # batches are in native byte order


def random_sample(rng, dtype: np.dtype, n: int) -> np.ndarray:
    """``n`` values of ``dtype``: some extremes, some small random values."""
    if dtype.kind == "V":
        a = np.zeros(n, dtype)
        for name in dtype.names:
            a[name] = random_sample(rng, dtype.fields[name][0], n)
        return a
    pool = _extremes(dtype)
    if dtype.kind in "mM":
        small = rng.integers(-1000, 1000, n).astype(dtype.byteorder + "i8").view(dtype)
    elif dtype.kind == "b":
        small = rng.integers(0, 2, n).astype(bool)
    else:
        small = rng.integers(0, 100, n).astype(dtype)
    return np.where(rng.random(n) < 0.3, pool[rng.integers(0, pool.size, n)], small).astype(dtype)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal values and dtype; times by their integers (NaT == NaT), records field by field."""
    if got.dtype != want.dtype:
        return False
    if want.dtype.kind == "V":
        return all(_same(got[name], want[name]) for name in want.dtype.names)
    if want.dtype.kind in "mM":
        return np.array_equal(got.view(np.int64), want.view(np.int64))
    return np.array_equal(got, want, equal_nan=want.dtype.kind in "fc")


@settings(max_examples=200, deadline=None)
@given(
    d1=st.sampled_from(DTYPES),
    d2=st.sampled_from(DTYPES),
    n1=st.integers(0, 5),
    n2=st.integers(0, 5),
    seed=st.integers(0, 2**32 - 1),
    side=st.sampled_from(["right", "left"]),
)
def test_pairs_pad_into_numpys_dtype_or_raise(d1, d2, n1, n2, seed, side):
    rng = np.random.default_rng(seed)
    a, b = random_sample(rng, d1, n1), random_sample(rng, d2, n2)
    want = expected_dtype(d1, d2)
    if want is None:
        with pytest.raises(TypeError, match="sample [01]"):
            dt.pad_batch([a, b], multiple=3, side=side)
        with pytest.raises(TypeError, match="sample [01]"):
            dt.concat_rows([a, b])
        return
    T = -(-max(n1, n2) // 3) * 3
    expected = pad_reference(
        [a.astype(want), b.astype(want)], (T,), np.zeros((), want)[()], side == "left", want
    )
    batch, lengths = dt.pad_batch([a, b], multiple=3, side=side)
    assert _same(batch, expected) and lengths.tolist() == [n1, n2]
    values, lengths = dt.concat_rows([a, b])
    jagged, _ = dt.pad_jagged(values, lengths, multiple=3, side=side)
    assert _same(jagged, expected)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    lengths=st.lists(st.integers(0, 4), max_size=4),
    seed=st.integers(0, 2**32 - 1),
    side=st.sampled_from(["right", "left"]),
)
def test_one_dtype_keeps_its_unit_and_layout(dtype, lengths, seed, side):
    """One dtype: the batch has it (native byte order), unit and fields included."""
    rng = np.random.default_rng(seed)
    rows = [random_sample(rng, dtype, n) for n in lengths]
    native = dtype.newbyteorder("=") if dtype.kind != "V" else dtype
    T = max(lengths, default=0)
    expected = pad_reference(
        [r.astype(native) for r in rows], (T,), np.zeros((), native)[()], side == "left", native
    )
    values = np.concatenate(rows) if rows else np.zeros(0, dtype)
    jagged, _ = dt.pad_jagged(values, lengths, multiple=1, side=side)
    assert _same(jagged, expected)
    if rows:
        batch, _ = dt.pad_batch(rows, multiple=1, side=side)
        assert _same(batch, expected)


def test_mixed_units_and_layouts_are_never_bit_copied():
    """Samples of one kind but other units or layouts are converted, or refused, never
    read as the bits of sample 0's dtype."""
    day, seconds = np.array([1], "M8[D]"), np.array([86400], "M8[s]")  # both 1970-01-02
    with pytest.raises(TypeError, match=r"sample 0 \(datetime64\[D\]\) would change unit to datetime64\[s\]"):
        dt.pad_batch([day, seconds], multiple=1)
    with pytest.raises(TypeError, match="would change unit"):
        dt.pad_batch([np.array([5], "m8[ms]"), np.array([1], "m8[h]")], multiple=1)
    with pytest.raises(TypeError, match=r"sample 1 has dtype \[\('b', '<f4'\)\], which has no common dtype"):
        dt.pad_batch([np.zeros(1, [("a", "i4")]), np.array([(1.5,)], [("b", "f4")])], multiple=1)
    with pytest.raises(TypeError, match="sample 1 has dtype int64, which has no common dtype .*datetime64"):
        dt.pad_batch([np.zeros(2, "M8[s]"), np.arange(3)])
    batch, _ = dt.pad_batch([seconds, np.array([0, 1], ">M8[s]")], multiple=1)  # one unit, two byte orders
    assert batch.dtype == np.dtype("M8[s]") and batch.view(np.int64).tolist() == [[86400, 0], [0, 1]]


def test_pad_jagged_keeps_the_unit():
    batch, _ = dt.pad_jagged(np.array([1, 2], "m8[s]"), [2])
    assert batch.dtype == np.dtype("m8[s]")
    batch, _ = dt.pad_jagged(np.array([1, 2], "M8[ns]"), [1, 1], multiple=2)
    assert batch.dtype == np.dtype("M8[ns]") and str(batch[1, 0]) == "1970-01-01T00:00:00.000000002"
