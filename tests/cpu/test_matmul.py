"""dyntile.matmul against numpy.matmul computed in float64.

Error bound: the standard forward bound for a length-K dot product,
|got - exact| <= c * (K + 2) * eps * (|A| @ |B|), elementwise.
"""

import itertools
import os
import sys
import tracemalloc
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dyntile
from dyntile.cpu import gemm
from dyntile.linalg import matmul, matmul_shapes
from forking import check_in_forked_child

DTYPES = [np.float32, np.float64]


def reference(a, b):
    return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))


def assert_matmul_close(got, a, b, dtype=None):
    a, b = np.asarray(a), np.asarray(b)
    dtype = np.dtype(dtype or np.result_type(a, b))
    exact = reference(a, b)
    k = a.shape[-1]
    scale = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    bound = 2 * (k + 2) * np.finfo(dtype).eps * scale + np.finfo(dtype).tiny
    got = np.asarray(got)
    assert got.shape == exact.shape
    assert got.dtype == dtype
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= bound), (
        f"max error {err.max()} over bound at {np.unravel_index(np.argmax(err - bound), err.shape)}"
    )


def rand(rng, shape, dtype):
    """Random values away from zero (a zero result would hide a missing term)."""
    x = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return x.astype(dtype)


@pytest.fixture(autouse=True)
def threads_mean_threads(monkeypatch):
    """Small test products run on the thread count they ask for (no small-size cutoff)."""
    monkeypatch.setattr(dyntile.linalg, "PARALLEL_FLOPS", 0)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


#: every ISA this CPU runs, and AVX-512 once more with the small-product direct
#: kernels off (products these tests make small then take the packed kernels)
ISA_ROUTES = gemm.available_isas() + (["avx512-packed"] if "avx512" in gemm.available_isas() else [])


@pytest.fixture(params=ISA_ROUTES)
def isa(request):
    name = request.param.replace("-packed", "")
    previous = gemm._set_isa(name)
    direct = gemm._set_direct_flops(0) if request.param.endswith("-packed") else None
    yield name
    gemm._set_isa(previous)
    if direct is not None:
        gemm._set_direct_flops(direct)


# ------------------------------------------------------------------- values and shapes


@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_sizes_match_numpy(rng, dtype):
    sizes = (1, 7, 33, 127, 257)
    for m, k, n in itertools.product(sizes, sizes, sizes):
        if m * k * n > 257 * 257 * 33:
            continue
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        assert_matmul_close(matmul(a, b), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "mkn",
    [(1, 1, 1), (16, 32, 32), (350, 300, 70), (3, 5, 4100), (29, 513, 65), (60, 2100, 70), (3, 2100, 100)],
)
def test_every_isa_across_block_edges(rng, isa, dtype, mkn):
    """Sizes below, at and past MR/NR and the MC/KC/NC cache blocks, each micro-kernel."""
    m, k, n = mkn
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    assert gemm.isa() == isa
    assert_matmul_close(matmul(a, b, threads=1), a, b)
    assert_matmul_close(matmul(a, b, threads=2), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_threads_few_rows(rng, isa, dtype):
    """More threads than MR panels splits the jr loop; rows past MC still fit the buffers."""
    bs = gemm.blocking_table()[isa, np.dtype(dtype).name]
    threads = 24
    m = (2 * threads - 1) * bs["mr"] - 1  # fewer MR panels than 2 per thread
    a, b = rand(rng, (m, 37), dtype), rand(rng, (37, 3 * bs["nr"] + 1), dtype)
    assert m > bs["mc"]
    assert_matmul_close(matmul(a, b, threads=threads), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [2, 3])
def test_tall_products_in_row_slabs(rng, isa, dtype, threads):
    """Products with SLAB_ROWS rows per thread run as one-thread products on slabs of
    rows: odd row counts, transposed, reversed and sliced operands, strided out, batches."""
    slab_rows, per_thread = gemm.ROW_SLABS
    m = per_thread * threads * slab_rows + 7  # not a multiple of MR
    assert gemm.row_slab_count(m, threads) >= threads
    a, b = rand(rng, (m, 37), dtype), rand(rng, (37, 45), dtype)
    for x in (a, np.asfortranarray(a), a[::-1]):
        assert_matmul_close(matmul(x, b, threads=threads), x, b)
    wide = rand(rng, (2 * m, 90), dtype)[::2, ::2]  # both strides of A past one element
    assert_matmul_close(matmul(wide[:, :37], b.T[:, :37].T, threads=threads), wide[:, :37], b)
    out = np.full((m, 2 * 45), np.nan, dtype)[:, ::2]
    assert matmul(a, b, out=out, threads=threads) is out
    assert_matmul_close(out, a, b)
    batch = rand(rng, (3, 1, m, 11), dtype)
    mats = rand(rng, (2, 11, 19), dtype)
    assert_matmul_close(matmul(batch, mats, threads=threads), batch, mats)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vector_products_every_layout(rng, isa, dtype):
    """m == 1 / n == 1 (GEMV): contiguous rows, contiguous columns, neither; batched."""
    mat = rand(rng, (70, 301), dtype)
    vec = rand(rng, (2, 301), dtype)
    for m in (mat, np.asfortranarray(mat), mat[:, ::-1], mat[::2, ::3]):
        for v in (vec[0, : m.shape[1]], vec[:, : m.shape[1]].T[:, 1], vec[0, ::-1][: m.shape[1]]):
            assert_matmul_close(matmul(m, v), m, v)
            assert_matmul_close(matmul(v, m.T), v, m.T)
            assert_matmul_close(matmul(v[None, :], m.T), v[None, :], m.T)
            assert_matmul_close(matmul(m, v[:, None]), m, v[:, None])
    batch = rand(rng, (5, 1, 301), dtype)
    assert_matmul_close(matmul(batch, mat.T, threads=2), batch, mat.T)
    assert_matmul_close(matmul(mat, batch.transpose(0, 2, 1), threads=2), mat, batch.transpose(0, 2, 1))
    out = np.full((5, 70, 4), np.nan, dtype)[..., 1]  # strided result rows
    matmul(mat, batch[:, 0, :, None], out=out[..., None])
    assert_matmul_close(out[..., None], mat, batch[:, 0, :, None])


@pytest.mark.parametrize("dtype", DTYPES)
def test_register_block_sizes_exactly(rng, isa, dtype):
    bs = gemm.blocking_table()[isa, np.dtype(dtype).name]
    for m, n in [(bs["mr"], bs["nr"]), (bs["mr"] - 1, bs["nr"] + 1), (2 * bs["mr"], 2 * bs["nr"] - 1)]:
        a, b = rand(rng, (max(m, 1), 9), dtype), rand(rng, (9, n), dtype)
        assert_matmul_close(matmul(a, b), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_edge_row_count(rng, isa, dtype):
    """Each rows-r edge kernel (1 <= r < MR), overwriting and accumulating (k > KC)."""
    bs = gemm.blocking_table()[isa, np.dtype(dtype).name]
    for rows in range(1, bs["mr"]):
        for k in (5, bs["kc"] + 3):
            a, b = rand(rng, (bs["mr"] + rows, k), dtype), rand(rng, (k, 2 * bs["nr"]), dtype)
            assert_matmul_close(matmul(a, b), a, b)
            c = np.full((bs["mr"] + rows, 4 * bs["nr"]), np.nan, dtype)[:, ::2]  # strided C
            matmul(a, b, out=c)
            assert_matmul_close(c, a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_operands(rng, dtype):
    base_a = rand(rng, (90, 70), dtype)
    base_b = rand(rng, (80, 60), dtype)
    views = [
        (base_a[:33, :41], base_b[:41, :29]),  # sliced, row-major
        (base_a[:41, :33].T, base_b[:29, :41].T),  # transposed
        (base_a[::2, 1::2][:33, :30], base_b[::2, ::-2][:30]),  # stepped, negative
        (base_a[::-1, ::-1][:20, :50], np.asfortranarray(base_b[:50, :17])),
        (base_a[5, :40], base_b[:40, 3]),  # 1-D @ 1-D, strided
        (base_a[:, 3][:60], base_b[::-1][:60, :7]),  # strided vector @ matrix
    ]
    for a, b in views:
        assert_matmul_close(matmul(a, b), a, b)


def test_unaligned_byte_swapped_and_odd_stride_operands(rng):
    rec = np.zeros((12, 9), dtype=[("x", "<f4"), ("pad", "u1")])  # 5-byte element stride
    rec["x"] = rand(rng, (12, 9), np.float32)
    a = rec["x"]
    raw = np.zeros(9 * 7 * 8 + 1, np.uint8)
    b = np.frombuffer(raw.data, dtype="<f8", count=63, offset=1).reshape(9, 7)  # unaligned
    b = np.array(b)  # a writable copy that is aligned, for the reference below
    b_unaligned = np.frombuffer(raw.data, dtype="<f8", count=63, offset=1).reshape(9, 7)
    raw[1:] = b.view(np.uint8).ravel()
    assert not b_unaligned.flags.aligned and a.strides[1] % a.itemsize
    assert_matmul_close(matmul(a, b_unaligned), a, b)
    big_endian = rand(rng, (9, 4), np.float32).astype(">f4")
    assert_matmul_close(matmul(a, big_endian), a, big_endian.astype(np.float32))


def _peak_bytes(fn) -> int:
    """The most memory NumPy (and anything else traced) held at once while ``fn`` ran."""
    fn()  # first-call caches do not count
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_views_are_read_without_copies(rng):
    """Transposed and negative-stride operands are read where they are: a product of
    views holds no more memory than the same product of contiguous copies (its output),
    on the 2-D entry and on the batched path; a copy of an operand would add its bytes."""
    a = rand(rng, (600, 500), np.float32)[::-1].T
    b = rand(rng, (700, 1200), np.float32)[:, ::2].T[::-1]
    a3 = np.stack([a.copy(), a.copy()])[:, ::-1]
    for x, y in ((a, b), (a3, b)):
        assert not (x.flags.c_contiguous or y.flags.c_contiguous)
        assert_matmul_close(matmul(x, y), x, y)
        views = _peak_bytes(lambda x=x, y=y: matmul(x, y))
        contiguous = _peak_bytes(lambda x=x, y=y: matmul(np.ascontiguousarray(x), np.ascontiguousarray(y)))
        copies = np.ascontiguousarray(x).nbytes + np.ascontiguousarray(y).nbytes
        assert views <= contiguous - copies + (64 << 10), (views, contiguous, copies)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((2, 1, 5, 7), (3, 7, 4)),
        ((5, 7), (4, 7, 3)),
        ((7,), (2, 7, 3)),
        ((2, 3, 7), (7,)),
        ((1, 4, 6), (3, 1, 6, 2)),
    ],
)
def test_broadcast_batches(rng, dtype, a_shape, b_shape):
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    assert_matmul_close(matmul(a, b), a, b)
    assert_matmul_close(matmul(a, b, threads=2), a, b)


def test_threads_is_a_cap_and_small_products_use_one(rng, monkeypatch):
    from dyntile.threads import max_threads

    monkeypatch.setattr(dyntile.linalg, "PARALLEL_FLOPS", 1 << 23)
    seen, asked = [], []
    real = dyntile.linalg._KERNELS[np.dtype(np.float64)]
    monkeypatch.setitem(
        dyntile.linalg._KERNELS, np.dtype(np.float64), lambda *args: seen.append(args[-1]) or real(*args)
    )
    real_check = dyntile.linalg._check_threads
    monkeypatch.setattr(
        dyntile.linalg,
        "_check_threads",
        lambda threads, flops: asked.append((threads, real_check(threads, flops))) or asked[-1][1],
    )
    small, big = rand(rng, (8, 8), np.float64), rand(rng, (300, 300), np.float64)
    matmul(small, small, threads=2)  # 2-D fast entry, under PARALLEL_FLOPS: one thread, nothing asked
    matmul(small[None], small, threads=2)  # general path
    matmul(big, big, threads=2)  # fast entry
    matmul(big[None], big, threads=3)  # general path
    matmul(big, big)
    assert seen == [1, 3]  # the general path's kernel calls
    assert asked == [(2, 1), (2, 2), (3, 3), (None, max_threads())]


def test_batch_of_many_small_matrices_in_parallel(rng):
    a, b = rand(rng, (37, 9, 11), np.float64), rand(rng, (37, 11, 5), np.float64)
    assert_matmul_close(matmul(a, b, threads=2), a, b)
    a, b = rand(rng, (3, 130, 140), np.float32), rand(rng, (140, 150), np.float32)
    assert_matmul_close(matmul(a, b, threads=2), a, b)


def test_vector_products_return_numpy_kinds(rng):
    a, b = rand(rng, 13, np.float64), rand(rng, 13, np.float64)
    got = matmul(a, b)
    assert isinstance(got, np.float64)
    assert got == pytest.approx(float(a @ b), rel=1e-12)
    assert matmul(rand(rng, (4, 13), np.float32), a.astype(np.float32)).shape == (4,)


def test_lists(rng):
    got = matmul([[1, 2], [3, 4]], [[1.5, 0], [0, 2]])
    np.testing.assert_array_equal(got, [[1.5, 4.0], [4.5, 8.0]])
    assert got.dtype == np.float64


# ------------------------------------------------------------------------ dtypes


@pytest.mark.parametrize(
    "da,db",
    [(np.float32, np.float64), (np.int64, np.float32), (np.int16, np.float32), (np.float32, np.float32)],
)
def test_float_promotion_runs_on_kernel(rng, da, db):
    a, b = rand(rng, (6, 5), np.float64) * 10, rand(rng, (5, 4), np.float64) * 10
    a, b = a.astype(da), b.astype(db)
    got = matmul(a, b)
    assert got.dtype == np.result_type(a, b)
    assert_matmul_close(got, a, b)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.float16, np.complex128])
def test_other_dtypes_follow_numpy(rng, dtype):
    a = rng.integers(0, 3, size=(2, 5, 6)).astype(dtype)
    b = rng.integers(0, 3, size=(6, 3)).astype(dtype)
    expected = np.matmul(a, b)
    got = matmul(a, b)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_object_arrays_follow_numpy():
    """Object arrays go to np.matmul, whose 1-D @ 1-D result is a Python object."""
    from fractions import Fraction

    a = np.array([Fraction(1, 2), Fraction(1, 3), 2], dtype=object)
    assert matmul(a, a) == np.matmul(a, a) == Fraction(1, 4) + Fraction(1, 9) + 4
    m = np.array([[1, 2], [3, 4]], dtype=object)
    np.testing.assert_array_equal(matmul(m, m[0]), np.matmul(m, m[0]))


# -------------------------------------------------------------------------- out=


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_receives_result(rng, dtype):
    a, b = rand(rng, (2, 19, 23), dtype), rand(rng, (23, 17), dtype)
    out = np.full((2, 19, 17), np.nan, dtype)
    assert matmul(a, b, out=out) is out
    assert_matmul_close(out, a, b)
    big = np.full((2, 38, 40), np.nan, dtype)
    view = big[:, ::2, 1:35:2]
    matmul(a, b, out=view)
    assert_matmul_close(view, a, b)
    assert np.isnan(big[:, 1::2]).all()  # nothing written outside the view


def test_out_casts_same_kind(rng):
    a, b = rand(rng, (5, 6), np.float64), rand(rng, (6, 7), np.float64)
    out = np.empty((5, 7), np.float32)
    matmul(a, b, out=out)
    np.testing.assert_allclose(out, reference(a, b), rtol=1e-6)


def test_out_rejected(rng):
    a, b = rand(rng, (5, 6), np.float64), rand(rng, (6, 7), np.float64)
    with pytest.raises(ValueError, match=r"out has shape \(7, 5\).*\(5, 7\)"):
        matmul(a, b, out=np.empty((7, 5)))
    with pytest.raises(TypeError, match="float64.*int64"):
        matmul(a, b, out=np.empty((5, 7), np.int64))
    with pytest.raises(TypeError, match="out should be"):
        matmul(a, b, out=[[0.0] * 7] * 5)
    ro = np.empty((5, 7))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        matmul(a, b, out=ro)


def test_out_aliasing_an_input_rejected(rng):
    sq = rand(rng, (6, 6), np.float64)
    with pytest.raises(ValueError, match="overlaps operand a"):
        matmul(sq, rand(rng, (6, 6), np.float64), out=sq)
    buf = rand(rng, (6, 14), np.float64)
    with pytest.raises(ValueError, match="overlaps operand b"):
        matmul(rand(rng, (6, 6), np.float64), buf[:, :7], out=buf[:, 6:13])
    # interleaved columns of one buffer do not overlap: allowed
    matmul(sq, buf[:, 0::2], out=buf[:, 1::2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize(
    "a_shape,b_shape,out_shape",
    [((3, 4), (4, 5), (2, 3, 5)), ((4,), (4,), (3,)), ((2, 1, 3, 4), (5, 4, 6), (7, 2, 5, 3, 6))],
)
def test_out_may_broadcast_the_batch(rng, dtype, a_shape, b_shape, out_shape):
    """As in NumPy, out's extra leading axes broadcast the operands (every copy written)."""
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    out, expected = np.full(out_shape, -7, dtype), np.full(out_shape, -9, dtype)
    assert matmul(a, b, out=out) is out
    np.matmul(a, b, out=expected)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    if len(a_shape) == 1 and len(b_shape) == 1:
        return  # a scalar product: any out shape is a batch of it
    bad = np.empty(out_shape[:-1] + (out_shape[-1] + 1,), dtype)
    with pytest.raises(ValueError):
        np.matmul(a, b, out=bad)
    with pytest.raises(ValueError, match="only add leading axes"):
        matmul(a, b, out=bad)


def test_out_as_a_one_tuple(rng):
    a, b = rand(rng, (5, 6), np.float64), rand(rng, (6, 7), np.float64)
    out = np.empty((5, 7))
    assert matmul(a, b, out=(out,)) is out
    assert_matmul_close(out, a, b)
    with pytest.raises(ValueError, match="exactly one entry"):
        matmul(a, b, out=(out, out))


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_array_subclasses_follow_numpy():
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    got = matmul(m, m)
    assert type(got) is np.matrix and np.array_equal(got, np.matmul(m, m))
    ma = np.ma.array([[1.0, 2.0], [3.0, 4.0]], mask=[[0, 1], [0, 0]])
    want = np.matmul(ma, ma)
    got = matmul(ma, ma)
    assert type(got) is type(want) and np.array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want))


def test_torch_out_checked_like_inputs(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rand(rng, (4, 5), np.float32))
    b = torch.from_numpy(rand(rng, (5, 3), np.float32))
    with pytest.raises(TypeError, match="out requires grad"):
        matmul(a, b, out=torch.zeros(4, 3, requires_grad=True))
    c = torch.from_numpy(rand(rng, (4, 4), np.complex64))
    out = torch.zeros(4, 4, dtype=torch.complex64).conj()  # memory holds the conjugate
    assert matmul(c, c, out=out) is out
    assert out.is_conj() and torch.allclose(out, c @ c)
    with pytest.raises(ValueError, match="overlaps operand a"):
        matmul(c, c, out=c.conj())


def test_torch_only_dtypes_checked_and_promoted_like_others():
    """bfloat16 runs on torch.matmul, after the same checks as every dtype."""
    torch = pytest.importorskip("torch")
    x = torch.ones(4, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="overlaps operand a"):
        matmul(x, x, out=x)
    with pytest.raises(ValueError, match=r"out has shape \(2, 2\)"):
        matmul(x, x, out=torch.empty(2, 2, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="threads"):
        matmul(x, x, threads="x")
    grad = matmul(x.clone().requires_grad_(), x)  # torch.matmul records autograd
    assert grad.requires_grad and grad.dtype == torch.bfloat16
    with pytest.raises(TypeError, match="out requires grad"):
        matmul(x, x, out=torch.zeros(4, 4, dtype=torch.bfloat16, requires_grad=True))
    with pytest.raises(ValueError, match="does not have enough dimensions"):
        matmul(torch.tensor(2.0, dtype=torch.bfloat16), x)
    with pytest.raises(ValueError, match="not aligned"):
        matmul(x, torch.ones(3, 4, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="cannot write"):
        matmul(x, x, out=torch.empty(4, 4, dtype=torch.int32))
    mixed = matmul(x, torch.full((4, 2), 0.5))  # promoted, as torch.promote_types says
    assert mixed.dtype == torch.float32 and torch.equal(mixed, torch.full((4, 2), 2.0))
    out = torch.empty(3, 4, 4, dtype=torch.bfloat16)
    assert matmul(x, x, out=out) is out and torch.equal(out, torch.full((3, 4, 4), 4.0, dtype=torch.bfloat16))


def test_torch_only_out_of_numpy_operands_gets_values_not_bits():
    """NumPy operands into a bfloat16/float8 out: the int8 product 2 was written into the
    int16 carrier as bits (1.8e-40); now NumPy's product is cast into out by torch."""
    torch = pytest.importorskip("torch")
    out = torch.zeros(2, 2, dtype=torch.bfloat16)
    assert matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), out=out) is out
    assert torch.equal(out, torch.full((2, 2), 2.0, dtype=torch.bfloat16))
    out8 = torch.zeros(2, 2, dtype=torch.float8_e4m3fn)
    matmul(np.ones((2, 2), bool), np.ones((2, 2), bool), out=out8)
    assert out8.float().tolist() == [[1.0, 1.0], [1.0, 1.0]]
    wide = torch.zeros(3, 2, 2, dtype=torch.bfloat16)  # extra leading axes broadcast
    matmul(np.ones((2, 2)), [[1, 2], [3, 4]], out=wide)
    assert torch.equal(wide, torch.tensor([[4.0, 6.0], [4.0, 6.0]], dtype=torch.bfloat16).expand(3, 2, 2))
    with pytest.raises(
        TypeError, match="cannot write the torch.complex128 result into out of dtype torch.bfloat16"
    ):
        matmul(np.ones((2, 2), np.complex64), np.ones((2, 2)), out=out)
    with pytest.raises(ValueError, match="out has shape"):
        matmul(np.ones((2, 3)), np.ones((3, 4)), out=out)
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="overlaps operand a"):
        matmul(
            a, np.ones((2, 2), np.float32), out=torch.from_numpy(a.view(np.int16)[:, :2]).view(torch.bfloat16)
        )


def test_torch_only_tensor_with_reversed_or_byteswapped_array():
    """torch.as_tensor refuses negative strides and swapped byte order; the product is
    taken all the same, as with a float32 tensor."""
    torch = pytest.importorskip("torch")
    t = torch.ones(2, 3, dtype=torch.bfloat16)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    for operand in (x[::-1], x.astype(">f4"), x[::-1, ::-1].astype(">f4")):
        got = matmul(t, operand)
        assert got.dtype == torch.float32
        assert torch.equal(
            got, torch.matmul(t.float(), torch.from_numpy(np.ascontiguousarray(operand, np.float32)))
        )
    assert torch.equal(matmul(t, x[:, ::-1]), torch.tensor([[9.0, 6.0], [9.0, 6.0]]))  # rows 1 0 | 3 2 | 5 4


# --------------------------------------------------------------------- zero sizes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((0, 3), (3, 4)),
        ((3, 4), (4, 0)),
        ((3, 0), (0, 4)),
        ((2, 0, 3, 4), (4, 5)),
        ((0,), (0,)),
        ((5, 0), (0,)),
    ],
)
def test_zero_size(dtype, a_shape, b_shape):
    a, b = np.ones(a_shape, dtype), np.ones(b_shape, dtype)
    expected = np.matmul(a, b)
    out = np.full(np.shape(expected), np.nan, dtype)
    got = matmul(a, b, out=out)
    np.testing.assert_array_equal(got, expected)  # k == 0: zeros, even over NaN
    np.testing.assert_array_equal(matmul(a, b), expected)


# ---------------------------------------------------------------------- NaN, inf


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_propagate_like_numpy(rng, dtype):
    a, b = rand(rng, (20, 40), dtype), rand(rng, (40, 36), dtype)
    a[3, 7] = np.nan
    a[5, 2] = np.inf
    b[2, 30] = 0.0  # inf * 0 -> NaN in C[5, 30]
    b[11, 8] = -np.inf  # column 8 goes -inf or NaN
    a[9, 11] = 0.0
    with np.errstate(invalid="ignore"):
        expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    for threads in (1, 2):
        got = matmul(a, b, threads=threads)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected))


# ------------------------------------------------------------------------- errors


def test_shape_errors_match_numpy():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        matmul(np.ones((2, 3)), np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        matmul(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="does not have enough dimensions"):
        matmul(np.float64(2.0), np.ones((2, 2)))
    with pytest.raises(ValueError, match="Input operand 1"):
        matmul(np.ones((2, 2)), 3.0)
    with pytest.raises(ValueError, match=r"do not broadcast.*\(2,\) vs \(3,\)"):
        matmul(np.ones((2, 4, 3)), np.ones((3, 3, 5)))
    for bad in (np.ones((2, 3)), np.ones(3)):  # numpy agrees these are errors
        with pytest.raises(ValueError):
            np.matmul(bad, np.ones((4, 5)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="threads"):
        matmul(np.ones((2, 2)), np.ones((2, 2)), threads=0)
    for bad in ("2", 1.5, [2], True):
        with pytest.raises(TypeError, match="threads should be a positive integer or None"):
            matmul(np.ones((2, 2)), np.ones((2, 2)), threads=bad)
    big = np.ones((300, 300))  # any count is capped at MAX_THREADS, never overflows
    np.testing.assert_array_equal(matmul(big, big, threads=2**40), big @ big)
    with pytest.raises(TypeError, match="dtype <U1"):
        matmul(np.array([["a"]]), np.ones((1, 1)))
    with pytest.raises(ValueError, match="operand b is not a rectangular"):
        matmul(np.ones((2, 2)), [[1.0, 2.0], [3.0]])


def test_matmul_shapes_helper():
    s = matmul_shapes((5, 1, 4, 3), (2, 3, 7))
    assert (s.batch, s.m, s.k, s.n, s.out_shape) == ((5, 2), 4, 3, 7, (5, 2, 4, 7))
    assert matmul_shapes((3,), (3,)).out_shape == ()
    assert matmul_shapes((2, 3), (3,)).out_shape == (2,)
    assert matmul_shapes((3,), (4, 3, 2)).out_shape == (4, 2)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        matmul_shapes((2, 3), (4, 2))


# ------------------------------------------------------------------- kernel in use


def test_compiled_kernel_is_used(rng, monkeypatch):
    import importlib.machinery

    assert gemm.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert gemm.isa() in gemm.available_isas()

    def forbidden(*args, **kwargs):
        raise AssertionError("numpy.matmul called for a float32 product")

    monkeypatch.setattr(np, "matmul", forbidden)
    a, b = rand(rng, (9, 8), np.float32), rand(rng, (8, 7), np.float32)
    got = matmul(a, b)
    monkeypatch.undo()
    assert_matmul_close(got, a, b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_does_not_hang(rng):
    """GNU OpenMP's pool does not survive fork: a child (e.g. a DataLoader worker)
    forked after a threaded product must still finish its own products."""
    a, b = rand(rng, (300, 200), np.float64), rand(rng, (200, 250), np.float64)
    expected = matmul(a, b, threads=2)
    check_in_forked_child(
        lambda: (
            np.array_equal(matmul(a, b, threads=2), expected)
            and np.array_equal(matmul(a[None], b, threads=2)[0], expected)
        ),
        "matmul",
    )


def test_set_isa_rejects_unknown():
    with pytest.raises(ValueError, match="unknown GEMM ISA"):
        gemm._set_isa("sse9")


def test_cuda_operands_go_to_dyntile_cuda(monkeypatch):
    class DeviceArray:
        __cuda_array_interface__ = {}

    calls = []
    fake = types.ModuleType("dyntile.cuda")
    fake.matmul = lambda a, b, out=None: calls.append((a, b, out)) or "device result"
    monkeypatch.setitem(sys.modules, "dyntile.cuda", fake)
    a, b = DeviceArray(), DeviceArray()
    assert matmul(a, b) == "device result"
    assert calls == [(a, b, None)]
    with pytest.raises(TypeError, match="mix CUDA device and host"):
        matmul(a, np.ones((2, 2)))


# --------------------------------------------------------------------------- torch


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rand(rng, (3, 12, 10), np.float32))
    b = torch.from_numpy(rand(rng, (14, 10), np.float32)).T  # non-contiguous
    got = matmul(a, b)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert_matmul_close(got.numpy(), a.numpy(), b.numpy())
    out = torch.empty(3, 12, 14)
    assert matmul(a, b, out=out) is out
    assert_matmul_close(out.numpy(), a.numpy(), b.numpy())
    assert isinstance(matmul(a[0, 0], b[:, 0]), torch.Tensor)
    with pytest.raises(TypeError, match="requires grad"):
        matmul(a.requires_grad_(), b)
    bf = matmul(torch.ones(2, 3, dtype=torch.bfloat16), torch.ones(3, 4, dtype=torch.bfloat16))
    assert bf.dtype == torch.bfloat16 and torch.equal(bf, torch.full((2, 4), 3.0, dtype=torch.bfloat16))


# ---------------------------------------------------------------------- properties


@st.composite
def strided_operands(draw):
    dtype = draw(st.sampled_from(DTYPES))
    m, k, n = (draw(st.integers(0, 40)) for _ in range(3))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def view(shape):
        steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in shape]
        base = rand(rng, tuple(abs(s) * d + 1 for s, d in zip(steps, shape)), dtype)
        x = base[tuple(slice(None, None, s) for s in steps)][tuple(slice(0, d) for d in shape)]
        if len(shape) >= 2 and draw(st.booleans()):
            x = np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)  # column-major core
        return x

    return view(batch + (m, k)), view((k, n)), draw(st.sampled_from([1, 2]))


@settings(max_examples=40, deadline=None)
@given(strided_operands())
def test_property_matches_numpy_for_any_strides(ops):
    a, b, threads = ops
    assert_matmul_close(matmul(a, b, threads=threads), a, b)
