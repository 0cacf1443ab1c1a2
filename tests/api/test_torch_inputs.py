"""CPU torch tensors in -> torch tensors out, compared with torch's own pad_sequence."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.nn.utils.rnn import pad_sequence  # noqa: E402

import dyntile as dt  # noqa: E402
from dyntile import tensor_reader  # noqa: E402


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.int64, torch.bfloat16, torch.float16, torch.bool, torch.uint8]
)
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("native", [True, False])  # 1-D rows read natively, or gathered by torch.cat
@pytest.mark.parametrize("axes", [None, 0])  # axes=0: read as N-D tensors, tensor by tensor
def test_pad_batch_matches_pad_sequence(dtype, side, native, axes):
    g = torch.Generator().manual_seed(0)
    seqs = [
        (torch.randn(int(n), generator=g) * 10).to(dtype) for n in torch.randint(0, 40, (9,), generator=g)
    ]
    seqs[3] = seqs[3].flip(0)  # negative-stride-like view
    seqs[4] = torch.randn(80, generator=g).to(dtype)[::2]  # strided view
    fill = 1
    with tensor_reader.use_native(native):
        batch, lengths = dt.pad_batch(seqs, multiple=1, fill=fill, side=side, axes=axes)
    ref = pad_sequence(seqs, batch_first=True, padding_value=fill, padding_side=side)
    assert isinstance(batch, torch.Tensor) and batch.dtype == dtype
    assert torch.equal(batch, ref)
    assert torch.equal(lengths, torch.tensor([len(s) for s in seqs]))


def test_bfloat16_fill_is_encoded_in_bfloat16():
    batch, _ = dt.pad_batch([torch.ones(2, dtype=torch.bfloat16)], multiple=4, fill=-1.5)
    assert batch.tolist() == [[1.0, 1.0, -1.5, -1.5]]


def test_tensor_2d_and_tile_round_trip():
    x = torch.randn(3, 17, 9)
    t = dt.tile(x, (8, 4))
    assert isinstance(t, torch.Tensor) and t.shape == (3, 3, 3, 8, 4)
    assert torch.equal(dt.untile(t, (17, 9)), x)
    specs = [torch.randn(n, 5) for n in (3, 11)]
    batch, lengths = dt.pad_batch(specs)
    assert batch.shape == (2, 16, 5)
    assert torch.equal(batch[1, :11], specs[1]) and torch.all(batch[0, 3:] == 0)


def test_mixed_tensor_and_numpy_and_requires_grad():
    a = torch.arange(3, dtype=torch.int32)
    b = np.arange(5, dtype=np.int32)
    batch, _ = dt.pad_batch([a, b], multiple=1)
    assert isinstance(batch, torch.Tensor) and batch.tolist() == [[0, 1, 2, 0, 0], [0, 1, 2, 3, 4]]
    w = torch.ones(3, requires_grad=True)
    batch, _ = dt.pad_batch([w], multiple=4)
    assert batch.tolist() == [[1, 1, 1, 0]]


@pytest.mark.parametrize("token", [torch.bfloat16, torch.float8_e4m3fn])
def test_torch_only_dtypes_take_lists_by_value(token):
    """bfloat16 travels as int16 bits: a list joins by its values (1 -> 1.0), never
    as bit patterns; values the dtype would change, and NumPy arrays, are refused."""
    x = torch.tensor([1.5, -2.0], dtype=token)
    batch, _ = dt.pad_batch([x, [1, 2, 0.5], [], [True]], multiple=1)
    assert batch.dtype == token
    assert batch.float().tolist() == [[1.5, -2.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    with pytest.raises(
        TypeError, match=r"sample 1 \(a list\) holds values that torch.* cannot store exactly, e.g. .*1.1"
    ):
        dt.pad_batch([x, [1.1]])
    for other in (np.ones(2, np.int16), np.ones(2, np.float32)):
        with pytest.raises(TypeError, match="sample 1 is a NumPy .* array, but sample 0 is a torch.* tensor"):
            dt.pad_batch([x, other])
        with pytest.raises(TypeError, match="sample 0 is a NumPy .* array, but sample 1 is a torch.* tensor"):
            dt.pad_batch([other, x])


def test_torch_only_dtypes_cast_by_value_to_dtype():
    x = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    batch, _ = dt.pad_batch([x, [3.0]], dtype=np.float32, multiple=1)
    assert batch.dtype == torch.float32 and batch.tolist() == [[1.5, -2.0], [3.0, 0.0]]
    batch, _ = dt.pad_batch([x, np.ones(1, np.float64)], dtype=np.float64, multiple=1)
    assert batch.tolist() == [[1.5, -2.0], [1.0, 0.0]]
    with pytest.raises(
        TypeError, match="sample 0 has dtype torch.bfloat16, which cannot be cast to dtype=int16"
    ):
        dt.pad_batch([x], dtype=np.int16)


def test_torch_out_and_errors():
    out = torch.empty(2, 8, dtype=torch.int64)
    res, _ = dt.pad_batch([torch.arange(3), torch.arange(5)], out=out)
    assert res is out and out[1].tolist() == [0, 1, 2, 3, 4, 0, 0, 0]
    with pytest.raises(ValueError, match="same number of dimensions"):
        dt.pad_batch([torch.ones(3), torch.ones(2, 2)])
    with pytest.raises(TypeError, match="sparse|strided"):
        dt.pad_batch([torch.ones(3).to_sparse()])


def test_out_requiring_grad_is_refused():
    """An out= that requires grad would be written in place behind autograd's back
    (matmul refuses it too): every route says so, and leaves out untouched."""
    out = torch.zeros(2, 8, requires_grad=True)
    calls = [
        lambda: dt.pad_batch([torch.ones(3), torch.ones(5)], out=out),  # the tensor route
        lambda: dt.pad_batch(
            [torch.ones(3, 1), torch.ones(5, 1)], out=torch.zeros(2, 8, 1, requires_grad=True)
        ),
        lambda: dt.pad_batch([np.ones(3, np.float32), np.ones(5, np.float32)], out=out),
        lambda: dt.pad_batch([[1.0, 2.0], [3.0]], out=out),  # lists of numbers
        lambda: dt.pad_to(torch.ones(3), (8,), out=out[0]),
        lambda: dt.tile(torch.ones(2, 3), (2, 4), out=torch.zeros(1, 1, 2, 4, requires_grad=True)),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"out requires grad; .*out\.detach\(\)"):
            call()
    assert not out.detach().any()
    batch, _ = dt.pad_batch([torch.ones(3), torch.ones(5)], out=out.detach())  # a detached view is fine
    assert batch.sum() == 8


@pytest.mark.parametrize(
    "make",
    [lambda x: x.to_sparse(), lambda x: x.to_sparse_csr(), lambda x: torch.empty(x.shape, device="meta")],
    ids=["coo", "csr", "meta"],
)
def test_matmul_names_sparse_and_meta_tensors(make):
    """matmul takes dense CPU tensors; sparse and meta ones get a TypeError naming the
    operand (or out), as pad_batch names its samples, not torch's own conversion error."""
    x = torch.ones(3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse CSR support is in beta
        odd = make(x)
    with pytest.raises(TypeError, match="matmul: operand a is a .*(sparse|device 'meta')"):
        dt.matmul(odd, x)
    with pytest.raises(TypeError, match="matmul: operand b is a .*(sparse|device 'meta')"):
        dt.matmul(np.ones((3, 3), np.float32), odd)
    with pytest.raises(TypeError, match="matmul: out is a .*(sparse|device 'meta')"):
        dt.matmul(x, x, out=odd)
    with pytest.raises(TypeError, match="matmul: out is a .*(sparse|device 'meta')"):
        dt.matmul(x.bfloat16(), x.bfloat16(), out=odd.to(torch.bfloat16))  # torch's own product


def test_token_rows_never_promote_or_hide_samples():
    """1-D tensors take a torch.cat route; cat promotes dtypes and skips empty 1-D
    tensors, so the route must hand those batches to the checks of the general path."""
    with pytest.raises(TypeError, match="sample 1 has dtype torch.int32, but sample 0 has torch.int64"):
        dt.pad_batch([torch.arange(3), torch.arange(2, dtype=torch.int32)], promote=False)
    batch, _ = dt.pad_batch([torch.arange(3, dtype=torch.int32), torch.arange(2)])
    assert batch.dtype == torch.int64 and batch.tolist() == [
        [0, 1, 2, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0, 0, 0, 0],
    ]
    with pytest.raises(ValueError, match="same number of dimensions"):
        dt.pad_batch([torch.ones(0), torch.ones(2, 2)])


@pytest.mark.parametrize(
    "samples",
    [
        [torch.ones(3, device="meta")],
        [torch.arange(3.0), torch.ones(2, device="meta")],
        [torch.ones(2, 2), torch.ones(2, 2, device="meta")],
    ],
)
def test_tensors_on_other_devices_are_refused(samples):
    # meta tensors have no data: reading their pointer would crash the copy kernel
    with pytest.raises(TypeError, match="device 'meta'"):
        dt.pad_batch(samples)


def test_token_rows_with_a_plan_threads_and_lengths(monkeypatch):
    from dyntile import threads
    from dyntile.planning import BucketPlan

    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(-5, 5, (int(n),), generator=g) for n in torch.randint(0, 30, (13,), generator=g)]
    seqs[0] = torch.randint(0, 9, (29,), generator=g)
    plan = BucketPlan((8, 32, 64))
    monkeypatch.setattr(threads, "PARALLEL_COPY_BYTES", 0)  # the parallel kernel, on any size
    for side in ("right", "left"):
        batch, lengths = dt.pad_batch(seqs, plan=plan, fill=-100, side=side)
        ref = pad_sequence(seqs, batch_first=True, padding_value=-100, padding_side=side)
        width = ref.shape[1]
        assert batch.shape == (13, 32)
        part = batch[:, :width] if side == "right" else batch[:, 32 - width :]
        assert torch.equal(part, ref) and bool((batch == -100).sum() == 13 * 32 - lengths.sum())
        assert lengths.tolist() == [len(s) for s in seqs]
    with pytest.raises(ValueError, match="largest boundary"):
        dt.pad_batch([torch.arange(65)], plan=plan)


def test_out_of_a_torch_only_dtype_must_match_it():
    """bfloat16 and int16 share a width: the out check compares the torch dtypes too."""
    x = torch.ones(2, 2, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="out has dtype torch.int16, but the result has dtype torch.bfloat16"):
        dt.tile(x, (2, 2), out=torch.zeros(1, 1, 2, 2, dtype=torch.int16))
    with pytest.raises(TypeError, match="out has dtype int16, but this batch has dtype torch.bfloat16"):
        dt.pad_to(torch.ones(2, dtype=torch.bfloat16), (3,), out=np.zeros(3, np.int16))
    with pytest.raises(TypeError, match="out has dtype torch.bfloat16, but the result has dtype int16"):
        dt.untile(
            torch.full((1, 1, 2, 2), 16256, dtype=torch.int16),
            (2, 2),
            out=torch.zeros(2, 2, dtype=torch.bfloat16),
        )
    out = torch.zeros(1, 1, 2, 2, dtype=torch.bfloat16)
    assert dt.tile(x, (2, 2), out=out) is out and out.eq(1).all()


def test_conjugate_or_negative_out_is_refused():
    z = torch.zeros(1, 1, 2, 2, dtype=torch.complex64)
    with pytest.raises(ValueError, match="conjugate or negative view"):
        dt.tile(torch.full((2, 2), 1 + 1j), (2, 2), out=z.conj())
    with pytest.raises(ValueError, match="conjugate or negative view"):
        dt.pad_to(torch.ones(1), (2,), fill=5, out=torch.zeros(2, dtype=torch.complex64).conj().imag)


def test_float8_and_bfloat16_fills_are_checked():
    x8 = torch.zeros(1, 1, dtype=torch.float8_e4m3fn)
    for fill in (1000, -1e5):  # torch saturates to 448: still an overflow
        with pytest.raises(ValueError, match="overflows torch.float8_e4m3fn"):
            dt.tile(x8, (1, 2), fill=fill)
    with pytest.raises(ValueError, match="no infinity"):
        dt.pad_jagged(torch.zeros(1, dtype=torch.float8_e4m3fn), [1], fill=float("inf"), multiple=2)
    assert dt.tile(x8, (1, 2), fill=448).float().tolist() == [[[[0.0, 448.0]]]]
    assert dt.tile(x8, (1, 2), fill=2.5).float().tolist() == [[[[0.0, 2.5]]]]
    for dtype, fill, stored in ((torch.float8_e4m3fn, 449, 448.0), (torch.float8_e4m3fn, -100, -96.0)):
        with pytest.raises(ValueError, match=rf"fill={fill} cannot be stored exactly .* would be {stored}"):
            dt.tile(torch.zeros(1, 1, dtype=dtype), (1, 2), fill=fill)  # an integral fill: never rounded
    with pytest.raises(ValueError, match="fill=65519 cannot be stored exactly in float16"):
        dt.tile(torch.zeros(1, 1, dtype=torch.float16), (1, 2), fill=65519)
    assert dt.tile(bf := torch.zeros(1, 1, dtype=torch.bfloat16), (1, 2), fill=0.1).tolist()[0][0][0][1] == (
        torch.tensor(0.1).to(torch.bfloat16).item()  # a fraction rounds, as a cast does
    )
    with pytest.raises(ValueError, match="overflows"):
        dt.tile(x8, (1, 2), fill=464)  # rounds past it
    bf = torch.zeros(1, 1, dtype=torch.bfloat16)
    assert dt.tile(bf, (1, 2), fill=torch.tensor(-1.0)).tolist() == [[[[0.0, -1.0]]]]
    with pytest.raises(TypeError, match="fill should be a real number"):
        dt.tile(torch.zeros(1, 1, dtype=torch.bfloat16), (1, 2), fill="2.5")


def test_out_overlapping_a_tensor_sample_is_refused_and_disjoint_views_are_taken():
    """The tensor route tests only the samples whose bytes reach into out's range
    (pointers, sizes and strides in one C loop): the same answer as np.shares_memory."""
    base = torch.arange(64, dtype=torch.int64).reshape(8, 8)
    cases = [
        ([base[0, :3], torch.ones(5, dtype=torch.int64)], base[1:3], False),
        ([base[0, :3], torch.ones(5, dtype=torch.int64)], base[:2], True),
        ([torch.ones(2, dtype=torch.int64), base[:, 7]], base[6:8], True),  # a strided column
        ([torch.ones(2, dtype=torch.int64), base[:6, 7]], base[6:8], False),  # it ends before out
        ([base[3:5, :2], base[5:7, :2]], base[:2, :].reshape(2, 2, 4), False),
        ([base[3:5, :2], base[1:3, 6:]], base[:2, :].reshape(2, 2, 4), True),
    ]
    for samples, out, overlapping in cases:
        assert overlapping == any(np.shares_memory(out.numpy(), s.numpy()) for s in samples)
        if overlapping:
            with pytest.raises(ValueError, match="out overlaps an input in memory"):
                dt.pad_batch(samples, shape=tuple(out.shape[1:]), out=out)
        else:
            expected, _ = dt.pad_batch([s.clone() for s in samples], shape=tuple(out.shape[1:]), fill=-1)
            dt.pad_batch(samples, shape=tuple(out.shape[1:]), fill=-1, out=out)
            assert torch.equal(out, expected)
