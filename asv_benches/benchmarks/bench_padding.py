"""Padding and tiling copies: dyntile against NumPy and PyTorch references.

One class per topic, the library as the first parameter (asv's graph shows the
first parameters' combinations, at most 8 lines, by default: dyntile beside the
references):

* ``PadBatch``     -- a ragged list of 1-D sequences -> ``(B, L)``; references: NumPy
  "allocate + copy each row" and ``torch.nn.utils.rnn.pad_sequence``;
* ``PadAcceptance`` -- issue 2's acceptance case (64 int64 sequences, mean length
  about 200): dyntile at least as fast as NumPy and faster than ``pad_sequence``;
* ``PadAcceptanceRatio`` -- the same case as one ``track_``: dyntile's time over the
  reference's (lower is better, at most 1 is the target);
* ``PadBatchFrames`` -- ragged ``(T_i, 80)`` float32 spectrogram frames -> ``(B, T, 80)``;
* ``PadBatchInto`` -- the copy alone, into a preallocated ``out=`` buffer;
* ``PadTensorReader`` -- 64 short torch token rows and 64 ``(T_i, 80)`` frames, their
  sizes and pointers read by the native reader (``dyntile.cpu._torch_tensors``) or
  through torch's bindings (``native`` is skipped where it was not built);
* ``PadJagged``    -- rows stored back to back -> ``(B, T)``; references: torch's
  jagged nested tensor ``to_padded_tensor`` and ``pad_sequence`` of the rows' views;
* ``PadTo``        -- one array up to a shape; reference ``np.pad``;
* ``Tile`` / ``Untile`` -- ``(..., M, N) <-> (..., gm, gn, tm, tn)``; reference
  ``np.pad`` + reshape + transpose (+ copy to contiguous); ``peakmem_`` shows the
  padded intermediate the reference allocates.

Sources are slices of one large buffer at offsets that are multiples of 64 bytes
plus 256, and ``setup`` checks that no source row sits 16 bytes (mod 4 KiB) below
its destination row, where glibc's ``memcpy`` is about 10x slower (4K aliasing):
a benchmark should not measure that by accident.
"""

from __future__ import annotations

import time

import numpy as np

import dyntile

try:  # imported once, in asv's forkserver, rather than in every benchmark process
    import torch
except ImportError:  # torch parameters are skipped
    torch = None

SEED = 20260
ALIGN = 64  # every sample starts on a 64-byte boundary of the source buffer ...
GAP = 256  # ... with this many spare bytes after the previous one
PAGE = 4096
BAD_DELTA = 16  # (dst - src) % PAGE == 16 triggers glibc's slow memcpy path

LIBRARIES = ["dyntile", "numpy", "torch"]


def _torch():
    """torch, or ``NotImplementedError`` (asv: skip this parameter) when absent."""
    if torch is None:
        raise NotImplementedError("torch is not installed")
    return torch


def _lengths(batch: int, mean: int, rng: np.random.Generator) -> np.ndarray:
    """``batch`` lengths uniform in ``[1, 2 * mean - 1]`` (mean about ``mean``)."""
    return rng.integers(1, 2 * mean, size=batch)


def _ragged(
    lengths: np.ndarray,
    row_shape: tuple[int, ...],
    dtype,
    rng: np.random.Generator,
    extra: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Samples of shape ``(L_i, *row_shape)`` sliced out of one buffer.

    Sample ``i`` starts on an ``ALIGN``-byte boundary, at least ``GAP`` bytes after the
    end of sample ``i - 1``, moved by ``extra[i]`` bytes (0 or ``ALIGN``; its slot has
    room for either).
    """
    dtype = np.dtype(dtype)
    extra = np.zeros(len(lengths), np.int64) if extra is None else extra
    row = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
    starts, pos = [], ALIGN
    for n, e in zip(lengths, extra):
        starts.append(pos + int(e))
        pos += -(-(int(n) * row + GAP + ALIGN) // ALIGN) * ALIGN
    raw = np.empty(pos + 2 * ALIGN, np.uint8)
    base = (-raw.ctypes.data) % ALIGN
    if dtype.kind == "f":
        values = rng.standard_normal(raw.size // dtype.itemsize).astype(dtype)
    else:
        values = rng.integers(0, 100, raw.size // dtype.itemsize).astype(dtype)
    raw[: values.nbytes] = values.view(np.uint8)
    out = []
    for start, n in zip(starts, lengths):
        lo = base + start
        hi = lo + int(n) * row
        out.append(raw[lo:hi].view(dtype).reshape((int(n),) + tuple(row_shape)))
    return out


def _aliased_rows(batch, samples) -> list[int]:
    """Indices ``i`` whose source sits 16 bytes (mod 4 KiB) below destination row ``i``."""
    if hasattr(batch, "data_ptr"):
        dst, stride = batch.data_ptr(), batch.stride(0) * batch.element_size()
    else:
        dst, stride = batch.ctypes.data, batch.strides[0]
    bad = []
    for i, s in enumerate(samples):
        src = s.data_ptr() if hasattr(s, "data_ptr") else s.ctypes.data
        if (dst + i * stride - src) % PAGE == BAD_DELTA:
            bad.append(i)
    return bad


def _unaliased(make_samples, run, n: int, tries: int = 8):
    """Samples for which ``run(samples)``'s output rows do not 4K-alias the sources.

    ``make_samples(extra)`` builds the ``n`` samples with per-sample offsets ``extra``;
    each retry moves the aliased ones by ``ALIGN`` bytes (``run`` allocates its output
    afresh, which malloc usually places where the trial's was).
    """
    extra = np.zeros(n, np.int64)
    for _ in range(tries):
        samples = make_samples(extra)
        bad = _aliased_rows(run(samples)[0], samples)
        if not bad:
            return samples
        extra[bad] = ALIGN - extra[bad]
    raise RuntimeError(f"could not place the sources away from the 4K-aliasing offset in {tries} tries")


def pad_reference_numpy(samples: list[np.ndarray], multiple: int = 8):
    """NumPy reference: allocate the zeroed batch, then copy each row (plus lengths)."""
    lengths = np.fromiter((len(s) for s in samples), np.int64, len(samples))
    padded = -(-int(lengths.max()) // multiple) * multiple
    out = np.zeros((len(samples), padded) + samples[0].shape[1:], samples[0].dtype)
    for i, s in enumerate(samples):
        out[i, : len(s)] = s
    return out, lengths


def pad_reference_torch(tensors: list):
    """PyTorch reference: ``pad_sequence(batch_first=True)`` (plus lengths)."""
    _torch()
    return torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True), torch.tensor([len(t) for t in tensors])


# library -> (input kind, padding function); "dyntile-torch" pads torch tensors.
RUNNERS = {
    "dyntile": ("numpy", dyntile.pad_batch),
    "dyntile-torch": ("torch", dyntile.pad_batch),
    "numpy": ("numpy", pad_reference_numpy),
    "torch": ("torch", pad_reference_torch),
}


class _PadBench:
    """Shared set-up: ragged samples for ``library``, placed away from 4K aliasing."""

    def _setup_samples(self, lengths, row_shape, dtype, library):
        if library not in RUNNERS:
            raise ValueError(f"unknown library {library!r}; expected one of {sorted(RUNNERS)}")
        kind, self.run = RUNNERS[library]
        rng = np.random.default_rng(SEED)
        if kind == "torch":
            _torch()

        def make(extra):
            samples = _ragged(lengths, row_shape, dtype, rng, extra)
            return [torch.from_numpy(s) for s in samples] if kind == "torch" else samples

        self.samples = _unaliased(make, self.run, len(lengths))


class PadBatch(_PadBench):
    """A ragged batch of 1-D sequences -> ``(B, L)``; ``BxL`` is batch x mean length."""

    params = [LIBRARIES, ["64x200", "256x50", "16x2000"], ["int64", "uint8"]]
    param_names = ["library", "batch", "dtype"]

    def setup(self, library, batch, dtype):
        b, mean = (int(v) for v in batch.split("x"))
        self._setup_samples(_lengths(b, mean, np.random.default_rng(SEED)), (), dtype, library)

    def time_pad_batch(self, library, batch, dtype):
        self.run(self.samples)


class PadAcceptance(_PadBench):
    """Issue 2's acceptance case: 64 int64 sequences with mean length about 200.

    dyntile should be at least as fast as NumPy "allocate + copy each row" and faster
    than ``torch.nn.utils.rnn.pad_sequence``; ``dyntile-torch`` pads the same torch
    tensors that ``pad_sequence`` gets (torch in, torch out).
    """

    params = [["dyntile", "dyntile-torch", "numpy", "torch"]]
    param_names = ["library"]

    def setup(self, library):
        self._setup_samples(_lengths(64, 200, np.random.default_rng(SEED)), (), "int64", library)

    def time_pad_batch(self, library):
        self.run(self.samples)


class PadAcceptanceRatio(_PadBench):
    """Issue 2's acceptance case as one number: dyntile's time / the reference's time.

    Both run on the same inputs (NumPy arrays against "allocate + copy each row";
    torch tensors against ``pad_sequence``), interleaved in one process, medians of
    ``rounds`` rounds. Lower is better; the target is ``<= 1`` for NumPy and ``< 1``
    for torch.
    """

    params = [["numpy", "torch"]]
    param_names = ["reference"]
    unit = "dyntile time / reference time"
    rounds = 15

    def setup(self, reference):
        self._setup_samples(_lengths(64, 200, np.random.default_rng(SEED)), (), "int64", reference)
        self.reference = self.run
        self.dyntile = RUNNERS["dyntile" if reference == "numpy" else "dyntile-torch"][1]

    def track_speed_ratio(self, reference):
        def elapsed(fn, number=20):
            start = time.perf_counter()
            for _ in range(number):
                fn(self.samples)
            return time.perf_counter() - start

        elapsed(self.dyntile, 5), elapsed(self.reference, 5)  # warm both up
        ratios = [elapsed(self.dyntile) / elapsed(self.reference) for _ in range(self.rounds)]
        return float(np.median(ratios))


class PadBatchFrames(_PadBench):
    """Ragged spectrograms ``(T_i, 80)`` float32 -> ``(B, T, 80)`` (frames padded)."""

    params = [LIBRARIES, ["16x300", "64x100"]]
    param_names = ["library", "batch"]

    def setup(self, library, batch):
        b, mean = (int(v) for v in batch.split("x"))
        self._setup_samples(_lengths(b, mean, np.random.default_rng(SEED)), (80,), "float32", library)

    def time_pad_batch(self, library, batch):
        self.run(self.samples)


class PadBatchInto:
    """The copy alone: pad into a preallocated ``out=`` batch (no allocation timed)."""

    params = [["dyntile", "numpy"], ["64x200", "16x20000"], ["int64", "float32"]]
    param_names = ["library", "batch", "dtype"]

    def setup(self, library, batch, dtype):
        b, mean = (int(v) for v in batch.split("x"))
        rng = np.random.default_rng(SEED)
        lengths = _lengths(b, mean, rng)
        self.out = np.empty((b, -(-int(lengths.max()) // 8) * 8), dtype)
        self.samples = _unaliased(
            lambda extra: _ragged(lengths, (), dtype, rng, extra), lambda samples: (self.out,), b
        )
        self.library = library

    def time_pad_batch_into(self, library, batch, dtype):
        if self.library == "dyntile":
            dyntile.pad_batch(self.samples, out=self.out)
        else:
            out = self.out
            out[...] = 0
            for i, s in enumerate(self.samples):
                out[i, : len(s)] = s


class PadTensorReader:
    """``pad_batch`` of torch tensors with each way of reading them: ``native`` (one
    call per batch; skipped where the module was not built for this torch) or
    ``bindings`` (torch's Python calls per sample). Short rows show the reading most."""

    params = [["native", "bindings"], ["64x50", "64x50x80"]]
    param_names = ["reader", "batch"]

    def setup(self, reader, batch):
        from dyntile import tensor_reader

        t = _torch()
        native = tensor_reader.native_module()
        if reader == "native" and native is None:
            raise NotImplementedError("dyntile.cpu._torch_tensors is not built for this torch")
        self._switch = tensor_reader.use_native(reader == "native")
        self._switch.__enter__()
        b, mean, *row = (int(v) for v in batch.split("x"))
        rng = np.random.default_rng(SEED)
        self.samples = [
            t.from_numpy(s)
            for s in _ragged(_lengths(b, mean, rng), tuple(row), "int64" if not row else "float32", rng)
        ]

    def teardown(self, reader, batch):
        self._switch.__exit__(None, None, None)

    def time_pad_batch(self, reader, batch):
        dyntile.pad_batch(self.samples)


def _jagged_runner(library: str, lengths: list):
    """``run(values) -> (B, T)`` for rows stored back to back in int64 ``values``."""
    if library == "dyntile":
        return lambda values: dyntile.pad_jagged(values, lengths)[0]
    t = _torch()
    if library == "torch-nested":  # a jagged nested tensor, then its dense padding
        offsets = t.from_numpy(np.concatenate(([0], np.cumsum(lengths))))
        longest = max(lengths)  # without it, to_padded_tensor pads every row to the total length
        return lambda values: t.nested.nested_tensor_from_jagged(
            values, offsets=offsets, max_seqlen=longest
        ).to_padded_tensor(0)
    if library == "torch-pad-sequence":  # views of each row, then pad_sequence
        return lambda values: t.nn.utils.rnn.pad_sequence(list(values.split(lengths)), batch_first=True)
    raise ValueError(f"unknown library {library!r}")


class PadJagged:
    """Rows stored back to back (``torch.cat`` of the samples, a packed token stream)
    -> ``(B, T)``: ``dyntile.pad_jagged`` against torch's jagged nested tensor
    (``nested_tensor_from_jagged(...).to_padded_tensor``) and ``pad_sequence`` of the
    rows' views. int64 CPU tensors, ``BxL`` batch x mean length."""

    params = [["dyntile", "torch-nested", "torch-pad-sequence"], ["64x200", "16x2000"]]
    param_names = ["library", "batch"]

    def setup(self, library, batch):
        t = _torch()
        b, mean = (int(v) for v in batch.split("x"))
        rng = np.random.default_rng(SEED)
        lengths = _lengths(b, mean, rng).tolist()
        self.run = _jagged_runner(library, lengths)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        buf = t.from_numpy(rng.integers(1, 30000, sum(lengths) + PAGE))
        for shift in range(0, PAGE // 8, ALIGN // 8):  # keep every row off the 4K-aliasing offset
            self.values = buf[shift : shift + sum(lengths)]
            out = self.run(self.values)
            src = self.values.data_ptr() + 8 * starts
            dst = out.data_ptr() + out.stride(0) * 8 * np.arange(b)
            if not ((dst - src) % PAGE == BAD_DELTA).any():
                return
        raise RuntimeError("could not place the rows away from the 4K-aliasing offset")

    def time_pad_jagged(self, library, batch):
        self.run(self.values)


class PadTo:
    """One float32 array up to a shape (right padding with zeros); reference ``np.pad``."""

    params = [["dyntile", "numpy"], ["1000x1000", "333x517", "3x5"]]
    param_names = ["library", "shape"]

    def setup(self, library, shape):
        m, n = (int(v) for v in shape.split("x"))
        self.x = np.ones((m, n), np.float32)
        self.target = (-(-m // 64) * 64 + 8, -(-n // 64) * 64 + 8)
        self.widths = [(0, t - s) for t, s in zip(self.target, self.x.shape)]
        if library not in ("dyntile", "numpy"):
            raise ValueError(f"unknown library {library!r}")
        self.library = library

    def time_pad_to(self, library, shape):
        if self.library == "dyntile":
            dyntile.pad_to(self.x, self.target)
        else:
            np.pad(self.x, self.widths)


def tile_reference(x: np.ndarray, tile: tuple[int, int]) -> np.ndarray:
    """NumPy reference: ``np.pad`` to whole tiles, reshape, transpose, copy."""
    tm, tn = tile
    m, n = x.shape[-2:]
    gm, gn = -(-m // tm), -(-n // tn)
    lead = x.shape[:-2]
    padded = np.pad(x, [(0, 0)] * len(lead) + [(0, gm * tm - m), (0, gn * tn - n)])
    k = len(lead)
    blocks = padded.reshape(lead + (gm, tm, gn, tn))
    axes = tuple(range(k)) + (k, k + 2, k + 1, k + 3)
    return np.ascontiguousarray(blocks.transpose(axes))


def untile_reference(t: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """NumPy reference: transpose the tiles back, reshape, slice, copy."""
    m, n = shape
    lead = t.shape[:-4]
    gm, gn, tm, tn = t.shape[-4:]
    k = len(lead)
    axes = tuple(range(k)) + (k, k + 2, k + 1, k + 3)
    full = t.transpose(axes).reshape(lead + (gm * tm, gn * tn))
    return np.ascontiguousarray(full[..., :m, :n])


TILE_CASES = {
    # name: (array shape, tile)
    "1000x1000/8x128": ((1000, 1000), (8, 128)),
    "4x333x517/16x16": ((4, 333, 517), (16, 16)),
    "4096x768/8x128": ((4096, 768), (8, 128)),
}


class Tile:
    """``(..., M, N) -> (..., ceil(M/tm), ceil(N/tn), tm, tn)``, zero-filled edges."""

    params = [["dyntile", "numpy"], list(TILE_CASES), ["float32", "float64"]]
    param_names = ["library", "case", "dtype"]

    def setup(self, library, case, dtype):
        shape, self.tile = TILE_CASES[case]
        self.x = np.random.default_rng(SEED).standard_normal(shape).astype(dtype)
        self.run = {"dyntile": dyntile.tile, "numpy": tile_reference}[library]

    def time_tile(self, library, case, dtype):
        self.run(self.x, self.tile)


class Untile:
    """``(..., gm, gn, tm, tn) -> (..., M, N)``: the exact inverse of ``tile``."""

    params = Tile.params
    param_names = Tile.param_names

    def setup(self, library, case, dtype):
        shape, tile = TILE_CASES[case]
        x = np.random.default_rng(SEED).standard_normal(shape).astype(dtype)
        self.shape = shape[-2:]
        self.t = tile_reference(x, tile)
        self.run = {"dyntile": dyntile.untile, "numpy": untile_reference}[library]

    def time_untile(self, library, case, dtype):
        self.run(self.t, self.shape)


class TileMemory:
    """Peak memory of tiling a 64 MiB float32 matrix that needs edge padding.

    The NumPy reference holds the padded copy and the tiled copy at once; dyntile
    writes the tiles straight from the source.
    """

    params = [["dyntile", "numpy"]]
    param_names = ["library"]

    def setup(self, library):
        self.x = np.ones((4100, 4100), np.float32)
        self.run = {"dyntile": dyntile.tile, "numpy": tile_reference}[library]

    def peakmem_tile(self, library):
        self.run(self.x, (8, 128))
