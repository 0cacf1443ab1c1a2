"""The native reader and writer of flat dict batches (collate_dicts) and the native
dict_columns, against a reference padded by slicing and the Python columns."""

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from dyntile import tensor_reader  # noqa: E402
from reference import pad_reference, torch_real_dtypes  # noqa: E402

native = tensor_reader.native_module()
pytestmark = pytest.mark.skipif(native is None, reason="dyntile.cpu._torch_tensors not built for this torch")

DTYPES = torch_real_dtypes()


def _rows(kind, sizes, dtype, rng):
    """1-D rows of ``sizes``: lists of ints, contiguous tensors, or strided views with offsets."""
    values = [rng.integers(-100, 100, n) for n in sizes]
    if kind == "list":
        return [v.tolist() for v in values], values
    base = [torch.from_numpy(np.repeat(v, 3)).to(dtype) for v in values]
    rows = [b[1::3] if kind == "strided" else b[::3].clone() for b in base]
    return rows, [r.to(torch.float64).numpy() if r.dtype == torch.bfloat16 else r.numpy() for r in rows]


def _bits(fill, dtype):
    """The fill's bit pattern in ``dtype`` (what the layout hands the writer)."""
    t = torch.tensor([fill], dtype=dtype)
    width = t.element_size()
    return int(t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]).item()) % (
        1 << (8 * width)
    )


_SCALAR_DTYPES = native.scalar_dtypes() if native is not None else ()


def _layout(widths, dtypes, bits, mark=-1, want=0, left=False) -> tuple:
    return (tuple(widths), tuple(dtypes), tuple(bits), mark, want, left)


def _run(samples, keys, layout, during=None):
    """``(got, facts)``: ``collate_dicts`` of ``samples`` by ``layout``, decided for the
    batch's facts (``during()`` runs as it is decided); ``facts`` is ``None`` when the
    reader left the batch (nothing was decided)."""
    seen = []

    def decide(facts):
        seen.append(facts)
        if during is not None:
            during()
        return layout

    got = native.collate_dicts(samples, tuple(keys), {}, decide)
    return got, (seen[0] if seen else None)


def _info(facts, totals=None):
    """Per key ``(kind, dtype | None, longest, total, grad)`` of a batch's facts (its
    ONE_LENGTH flags checked against the totals), ``total`` None without ``totals``."""
    B, info = facts[0], []
    totals = totals or (None,) * ((len(facts) - 1) // 2)
    for code, longest, total in zip(facts[1::2], facts[2::2], totals):
        kind = code & (native.GRAD - 1)
        if total is not None:
            rows = kind in (native.LIST_ROWS, native.TENSOR_ROWS)
            assert bool(code & native.ONE_LENGTH) == (rows and longest * B == total)
        info.append((kind, _SCALAR_DTYPES[code >> 5], longest, total, bool(code & native.GRAD)))
    return tuple(info)


def _write(samples, keys, widths, dtypes, bits, mark=-1, want=0, left=False):
    """``((out, mask, lengths), info)`` of a batch written by a layout (see :func:`_info`)."""
    layout = _layout(widths, dtypes, bits, mark, want, left)
    got, facts = _run(samples, keys, layout)
    assert got is not None
    out, mask, lengths, laid, totals = got
    assert laid is layout
    return (out, mask, lengths), _info(facts, totals)


@settings(max_examples=120, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 37), min_size=1, max_size=12),
    kind=st.sampled_from(["list", "tensor", "strided"]),
    dtype=st.sampled_from(DTYPES),
    extra=st.integers(0, 9),
    left=st.booleans(),
    want=st.integers(0, 3),
    fill=st.sampled_from([0, 1, -1]),
    seed=st.integers(0, 2**16),
)
def test_the_writer_matches_a_reference(sizes, kind, dtype, extra, left, want, fill, seed):
    if dtype == torch.bool or dtype == torch.uint8:
        fill = abs(fill)
    rng = np.random.default_rng(seed)
    rows, values = _rows(kind, sizes, dtype, rng)
    out_dtype = torch.int64 if kind == "list" else dtype
    T = max(sizes) + extra
    (out, mask, lengths), info = _write(
        [{"ids": r} for r in rows], ["ids"], [T], [out_dtype], [_bits(fill, out_dtype)], 0, want, left
    )
    kind_code = native.LIST_ROWS if kind == "list" else native.TENSOR_ROWS
    assert info == ((kind_code, None if kind == "list" else dtype, max(sizes), sum(sizes), False),)
    batch = out["ids"]
    assert type(batch) is torch.Tensor and batch.dtype == out_dtype and batch.shape == (len(rows), T)
    expect = pad_reference(
        [np.asarray(v) for v in values], (T,), fill, left, values[0].dtype if values else None
    )
    np.testing.assert_array_equal(
        batch.to(torch.float64).numpy() if dtype == torch.bfloat16 and kind != "list" else batch.numpy(),
        expect,
    )
    if want & 1:
        assert lengths.dtype == torch.int64 and lengths.tolist() == sizes
    else:
        assert lengths is None
    if want & 2:
        pos = torch.arange(T)
        n = torch.tensor(sizes)[:, None]
        assert mask.dtype == torch.bool and torch.equal(mask, pos >= T - n if left else pos < n)
    else:
        assert mask is None


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
@pytest.mark.parametrize("fill", [0, 3])
@pytest.mark.parametrize("left", [False, True])
def test_every_run_length_of_padding_and_mask(dtype, fill, left):
    """Rows of every length 0..130 padded to 130: the padding and the mask's runs of
    each row take every length on both sides of the inline-store and memset sizes."""
    sizes = list(range(131))
    rows = [torch.arange(1, n + 1, dtype=dtype) for n in sizes]
    (out, mask, lengths), _ = _write([{"a": r} for r in rows], "a", [130], [dtype], [fill], 0, 3, left)
    expect = pad_reference([r.numpy() for r in rows], (130,), fill, left, rows[0].numpy().dtype)
    np.testing.assert_array_equal(out["a"].numpy(), expect)
    pos = torch.arange(130)
    n = torch.tensor(sizes)[:, None]
    assert torch.equal(mask, pos >= 130 - n if left else pos < n)
    assert lengths.tolist() == sizes


_NUMBER = st.one_of(
    st.integers(-(2**64), 2**64), st.floats(allow_nan=True, allow_infinity=True), st.booleans()
)
_KIND_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool}


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(_NUMBER, min_size=1, max_size=40)
    | st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1)
    | st.lists(st.floats(), min_size=1)
    | st.lists(st.booleans(), min_size=1)
)
def test_numbers_are_written_as_torch_tensor_makes_them(items):
    """Numbers of one kind are read as that kind and written as torch.tensor stacks them
    (int64, float64, bool, NaN and -0.0 kept); mixed kinds are not read; an int past
    int64 is met by the writer, which leaves the batch (None)."""
    samples = [{"ids": [1], "y": x} for x in items]
    kind = type(items[0])
    written, facts = _run(samples, ("ids", "y"), _layout((1, 0), (torch.int64, _KIND_DTYPES[kind]), (0, 0)))
    if len({type(x) for x in items}) > 1:
        assert written is None and facts is None
        return
    number = {int: native.INTS, float: native.FLOATS, bool: native.BOOLS}[kind]
    assert _info(facts)[1] == (number, None, 0, None, False)
    if not all(-(2**63) <= x < 2**63 for x in items if type(x) is int):
        assert written is None
        return
    out = written[0]["y"]
    want = torch.tensor(items, dtype=_KIND_DTYPES[kind])
    assert out.dtype == want.dtype and out.shape == (len(items),)
    assert torch.equal(
        out.view(torch.int64) if out.dtype == torch.float64 else out,
        want.view(torch.int64) if want.dtype == torch.float64 else want,
    )  # bit for bit


def test_0d_tensors_are_read_with_their_dtype_and_grad():
    samples = [{"ids": [1], "y": torch.tensor(1.5, dtype=torch.bfloat16)} for _ in range(3)]
    (out, _, _), info = _write(samples, ("ids", "y"), (1, 0), (torch.int64, torch.bfloat16), (0, 0))
    assert info[1] == (native.TENSOR_SCALARS, torch.bfloat16, 0, 0, False)
    assert out["y"].dtype == torch.bfloat16 and out["y"].tolist() == [1.5] * 3
    samples[1]["y"] = torch.tensor(2.0, dtype=torch.bfloat16, requires_grad=True)
    assert _info(_run(samples, ("ids", "y"), None)[1])[1][4] is True


def test_the_batch_owns_its_memory():
    x = torch.arange(5)
    (out, _, _), _ = _write([{"a": x}, {"a": x[:2]}], "a", [5], [torch.int64], [0])
    x.zero_()
    assert out["a"].tolist() == [[0, 1, 2, 3, 4], [0, 1, 0, 0, 0]]
    ids = [[7, 8], [9]]
    (out, _, _), _ = _write([{"a": r} for r in ids], "a", [2], [torch.int64], [0])
    ids[0][0] = 1
    assert out["a"].tolist() == [[7, 8], [9, 0]]


@pytest.mark.parametrize(
    "rows",
    [
        [[1], torch.tensor([2])],  # a list then a tensor
        [torch.tensor([2]), [1]],  # a tensor then a list
        [torch.ones(2, 2)],  # not 1-D
        [torch.ones(2), torch.ones(2, dtype=torch.float64)],  # mixed dtypes
        [torch.nn.Parameter(torch.ones(2))],  # not exactly torch.Tensor
        [torch.ones(2), torch.nn.Parameter(torch.ones(2))],  # mixed types
        [torch.ones(2, dtype=torch.complex64)],  # complex (conjugate bits)
        [np.arange(3)],  # not a tensor or list
        [(1, 2)],  # a tuple
        ["ab"],  # a string
        [1, 2.5],  # numbers of two kinds
    ],
)
def test_the_reader_leaves_what_the_writer_does_not_take(rows):
    assert _run([{"a": r} for r in rows], ("a",), _layout((4,), (torch.int64,), (0,))) == (None, None)


@pytest.mark.parametrize("rows", [[[1, True]], [[1, 2.0]], [[1, 2**63]], [[1], [2, "x"]]])
def test_the_writer_leaves_lists_of_other_numbers(rows):
    """The reader looks at a list's type only; the writer meets every element, and leaves a
    batch holding anything but exact ints in int64 (None: the Python executor takes it)."""
    got, facts = _run([{"a": r} for r in rows], ("a",), _layout((4,), (torch.int64,), (0,)))
    assert _info(facts)[0][0] == native.LIST_ROWS and got is None


def test_the_reader_needs_exact_dicts_of_its_keys_with_sample_0_in_order():
    def left(samples, keys):
        return _run(samples, keys, None) == (None, None)

    assert left([], ("a",))
    assert left([{"a": [1]}], ())
    assert left([{"a": [1], "b": [2]}], ("b", "a"))  # sample 0's order
    assert left([{"a": [1]}, {"b": [2]}], ("a",))  # a missing key
    assert left([{"a": [1]}, {"a": [2], "b": 1}], ("a",))  # an extra key
    assert left([collections.OrderedDict(a=[1])], ("a",))
    samples = [{"a": [1], "b": 2}, {"b": 3, "a": [4, 5]}]  # any order after sample 0
    _, info = _write(samples, ("a", "b"), (2, 0), (torch.int64, torch.int64), (0, 0))
    assert info == ((native.LIST_ROWS, None, 2, 3, False), (native.INTS, None, 0, 0, False))
    with pytest.raises(TypeError):
        native.collate_dicts(({"a": [1]},), ("a",), {}, lambda facts: None)


@pytest.mark.parametrize(
    "layout, error, match",
    [
        (object(), TypeError, "a layout is a tuple"),
        (((2, 0), (torch.int64, torch.int64), (0, 0), -1, 0), TypeError, "a layout is a tuple"),
        (_layout((2,), (torch.int64,), (0,)), ValueError, "one width, dtype and fill per key"),
        (_layout((1, 0), (torch.int64, torch.int64), (0, 0)), ValueError, "wider than its width"),
        (_layout((2, 0), (torch.int32, torch.int64), (0, 0)), ValueError, "cannot be written in the dtype"),
        (_layout((2, 0), (torch.int64, torch.float64), (0, 0)), ValueError, "cannot be written in the dtype"),
        (_layout((2, 0), (torch.int64, torch.int64), (0, 0), 1, 3), ValueError, "mark should be -1 or"),
    ],
)
def test_the_writer_checks_its_layout(layout, error, match):
    with pytest.raises(error, match=match):
        _run([{"a": [1, 2], "y": 1}], ("a", "y"), layout)


def test_the_writer_carries_out_mark_want_and_side():
    (out, mask, lengths), _ = _write(
        [{"a": [1, 2], "y": 1}], ("a", "y"), (4, 0), (torch.int64,) * 2, (0, 0), 0, 3, True
    )
    assert out["a"].tolist() == [[0, 0, 1, 2]] and mask.tolist() == [[False, False, True, True]]
    (out, mask, lengths), _ = _write(
        [{"a": [1, 2], "y": 1}], ("a", "y"), (2, 0), (torch.int64,) * 2, (0, 0), -1, 3
    )
    assert mask is None and lengths is None and out["y"].tolist() == [1]
    (out, mask, lengths), _ = _write([{"a": []}, {"a": []}], ("a",), (0,), (torch.int64,), (0,), 0, 3, True)
    assert out["a"].shape == (2, 0) and mask.shape == (2, 0)  # T == 0: nothing to write


def test_a_layout_kept_for_the_facts_is_written_without_deciding():
    layout = _layout((8,), (torch.int64,), (0,), 0, 3)
    samples = [{"a": [1, 2, 3]}, {"a": [4]}]
    _, facts = _run(samples, ("a",), layout)
    out, mask, lengths, laid, totals = native.collate_dicts(samples, ("a",), {facts: layout}, pytest.fail)
    assert laid is layout and totals == (4,) and out["a"].shape == (2, 8) and lengths.tolist() == [3, 1]
    assert native.collate_dicts(samples, ("a",), {facts: None}, pytest.fail) is None  # kept as for Python
    with pytest.raises(_Boom):
        native.collate_dicts(samples, ("a",), {}, _raise_boom)  # an error of the decider goes up


def _raise_boom(facts):
    raise _Boom(facts)


def test_the_read_holds_its_values_and_the_writer_sees_a_batch_changed_while_deciding():
    """The read holds every value it read until the write, which refuses rows resized
    by the Python code that decided the layout."""
    samples = [{"a": [1, 2, 3]}]
    layout = _layout((3,), (torch.int64,), (0,))
    got, _ = _run(
        samples, ("a",), layout, during=lambda: samples[0].update(a=None)
    )  # its reference keeps the list
    assert got[0]["a"].tolist() == [[1, 2, 3]]
    row = [1, 2, 3]
    with pytest.raises(RuntimeError, match="changed between its read and its write"):
        _run([{"a": row}], ("a",), _layout((8,), (torch.int64,), (0,)), during=lambda: row.append(4))
    t = torch.arange(4)
    with pytest.raises(RuntimeError, match="changed between its read and its write"):
        _run([{"a": t}], ("a",), _layout((8,), (torch.int64,), (0,)), during=lambda: t.resize_(2))


def test_the_reader_survives_a_key_whose_eq_changes_the_batch():
    """A lookup may run Python code (a colliding key's ==): what was read before it stays
    alive and is read as it is after it, never freed under the copy."""

    class Clash:
        """A key whose hash collides with 'a'; its == empties the batch and rewrites sample 0's row."""

        def __init__(self, equal):
            self.equal = equal

        def __hash__(self):
            return hash("a")

        def __eq__(self, other):
            first["a"][:] = [9]
            samples.clear()
            return self.equal

    for equal in (False, True):
        first = {"a": [1, 2, 3]}
        samples = [first, {Clash(equal): [4]}]
        got, _ = _run(samples, ("a",), _layout((1,), (torch.int64,), (0,)))
        if equal:  # found: sample 0's row as it is now
            assert got[0]["a"].tolist() == [[9], [4]]
        else:  # not found: a missing key
            assert got is None
        assert samples == []


def test_the_reader_holds_the_samples_walked_before_a_lookup():
    """Rows replaced by the Python code of a lookup are read as they were, never freed
    memory reused for another list."""

    class Clash:
        def __hash__(self):
            return hash("a")

        def __eq__(self, other):
            for s in samples[1:3]:
                s["a"] = [7, 7]  # the rows walked before: their last reference
            junk.extend([8, 8, 8] for _ in range(200))  # new lists in any freed list's memory
            return True

    junk = []
    samples = [{"a": [1, 2, 3]}, {"a": [5, 6]}, {"a": [4]}, {Clash(): [2, 2, 2]}, {"a": [3]}]
    (out, _, _), _ = _write(samples, "a", [3], [torch.int64], [0])
    assert out["a"].tolist() == [[1, 2, 3], [5, 6, 0], [4, 0, 0], [2, 2, 2], [3, 0, 0]]
    assert samples[1]["a"] == [7, 7] and len(junk) == 200


def test_a_batch_past_the_scratch_block():
    """3000 samples of 6 keys: the read's arrays outgrow its 8 KiB block and spill to the
    heap, rows of lists and of tensors alike, both exact."""
    rng = np.random.default_rng(5)
    keys = [f"k{j}" for j in range(6)]
    sizes = rng.integers(0, 9, (3000, 6))
    samples = [
        {
            k: (list(range(1, n + 1)) if j % 2 else torch.arange(1, n + 1, dtype=torch.int32))
            for j, (k, n) in enumerate(zip(keys, row))
        }
        for row in sizes
    ]
    dtypes = [torch.int64 if j % 2 else torch.int32 for j in range(6)]
    (out, mask, lengths), info = _write(samples, keys, [8] * 6, dtypes, [0] * 6, 0, 3)
    for j, k in enumerate(keys):
        n = torch.from_numpy(sizes[:, j])[:, None]
        pos = torch.arange(8)
        assert torch.equal(out[k], torch.where(pos < n, pos + 1, 0).to(out[k].dtype))
        assert info[j][2:4] == (sizes[:, j].max(), sizes[:, j].sum())
    assert torch.equal(lengths, torch.from_numpy(sizes[:, 0]))


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.sampled_from(["a", "b", "c", 0, 1.5, ("t",)]), unique=True, max_size=4),
    B=st.integers(1, 5),
    drop=st.integers(-1, 5),
    extra=st.integers(-1, 5),
    seed=st.integers(0, 99),
)
def test_dict_columns_matches_the_python_columns(keys, B, drop, extra, seed):
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(B):
        order = [keys[j] for j in rng.permutation(len(keys))] if i else list(keys)  # key order may differ
        d = {k: [i, str(k)] for k in order}
        if i == drop and keys:
            del d[keys[0]]
        if i == extra:
            d["extra"] = i
        samples.append(d)
    got = native.dict_columns(samples)
    first = list(samples[0])
    if not all(set(s) == set(first) for s in samples):
        assert got is None
        return
    assert got == (first, [[s[k] for s in samples] for k in first])


def test_dict_columns_refuses_other_mappings_and_survives_a_mutating_key():
    assert native.dict_columns([collections.OrderedDict(a=1)]) is None
    assert native.dict_columns([{"a": 1}, collections.OrderedDict(a=1)]) is None
    assert native.dict_columns([{"a": 1}, [("a", 1)]]) is None
    assert native.dict_columns([]) is None
    samples = [{}, {}]

    class Clash:
        """A key whose hash collides with 'a' and whose == empties the batch."""

        def __hash__(self):
            return hash("a")

        def __eq__(self, other):
            samples.clear()
            return False

    samples[:] = [{"a": 1}, {Clash(): 2}]
    assert native.dict_columns(samples) is None  # no crash, the batch changed under it
    assert samples == []


def test_views_past_their_resized_storage_are_never_read():
    """A view whose storage was resized smaller afterwards points past its memory
    (torch's own ops crash on it): the native readers refuse it, and a 0-d label of that
    kind reaches torch.stack in the walk, which raises."""
    base = torch.arange(1 << 16, dtype=torch.float64)
    row, label = base[(1 << 16) - 3 :], base[(1 << 16) - 1]
    base.untyped_storage().resize_(0)
    layout = _layout((3,), (torch.float64,), (0,))
    assert _run([{"a": row}, {"a": torch.ones(2, dtype=torch.float64)}], ("a",), layout) == (None, None)
    bufs = [np.empty(2, np.int64), np.empty(2, np.int64), np.empty(2, np.int64), np.empty(1, np.int64)]
    assert native.describe([torch.ones(2, dtype=torch.float64), row], 1, *bufs)[0] == 1
    samples = [{"ids": [1], "y": label}, {"ids": [2], "y": torch.tensor(2.0, dtype=torch.float64)}]
    assert _run(samples, ("ids", "y"), _layout((1, 0), (torch.int64, torch.float64), (0, 0))) == (None, None)
    from loaders import DynTileCollate

    with pytest.raises(RuntimeError, match="out of bounds"):
        DynTileCollate()(
            [{"ids": [1], "y": label}, {"ids": [2], "y": torch.tensor(2.0, dtype=torch.float64)}]
        )


class _Boom(Exception):
    pass


@pytest.mark.parametrize("call", ["collate_dicts", "dict_columns"])
def test_an_error_raised_by_a_key_during_a_lookup_propagates(call):
    class Raising:
        """A key whose hash collides with 'b' and whose == raises."""

        def __hash__(self):
            return hash("b")

        def __eq__(self, other):
            raise _Boom("from __eq__")

    samples = [{"a": [1, 2], "b": [3]}, {"a": [4], Raising(): [5, 6]}]
    with pytest.raises(_Boom):
        if call == "dict_columns":
            native.dict_columns(samples)
        else:
            native.collate_dicts(samples, ("a", "b"), {}, pytest.fail)
