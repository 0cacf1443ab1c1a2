"""The native tensor reader (dyntile.cpu._torch_tensors) against torch's own answers,
and the padding routes with and without it."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dyntile  # noqa: E402
from dyntile import tensor_reader  # noqa: E402
from dyntile.cpu import pad as _pad  # noqa: E402
from dyntile.padding import pad_rows  # noqa: E402
from reference import torch_real_dtypes  # noqa: E402

native = tensor_reader.native_reader()
native_module_before = tensor_reader.native_module()
needs_native = pytest.mark.skipif(native is None, reason="the native reader is not built for this torch")


@pytest.fixture(params=["native", "bindings"])
def route(request):
    """Run a test once with the native reader (when built) and once without it."""
    if request.param == "native" and native is None:
        pytest.skip("dyntile.cpu._torch_tensors not built for this torch")
    with tensor_reader.use_native(request.param == "native"):
        yield request.param


def test_ci_builds_the_native_reader():
    """CI builds with torch present (--no-build-isolation): there the reader must exist,
    or every other test here would pass on the bindings route alone."""
    if os.environ.get("DYNTILE_REQUIRE_NATIVE") != "1":
        pytest.skip("set DYNTILE_REQUIRE_NATIVE=1 to require the native reader")
    assert native is not None
    from dyntile.cpu import _torch_tensors as torch_tensors

    assert torch_tensors.built_for == torch.__version__ and torch_tensors.api == tensor_reader.NATIVE_API


def test_a_build_from_other_sources_is_not_used(monkeypatch):
    """A module built from older (or newer) sources than this package, as an editable
    install keeps after a pull, is set aside (the Python route runs), never called with
    functions it lacks; the status says to rebuild."""
    torch_tensors = pytest.importorskip("dyntile.cpu._torch_tensors")
    monkeypatch.setattr(torch_tensors, "api", tensor_reader.NATIVE_API - 1)
    from loaders import DynTileCollate

    with tensor_reader.use_native():  # judged afresh: the module found is from other sources
        assert tensor_reader.native_module() is None
        status = tensor_reader.native_status()
        assert status.startswith("not used: built from other sources") and "rebuild" in status
        out = DynTileCollate()([{"ids": [1, 2], "label": 3}, {"ids": [4], "label": 5}])  # the Python route
    assert out["ids"].tolist() == [[1, 2, 0, 0, 0, 0, 0, 0], [4, 0, 0, 0, 0, 0, 0, 0]] and out[
        "label"
    ].tolist() == [3, 5]


def _views(rng):
    """Odd-size tensors of many dtypes, ranks and layouts (views, offsets, zero strides)."""
    out = []
    for dtype in torch_real_dtypes():
        base = torch.from_numpy(rng.integers(0, 100, (7, 9, 5))).to(dtype)
        out.append([base[i, : 1 + i][:, 0] for i in range(7)])  # 1-D rows of a 3-D block
        out.append([base[i, ::2, 1:] for i in range(3)] + [base[0].t()[:3]])  # 2-D, strided, transposed
        out.append([base[:0, 0, 0], base[:3, 0, 0], base[2:, 1, 3]])  # zero size, offsets
        out.append([base[0, 0, :1].expand(6), base[1, :, 0]])  # a zero stride
    return out


@needs_native
def test_native_matches_the_bindings_on_views():
    rng = np.random.default_rng(0)
    for samples in _views(rng):
        want = _pad.describe_tensors(samples, torch.Tensor)
        nd = samples[0].dim()
        shapes, strides, ptrs = (
            np.empty((len(samples), nd), np.int64),
            np.empty((len(samples), nd), np.int64),
            np.empty(len(samples), np.intp),
        )
        maxes = np.empty(max(nd, 1), np.int64)
        refused, elements = native(samples, nd, shapes, strides, ptrs, maxes)
        assert refused == want[4] == -1
        np.testing.assert_array_equal(shapes, want[0])
        np.testing.assert_array_equal(strides, want[1])
        np.testing.assert_array_equal(ptrs, want[2])
        np.testing.assert_array_equal(maxes[:nd], want[0].max(axis=0) if nd else maxes[:0])
        assert elements == sum(s.numel() for s in samples)


class _Sub(torch.Tensor):
    pass


@needs_native
@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize(
    "odd, why",
    [
        (lambda x: x.to(torch.int32), "another dtype"),
        (lambda x: x[None], "another rank"),
        (lambda x: x.as_subclass(_Sub), "a subclass"),
        (lambda x: x.to_sparse(), "a sparse layout"),
        (lambda x: torch.nested.nested_tensor([x, x]), "a nested tensor"),
        (lambda x: torch.empty(3, device="meta", dtype=x.dtype), "the meta device"),
        (lambda x: torch._neg_view(x), "a negative view"),
        (lambda x: "not a tensor", "a string"),
    ],
)
def test_native_refuses_what_it_cannot_read_as_is(odd, why):
    x = torch.arange(5)
    samples = [x, x[1:], odd(x[2:])]
    shapes, strides, ptrs = np.empty((3, 1), np.int64), np.empty((3, 1), np.int64), np.empty(3, np.intp)
    refused, _ = native(samples, 1, shapes, strides, ptrs, np.empty(1, np.int64))
    assert refused == 2, why


@needs_native
def test_native_refuses_complex_and_checks_its_buffers():
    c = torch.randn(4, dtype=torch.complex64)
    bufs = [
        np.empty((2, 1), np.int64),
        np.empty((2, 1), np.int64),
        np.empty(2, np.intp),
        np.empty(1, np.int64),
    ]
    assert native([c, c], 1, *bufs)[0] == 0
    with pytest.raises(ValueError, match="shapes should hold at least 2"):
        native([torch.ones(2), torch.ones(3)], 1, np.empty(1, np.int64), *bufs[1:])
    with pytest.raises(TypeError):
        native((torch.ones(2),), 1, *bufs)


def test_reader_is_refused_under_another_torch_version(monkeypatch):
    pytest.importorskip("dyntile.cpu._torch_tensors")
    assert tensor_reader.native_status().startswith("in use")
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    with tensor_reader.use_native():  # judged afresh, under the other version
        assert tensor_reader.native_reader() is None
        assert (
            "built for torch 2" in tensor_reader.native_status()
            and "0.0.0-other" in tensor_reader.native_status()
        )


def test_status_when_switched_off():
    pytest.importorskip("dyntile.cpu._torch_tensors")
    with tensor_reader.use_native(False):
        assert tensor_reader.native_module() is None
        assert tensor_reader.native_status().startswith("switched off")
    assert tensor_reader.native_module() is native_module_before  # the choice comes back


def test_status_without_the_module(monkeypatch):
    import sys

    import dyntile.cpu

    monkeypatch.setitem(sys.modules, "dyntile.cpu._torch_tensors", None)  # import fails
    monkeypatch.delattr(dyntile.cpu, "_torch_tensors", raising=False)
    with tensor_reader.use_native():  # judged afresh, without the module
        assert tensor_reader.native_reader() is None
        assert tensor_reader.native_status().startswith("not built")


def test_pad_batch_and_pad_rows_equal_a_reference_on_both_routes(route):
    rng = np.random.default_rng(1)
    for samples in _views(rng):
        nd = samples[0].dim()
        if nd == 0:
            continue
        for side in ("right", "left"):
            got, lengths = dyntile.pad_batch(samples, multiple=4, side=side, fill=1)
            shapes = np.array([s.shape for s in samples])
            target = -(-shapes.max(axis=0) // 4) * 4
            want = torch.ones((len(samples), *target.tolist()), dtype=samples[0].dtype)
            for b, s in enumerate(samples):
                if side == "right":
                    index = (b,) + tuple(slice(0, n) for n in s.shape)
                else:
                    index = (b,) + tuple(slice(T - n, T) for T, n in zip(target.tolist(), s.shape))
                want[index] = s
            assert torch.equal(got, want)
            if nd == 1:
                batch, rows, longest, total = pad_rows(samples, multiple=4, fill=1, side=side)
                assert torch.equal(batch, want)
                assert rows.tolist() == [len(s) for s in samples]
                assert (longest, total) == (max(map(len, samples)), sum(map(len, samples)))


def test_pad_rows_refusals_fall_back_on_both_routes(route):
    x = torch.arange(6)
    with pytest.raises(TypeError):  # mixed dtypes: refused as pad_batch refuses them
        pad_rows([x, x.to(torch.int32)], promote=False)
    with pytest.raises(TypeError):
        dyntile.pad_batch([x, x.to(torch.int32)], promote=False)
    sub = [x.as_subclass(_Sub), x[:2]]
    batch, lengths = dyntile.pad_batch(sub, multiple=1)
    assert batch.tolist() == [list(range(6)), [0, 1, 0, 0, 0, 0]]
    neg = torch._neg_view(x.double())
    assert pad_rows([neg, x.double()], multiple=1)[0][0].tolist() == (-x.double()).tolist()


@pytest.mark.skipif(
    not (hasattr(torch, "_efficientzerotensor") and hasattr(torch, "_neg_view")),
    reason="this torch has no zero tensors or negative views to build",
)
def test_zero_tensors_and_negative_views_are_read_right_on_both_routes(route):
    """Tensors whose memory is not their values: efficient zero tensors (no memory
    at all) and negative views (memory holds -x), 1-D and 2-D."""
    x = torch.arange(1.0, 7.0)
    rows = [x[:3], torch._efficientzerotensor(2)]
    assert pad_rows(rows, multiple=1)[0].tolist() == [[1, 2, 3], [0, 0, 0]]
    assert dyntile.pad_batch(rows, multiple=1)[0].tolist() == [[1, 2, 3], [0, 0, 0]]
    grid = x.reshape(2, 3)
    neg = torch._neg_view(grid)
    got = dyntile.pad_batch([neg, grid[:1]], multiple=1)[0]
    assert got.tolist() == [(-grid).tolist(), [grid[0].tolist(), [0, 0, 0]]]


@needs_native
def test_native_refuses_a_batch_mixing_tensor_and_parameter():
    """One Python type per batch, as the bindings route checks (collate names the mix)."""
    x = torch.ones(3)
    bufs = [
        np.empty((2, 1), np.int64),
        np.empty((2, 1), np.int64),
        np.empty(2, np.intp),
        np.empty(1, np.int64),
    ]
    assert native([x, torch.nn.Parameter(x.clone())], 1, *bufs)[0] == 1
    assert native([torch.nn.Parameter(x.clone()), torch.nn.Parameter(x.clone())], 1, *bufs)[0] == -1


def test_requires_grad_finds_any_tensor_requiring_grad_on_both_routes(route):
    x = torch.ones(3)
    assert not tensor_reader.requires_grad([x, x[:2], [1, 2], 5])
    assert tensor_reader.requires_grad([x, [1], torch.ones(2, requires_grad=True)])
    assert tensor_reader.requires_grad([x * 1, torch.nn.Parameter(x.clone())])  # a subclass too
    assert tensor_reader.requires_grad([torch.ones(2, requires_grad=True)[:1]])  # a view of one
    assert not tensor_reader.requires_grad([])
