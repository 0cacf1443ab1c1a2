"""pad_rows_torch (the native one-call route into new torch tensors) and the native
dict_columns, against pad_rows, a reference padded by slicing, and the Python walk."""

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from dyntile import tensor_reader  # noqa: E402
from dyntile.padding import pad_rows, pad_rows_torch  # noqa: E402
from dyntile.planning import BucketPlan  # noqa: E402
from reference import pad_reference  # noqa: E402

native = tensor_reader.native_module()
pytestmark = pytest.mark.skipif(native is None, reason="dyntile.cpu.torch_tensors not built for this torch")

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]


def _rows(kind, sizes, dtype, rng):
    """1-D rows of ``sizes``: lists of ints, contiguous tensors, or strided views with offsets."""
    values = [rng.integers(-100, 100, n) for n in sizes]
    if kind == "list":
        return [v.tolist() for v in values], values
    base = [torch.from_numpy(np.repeat(v, 3)).to(dtype) for v in values]
    rows = [b[1::3] if kind == "strided" else b[::3].clone() for b in base]
    return rows, [r.to(torch.float64).numpy() if r.dtype == torch.bfloat16 else r.numpy() for r in rows]


@settings(max_examples=120, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 37), min_size=1, max_size=12),
    kind=st.sampled_from(["list", "tensor", "strided"]),
    dtype=st.sampled_from(DTYPES),
    multiple=st.sampled_from([1, 3, 8]),
    use_plan=st.booleans(),
    left=st.booleans(),
    want=st.integers(0, 3),
    fill=st.sampled_from([0, 1, -1]),
    seed=st.integers(0, 2**16),
)
def test_matches_pad_rows_and_a_reference(sizes, kind, dtype, multiple, use_plan, left, want, fill, seed):
    if dtype == torch.bool or dtype == torch.uint8:
        fill = abs(fill)
    rng = np.random.default_rng(seed)
    rows, values = _rows(kind, sizes, dtype, rng)
    plan = BucketPlan((5, 16, 40), multiple=1) if use_plan else None
    side = "left" if left else "right"
    got = pad_rows_torch(
        rows, multiple=multiple, plan=plan, fill=fill, side=side, lengths=bool(want & 1), mask=bool(want & 2)
    )
    batch, lengths, mask, longest, total = got
    want_batch, want_lengths, want_longest, want_total = pad_rows(
        rows, multiple=multiple, plan=plan, fill=fill, side=side
    )
    want_batch = torch.as_tensor(want_batch)
    assert type(batch) is torch.Tensor and batch.dtype == want_batch.dtype and torch.equal(batch, want_batch)
    assert batch.dtype == (torch.int64 if kind == "list" else dtype)
    T = batch.shape[1]
    expect = pad_reference(
        [np.asarray(v) for v in values], (T,), fill, left, values[0].dtype if values else None
    )
    np.testing.assert_array_equal(
        batch.to(torch.float64).numpy() if dtype == torch.bfloat16 and kind != "list" else batch.numpy(),
        expect,
    )
    assert (longest, total) == (want_longest, want_total) == (max(sizes), sum(sizes))
    if want & 1:
        assert lengths.dtype == torch.int64 and lengths.tolist() == sizes == want_lengths.tolist()
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
@pytest.mark.parametrize("side", ["right", "left"])
def test_every_run_length_of_padding_and_mask(dtype, fill, side):
    """Rows of every length 0..130 padded to 130: the padding and the mask's runs of
    each row take every length on both sides of the inline-store and memset sizes."""
    sizes = list(range(131))
    rows = [torch.arange(1, n + 1, dtype=dtype) for n in sizes]
    batch, lengths, mask, longest, total = pad_rows_torch(
        rows, multiple=1, fill=fill, side=side, lengths=True, mask=True
    )
    expect = pad_reference([r.numpy() for r in rows], (130,), fill, side == "left", rows[0].numpy().dtype)
    np.testing.assert_array_equal(batch.numpy(), expect)
    pos = torch.arange(130)
    n = torch.tensor(sizes)[:, None]
    assert torch.equal(mask, pos >= 130 - n if side == "left" else pos < n)
    assert lengths.tolist() == sizes and (longest, total) == (130, sum(sizes))


_NUMBER = st.one_of(
    st.integers(-(2**64), 2**64), st.floats(allow_nan=True, allow_infinity=True), st.booleans()
)


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(_NUMBER, min_size=1, max_size=40)
    | st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1)
    | st.lists(st.floats(), min_size=1)
    | st.lists(st.booleans(), min_size=1)
)
def test_stack_numbers_equals_torch_tensor(items):
    """Numbers of one kind stack as torch.tensor stacks them (int64, float64, bool, NaN
    and -0.0 kept); anything else (mixed kinds, an int past int64) is declined."""
    got = native.stack_numbers(items)
    kinds = {type(x) for x in items}
    fits = all(-(2**63) <= x < 2**63 for x in items if type(x) is int)
    if len(kinds) > 1 or not fits:
        assert got is None
        return
    want = torch.tensor(items, dtype=torch.float64 if kinds == {float} else None)
    assert got.dtype == want.dtype and got.shape == (len(items),)
    assert torch.equal(
        got.view(torch.int64) if got.dtype == torch.float64 else got,
        want.view(torch.int64) if want.dtype == torch.float64 else want,
    )  # bit for bit


def test_stack_numbers_declines_what_it_does_not_stack():
    assert native.stack_numbers([]) is None
    assert native.stack_numbers(["a", "b"]) is None and native.stack_numbers([1.5j]) is None
    assert native.stack_numbers([np.int64(3), 4]) is None and native.stack_numbers([None]) is None
    with pytest.raises(TypeError):
        native.stack_numbers((1, 2))


def test_the_batch_owns_its_memory():
    x = torch.arange(5)
    rows = [x, x[:2]]
    batch = pad_rows_torch(rows, multiple=1)[0]
    x.zero_()
    assert batch.tolist() == [[0, 1, 2, 3, 4], [0, 1, 0, 0, 0]]
    ids = [[7, 8], [9]]
    batch = pad_rows_torch(ids, multiple=2)[0]
    ids[0][0] = 1
    assert batch.tolist() == [[7, 8], [9, 0]]


@pytest.mark.parametrize(
    "rows",
    [
        [[1, True]],  # a bool in a list of ints
        [[1, 2.0]],  # a float
        [[1, 2**63]],  # past int64
        [[1], torch.tensor([2])],  # a list then a tensor
        [torch.tensor([2]), [1]],  # a tensor then a list
        [torch.ones(2, 2)],  # not 1-D
        [torch.ones(2), torch.ones(2, dtype=torch.float64)],  # mixed dtypes
        [torch.ones(2), torch.nn.Parameter(torch.ones(2))],  # mixed types
        [torch.ones(2, dtype=torch.complex64)],  # complex (conjugate bits)
        [np.arange(3)],  # not a tensor or list
        [(1, 2)],  # a tuple
        [],
    ],
)
def test_refuses_what_pad_rows_or_pad_batch_decides(rows):
    assert pad_rows_torch(rows) is None


def test_refuses_a_row_over_the_plan_and_odd_fills():
    plan = BucketPlan((4, 8), multiple=4)
    assert pad_rows_torch([[1] * 9], plan=plan) is None
    assert pad_rows_torch([[1] * 8], plan=plan)[0].shape == (1, 8)
    assert pad_rows_torch([[1, 2]], fill=0.5) is None  # an int64 row cannot hold it
    assert pad_rows_torch([torch.ones(2, dtype=torch.int8)], fill=300) is None
    with pytest.raises(ValueError, match="side should be 'right' or 'left'"):
        pad_rows_torch([[1]], side="up")


def test_native_pad_rows_limits():
    """Over max_bytes (a copy big enough for threads) or a padded length past int64: None."""
    assert native.pad_rows([[1, 2, 3]], 8, None, 0, False, 0, 63) is None  # 3 -> 8 int64 = 64 bytes
    assert native.pad_rows([[1, 2, 3]], 8, None, 0, False, 0, 64)[0].shape == (1, 8)
    assert native.pad_rows([[1, 2, 3]], 2**63 - 1, None, 0, False, 0, 1 << 30) is None
    assert native.pad_rows([[]], 2**63 - 1, None, 0, False, 1, 64)[0].shape == (1, 0)
    with pytest.raises(ValueError, match="multiple should be >= 1"):
        native.pad_rows([[1]], 0, None, 0, False, 0, 64)
    with pytest.raises(ValueError, match="bounds should be a non-empty buffer of int64"):
        native.pad_rows([[1]], 1, np.array([4], np.int32), 0, False, 0, 64)
    with pytest.raises(TypeError):
        native.pad_rows(([1],), 1, None, 0, False, 0, 64)


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


# the native executor's key codes and flags (loaders/collate_spec.py, torch_tensors.cpp KeyKind)
ROW_LIST, ROW_TENSOR, INT, FLOAT, BOOL, TENSOR_0D = range(6)
ALWAYS, ALIGN = 8, 16


def _spec(
    keys,
    codes,
    dtypes=None,
    bits=None,
    multiple=8,
    bounds=None,
    left=False,
    mark=-1,
    want=3,
    max_bytes=1 << 30,
):
    n = len(keys)
    return (
        tuple(keys),
        tuple(codes),
        tuple(dtypes or (None,) * n),
        tuple(bits or (0,) * n),
        multiple,
        bounds,
        left,
        mark,
        want,
        max_bytes,
        torch.Tensor,
    )


def _collate_dicts(samples, keys, codes, **options):
    return native.collate_dicts(samples, _spec(keys, codes, **options))


def test_collate_dicts_pads_every_key_by_its_spec():
    samples = [
        {"a": [1, 2, 3], "b": torch.tensor([1.5], dtype=torch.float16)},
        {"a": [4], "b": torch.tensor([2.5, 3.5], dtype=torch.float16)},
    ]
    got = _collate_dicts(
        samples,
        "ab",
        (ROW_LIST | ALWAYS, ROW_TENSOR | ALWAYS),
        dtypes=(None, torch.float16),
        bits=(7, 0xBC00),
        multiple=2,
        mark=1,
    )  # 7 for the ints, float16 -1.0
    out, mask, lengths, real, total, shapes = got
    assert list(out) == ["a", "b"]
    assert out["a"].tolist() == [[1, 2, 3, 7], [4, 7, 7, 7]]
    assert out["b"].dtype == torch.float16 and out["b"].tolist() == [[1.5, -1.0], [2.5, 3.5]]
    assert mask.tolist() == [[True, False], [True, True]] and lengths.tolist() == [1, 2]
    assert (real, total) == (7, 12) and shapes == [("a", (2, 4)), ("b", (2, 2))]
    out, mask, lengths, *_ = _collate_dicts(
        samples, "ab", (ROW_LIST, ROW_TENSOR), dtypes=(None, torch.float16), want=1
    )
    assert mask is None and lengths.tolist() == [3, 1]  # the first padded key's, as asked


def test_collate_dicts_reports_a_batch_that_does_not_match_its_spec():
    keys, codes = "a", (ROW_LIST,)
    one = [{"a": [1, 2]}, {"a": [3]}]
    assert len(_collate_dicts(one, keys, codes)) == 6
    declined = [
        [{"a": [1, 2]}, {"a": [3], "b": [1]}],  # an extra key
        [{"a": [1, 2]}, {"b": [3]}],  # another key
        [{"b": [1, 2]}, {"b": [3]}],  # sample 0 without the spec's keys
        [{"a": [1, 2]}, collections.OrderedDict(a=[3])],  # another mapping type
        [{"a": [1, 2]}, {"a": [3, True]}],  # a bool among the ints
        [{"a": [1, 2]}, {"a": torch.tensor([3])}],  # a list, then a tensor
        [{"a": torch.tensor([3])}, {"a": torch.tensor([3])}],  # tensors where the spec has lists
        [{"a": [1, 2]}, {"a": [4, 5, 2**63]}],  # past int64
        [{"a": [1, 2]}, [("a", [3])]],  # not a dict
    ]
    for samples in declined:
        assert _collate_dicts(samples, keys, codes) is None, samples
    assert _collate_dicts(one, keys, codes, max_bytes=63) is None  # a copy big enough for threads
    assert _collate_dicts(one, keys, codes, bounds=np.array([1], np.int64)) is None  # over the plan
    param = [{"a": torch.nn.Parameter(torch.ones(2))}, {"a": torch.nn.Parameter(torch.ones(1))}]
    assert _collate_dicts(param, keys, (ROW_TENSOR,), dtypes=(torch.float32,)) is None  # exactly torch.Tensor
    floats = [{"a": torch.ones(2)}, {"a": torch.ones(1)}]
    assert _collate_dicts(floats, keys, (ROW_TENSOR,), dtypes=(torch.float64,)) is None  # another dtype
    equal = [{"a": [1, 2]}, {"a": [4, 5]}]
    assert _collate_dicts(equal, keys, codes, mark=0) is None  # the mask's key is stacked
    assert (
        _collate_dicts(equal, keys, codes, bounds=np.array([1], np.int64)) is None
    )  # stacked, over the plan
    numbers = [{"a": [1], "y": 1}, {"a": [2], "y": 2.5}]
    assert _collate_dicts(numbers, "ay", (ROW_LIST, INT)) is None  # numbers of two kinds
    with pytest.raises(ValueError, match="one code, dtype and fill per key"):
        native.collate_dicts(one, (("a",), (), (), (), 8, None, False, -1, 3, 64, torch.Tensor))


def test_collate_dicts_stacks_a_key_of_one_length_that_is_no_sequence():
    """A key whose rows share one length and that is not declared a sequence is stacked
    (no padding, no counts, no shape); the mask and lengths come from the first padded
    key, and there are none when no key is padded."""
    codes = (ROW_LIST, ROW_LIST | ALWAYS)
    out, mask, lengths, real, total, shapes = _collate_dicts(
        [{"a": [1, 2], "b": [7]}, {"a": [4, 5], "b": [8, 9]}], "ab", codes, multiple=4
    )
    assert out["a"].tolist() == [[1, 2], [4, 5]] and out["b"].tolist() == [[7, 0, 0, 0], [8, 9, 0, 0]]
    assert (
        lengths.tolist() == [1, 2] and mask is not None and (real, total, shapes) == (3, 8, [("b", (2, 4))])
    )
    out, mask, lengths, real, total, shapes = _collate_dicts(
        [{"a": [1, 2]}, {"a": [4, 5]}], "a", codes[:1], multiple=4, left=True
    )
    assert list(out) == ["a"] and out["a"].tolist() == [[1, 2], [4, 5]] and mask is None and lengths is None
    assert (real, total, shapes) == (0, 0, [])


def test_collate_dicts_gives_an_aligned_key_the_mask_keys_width():
    """A stacked key marked ALIGN whose one length is the mask key's one length is padded
    to the mask key's width (an attention_mask beside declared input_ids); another length,
    or no ALIGN, keeps it stacked."""
    samples = [
        {"ids": [1, 2, 3], "m": [1, 1, 1], "f": [5, 5]},
        {"ids": [4, 5, 6], "m": [1, 1, 1], "f": [6, 6]},
    ]
    out, mask, lengths, real, total, shapes = _collate_dicts(
        samples,
        ("ids", "m", "f"),
        (ROW_LIST | ALWAYS, ROW_LIST | ALIGN, ROW_LIST | ALIGN),
        multiple=4,
        left=True,
    )
    assert out["m"].tolist() == [[0, 1, 1, 1], [0, 1, 1, 1]] and out["f"].tolist() == [[5, 5], [6, 6]]
    assert shapes == [("ids", (2, 4)), ("m", (2, 4))] and (real, total) == (12, 16)
    out, *_ = _collate_dicts(samples, ("ids", "m", "f"), (ROW_LIST | ALWAYS, ROW_LIST, ROW_LIST), multiple=4)
    assert out["m"].shape == (2, 3)


def test_collate_dicts_survives_a_key_whose_eq_changes_the_batch():
    """A lookup may run Python code (a colliding key's ==): the values gathered before
    it stay alive and are read as they are after it, never freed under the copy."""

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
        got = _collate_dicts(samples, "a", (ROW_LIST | ALWAYS,), multiple=1)
        if equal:  # found: sample 0's row as it is now
            assert got[0]["a"].tolist() == [[9], [4]]
        else:  # not found: a missing key
            assert got is None
        assert samples == []


def test_collate_dicts_of_a_batch_past_its_stack_scratch():
    """3000 samples of 6 keys: the call's arrays outgrow its 8 KiB stack block and spill
    to the heap, rows of lists and of tensors alike, both exact."""
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
    codes = [ROW_LIST | ALWAYS if j % 2 else ROW_TENSOR | ALWAYS for j in range(6)]
    dtypes = [None if j % 2 else torch.int32 for j in range(6)]
    out, mask, lengths, real, total, shapes = _collate_dicts(samples, keys, codes, dtypes=dtypes, multiple=1)
    for j, k in enumerate(keys):
        n = torch.from_numpy(sizes[:, j])[:, None]
        pos = torch.arange(out[k].shape[1])
        assert torch.equal(out[k], torch.where(pos < n, pos + 1, 0).to(out[k].dtype))
    assert torch.equal(lengths, torch.from_numpy(sizes[:, 0])) and real == sizes.sum()


def test_collate_dicts_holds_the_samples_walked_before_a_lookup():
    """Samples 1.. whose entries are walked are not held until a lookup (which may run
    Python code) comes: then every row read before it is held, so one replaced by that
    code is still read as it was, never freed memory reused for another list."""

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
    got = _collate_dicts(samples, "a", (ROW_LIST | ALWAYS,), multiple=1)
    assert got[0]["a"].tolist() == [[1, 2, 3], [5, 6, 0], [4, 0, 0], [2, 2, 2], [3, 0, 0]]
    assert samples[1]["a"] == [7, 7] and len(junk) == 200


def test_views_past_their_resized_storage_are_never_read():
    """A view whose storage was resized smaller afterwards points past its memory
    (torch's own ops crash on it): the native readers refuse it, and a 0-d label of that
    kind reaches torch.stack in the walk, which raises."""
    base = torch.arange(1 << 16, dtype=torch.float64)
    row, label = base[(1 << 16) - 3 :], base[(1 << 16) - 1]
    base.untyped_storage().resize_(0)
    assert pad_rows_torch([row, torch.ones(2, dtype=torch.float64)]) is None
    bufs = [np.empty(2, np.int64), np.empty(2, np.int64), np.empty(2, np.int64), np.empty(1, np.int64)]
    assert native.describe([torch.ones(2, dtype=torch.float64), row], 1, *bufs)[0] == 1
    assert (
        _collate_dicts(
            [{"ids": [1], "y": label}, {"ids": [2], "y": torch.tensor(2.0, dtype=torch.float64)}],
            ("ids", "y"),
            (ROW_LIST, TENSOR_0D),
            dtypes=(None, torch.float64),
        )
        is None
    )
    from loaders import DynTileCollate

    with pytest.raises(RuntimeError, match="out of bounds"):
        DynTileCollate()(
            [{"ids": [1], "y": label}, {"ids": [2], "y": torch.tensor(2.0, dtype=torch.float64)}]
        )


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_declines_dtypes_numpy_cannot_carry_and_plans_of_other_ranks():
    q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
    assert pad_rows_torch([q, q]) is None
    sub = torch.zeros(3, dtype=torch.uint3)
    assert pad_rows_torch([sub, sub]) is None
    assert pad_rows_torch([[1, 2, 3], [4]], plan=BucketPlan(((8, 16), (8,)))) is None  # a 2-axis plan
    assert pad_rows([[1, 2, 3], [4]], plan=BucketPlan(((8, 16), (8,)))) is None


def test_a_plan_past_int64_pads_on_every_route():
    """A boundary past int64 cannot reach the native kernels; the other routes still pad."""
    plan = BucketPlan((8, 2**64))
    assert pad_rows_torch([[1, 2, 3]], plan=plan) is None
    assert pad_rows([[1, 2, 3]], plan=plan)[0].tolist() == [[1, 2, 3, 0, 0, 0, 0, 0]]
    assert pad_rows([torch.arange(3)], plan=plan)[0].tolist() == [[0, 1, 2, 0, 0, 0, 0, 0]]
    from loaders import DynTileCollate

    out = DynTileCollate(plan)([{"a": [1, 2, 3]}, {"a": [4]}])
    assert out["a"].shape == (2, 8) and out["lengths"].tolist() == [3, 1]


def test_native_bounds_are_checked():
    for bad in (
        np.array([4.0, 8.0]),
        np.array([4, 8], np.uint64),
        np.array([8, 4], np.int64),
        np.array([4, 4], np.int64),
        np.array([], np.int64),
    ):
        with pytest.raises(
            ValueError, match="bounds should be a non-empty buffer of int64 boundaries, ascending"
        ):
            native.pad_rows([[1]], 1, bad, 0, False, 0, 64)
    assert native.pad_rows([[]], 1, None, 0, False, 3, 64)[0].shape == (1, 0)  # T == 0: nothing to write
    assert native.pad_rows([[], []], 1, None, 0, True, 3, 64)[2].shape == (2, 0)


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
            _collate_dicts(samples, "ab", (ROW_LIST, ROW_LIST))


def test_flags_are_read_as_truth_values():
    batch, lengths, mask, *_ = pad_rows_torch([[1, 2], [3]], lengths=2, mask=0)
    assert lengths.tolist() == [2, 1] and mask is None
    assert pad_rows_torch([[1]], lengths="yes", mask=[1])[2].tolist() == [
        [True, False, False, False, False, False, False, False]
    ]
