"""CUDA torch tensors reach the CUDA routes of the API, bfloat16 and float8 ones as
their bits, without a GPU: a tensor subclass that says it is on CUDA stands in for
one, and the device kernels are replaced by their host twins (the kernels themselves
are tested on the simulator in tests/cuda, and on a GPU by asv_benches/gpu_check.py).
What is checked is the API's side: the route taken, the integer views the kernels
get, the fill's bit pattern, the dtype restored, ``out=`` and the errors."""

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("numba") is None:  # found, not imported: tests/cuda's conftest sets the
    pytest.skip("numba is not installed", allow_module_level=True)  # simulator up before numba loads

import dyntile as dt  # noqa: E402


class CudaLike(torch.Tensor):
    """A CPU tensor that answers as a CUDA one (``is_cuda``), the way the API asks."""

    @property
    def is_cuda(self):
        return True

    @property
    def is_cpu(self):
        return False


def on_cuda(t):
    return t.as_subclass(CudaLike)


def plain(t):
    return t.as_subclass(torch.Tensor)


@pytest.fixture
def kernels(monkeypatch):
    """The CUDA entry points replaced by host twins; ``calls`` records (entry, dtype, fill)."""
    import dyntile.cuda as dc

    calls = []

    def pad_into(samples, out_shape, dtype, fill, left, out=None):
        calls.append(("pad_into", np.dtype(dtype), fill))
        batch, _ = dt.pad_batch(
            [plain(x) for x in samples], shape=out_shape[1:], fill=fill, side="left" if left else "right"
        )
        if out is not None:
            plain(out).copy_(batch)
            return out
        return on_cuda(batch)

    def tile_into(x, tile, fill, out=None):
        calls.append(("tile_into", x.dtype, fill))
        t = dt.tile(plain(x), tile, fill=fill)
        if out is None:
            return on_cuda(t)
        plain(out).copy_(t)
        return out

    def untile_from(t, shape, out=None):
        calls.append(("untile_from", t.dtype, None))
        x = dt.untile(plain(t), shape)
        if out is None:
            return on_cuda(x)
        plain(out).copy_(x)
        return out

    for name, fn in (("pad_into", pad_into), ("tile_into", tile_into), ("untile_from", untile_from)):
        monkeypatch.setattr(dc, name, fn, raising=False)
    return calls


def test_cuda_tensors_take_the_cuda_route(kernels):
    """pad_batch and pad_to of CUDA tensors once fell to the host route, which refused
    them ("sample 0 is a CUDA tensor")."""
    xs = [torch.arange(n, dtype=torch.float32) for n in (3, 5)]
    batch, lengths = dt.pad_batch([on_cuda(x) for x in xs], multiple=4, fill=-1)
    assert kernels[-1][:2] == ("pad_into", np.float32)
    assert torch.equal(plain(batch), dt.pad_batch(xs, multiple=4, fill=-1)[0])
    assert lengths.tolist() == [3, 5]
    y = dt.pad_to(on_cuda(xs[0]), (6,), fill=2)
    assert torch.equal(plain(y), torch.tensor([0, 1, 2, 2, 2, 2], dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("side", ["right", "left"])
def test_torch_only_dtypes_pad_as_their_bits(kernels, dtype, side):
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 3, generator=g).to(dtype) for n in (2, 5, 1)]
    batch, lengths = dt.pad_batch([on_cuda(x) for x in xs], multiple=4, fill=-1.5, side=side)
    ref, _ = dt.pad_batch(xs, multiple=4, fill=-1.5, side=side)
    entry, carrier, fill = kernels[-1]
    assert entry == "pad_into" and carrier.itemsize == ref.element_size() and carrier.kind in "iu"
    assert fill == int(
        np.array(
            torch.tensor(-1.5, dtype=dtype)
            .view(torch.uint8 if carrier.itemsize == 1 else torch.int16)
            .item(),
            carrier,
        )
    )
    assert isinstance(batch, CudaLike) and batch.dtype == dtype
    assert torch.equal(plain(batch).view(torch.uint8), ref.view(torch.uint8))
    assert lengths.tolist() == [[2, 3], [5, 3], [1, 3]]


def test_torch_only_dtype_out_and_errors(kernels, monkeypatch):
    xs = [on_cuda(torch.ones(n, dtype=torch.bfloat16)) for n in (2, 3)]
    out = on_cuda(torch.zeros(2, 8, dtype=torch.bfloat16))
    got, _ = dt.pad_batch(xs, fill=7, out=out)
    assert got is out and plain(out)[1].tolist() == [1, 1, 1, 7, 7, 7, 7, 7]
    with pytest.raises(TypeError, match="out should be a torch tensor of dtype torch.bfloat16"):
        dt.pad_batch(xs, out=on_cuda(torch.zeros(2, 8)))
    with pytest.raises(
        TypeError, match="every sample needs dtype torch.bfloat16, but sample 1 has torch.float32"
    ):
        dt.pad_batch([xs[0], on_cuda(torch.ones(3))])
    with pytest.raises(ValueError, match="overflows torch.bfloat16"):
        dt.pad_batch(xs, fill=1e39)
    from numba import cuda as numba_cuda

    # on a machine without CUDA a call's own mistakes are named first, then the machine's
    monkeypatch.setattr(numba_cuda, "is_available", lambda: False)
    with pytest.raises(
        TypeError, match="keeps the samples' dtype torch.bfloat16, but got dtype=torch.float32"
    ):
        dt.pad_batch(xs, dtype=torch.float32, device="cuda")
    with pytest.raises(TypeError, match="cannot hold torch.bfloat16; move the tensors to the GPU"):
        dt.pad_batch([plain(x) for x in xs], device="cuda")
    with pytest.raises(RuntimeError, match="device='cuda' needs a CUDA GPU"):
        dt.pad_batch([np.ones(3, np.float32)], device="cuda")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e5m2])
def test_torch_only_dtypes_tile_and_untile_as_their_bits(kernels, dtype):
    x = torch.randn(2, 5, 7).to(dtype)
    t = dt.tile(on_cuda(x), (4, 4), fill=0.5)
    assert kernels[-1][1] in (torch.int16, torch.uint8)
    assert isinstance(t, CudaLike) and t.dtype == dtype
    assert torch.equal(plain(t).view(torch.uint8), dt.tile(x, (4, 4), fill=0.5).view(torch.uint8))
    back = dt.untile(t, (5, 7))
    assert back.dtype == dtype and torch.equal(plain(back).view(torch.uint8), x.view(torch.uint8))
    out = on_cuda(torch.empty(2, 5, 7, dtype=dtype))
    assert dt.untile(t, (5, 7), out=out) is out and torch.equal(
        plain(out).view(torch.uint8), x.view(torch.uint8)
    )
    with pytest.raises(TypeError, match=f"out should be a torch tensor of dtype {dtype}"):
        dt.untile(t, (5, 7), out=on_cuda(torch.empty(2, 5, 7)))


def test_bfloat16_cuda_matmul_is_torchs():
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in ((3, 4, 5), (5, 6)))
    c = dt.matmul(on_cuda(a), on_cuda(b))
    assert c.dtype == torch.bfloat16 and torch.equal(plain(c), torch.matmul(a, b))
    stack = on_cuda(torch.zeros(2, 3, 4, 6, dtype=torch.bfloat16))
    assert dt.matmul(on_cuda(a), on_cuda(b), out=stack[1]) is not None
    assert torch.equal(plain(stack)[1], torch.matmul(a, b)) and not plain(stack)[0].any()
    with pytest.raises(ValueError, match="out overlaps an operand in device memory"):
        buf = on_cuda(torch.ones(4, 4, dtype=torch.bfloat16))
        dt.matmul(buf, buf, out=buf)
