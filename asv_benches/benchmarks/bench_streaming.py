"""Streaming benchmarks: ``StreamingPacker`` / ``StreamingBucketer`` over a stream of samples.

Planning alone (no collate) in samples/s on log-normal lengths, the padded fraction
of the stream packer next to the offline ``PackingBatchSampler`` with ``pool_size``
equal to the buffer, and a ``DataLoader`` pass (``PackedCollate``) over the stream
next to the map-style sampler on the same corpus. Side by side in one table:
``asv_benches/streaming_compare.py``.
"""

import numpy as np

BUFFER = 4096


def _loaders():
    """The ``loaders`` package; ``NotImplementedError`` (asv skips the benchmark) without torch."""
    try:
        import loaders
    except ImportError as e:
        raise NotImplementedError(str(e)) from None
    return loaders


def _lognormal(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(5.0, 1.0, n).astype(np.int64), 1, 4000)


class _ByLoader:
    """What the benchmarks over one ``loader`` parameter share (asv reads inherited attributes)."""

    param_names = ["loader"]
    timeout = 120


class StreamPlanning(_ByLoader):
    """Planning a stream of 100k samples (arrays of int32 tokens): the whole pass."""

    params = (["packer", "bucketer"],)

    def setup(self, loader):
        loaders = _loaders()
        self.L = _lognormal(100_000)
        self.data = [np.zeros(n, np.int32) for n in self.L]
        if loader == "packer":
            self.ds = loaders.StreamingPacker(self.data, max_tokens=16384, buffer_size=BUFFER, seq_len=1024)
        else:
            self.ds = loaders.StreamingBucketer(self.data, max_tokens=16384, buffer_size=BUFFER)

    def time_plan_stream(self, loader):
        for _ in self.ds:
            pass

    def track_samples_per_s(self, loader):
        import time

        t = time.perf_counter()
        n = sum(len(b) for b in self.ds)
        return n / (time.perf_counter() - t)

    track_samples_per_s.unit = "samples/s"


class StreamPadding:
    """Padded fraction of packed batches: the stream (a window of ``BUFFER``) vs the
    offline packer (``pool_size=BUFFER``) on the same lengths."""

    params = (["stream", "offline"],)
    param_names = ["packer"]

    def setup(self, packer):
        loaders = _loaders()
        from dyntile.planning.packing import pack_rows

        L = _lognormal(60_000, seed=1)
        if packer == "offline":
            batches = loaders.PackingBatchSampler(L, max_tokens=16384, pool_size=BUFFER).packed_batches()
            self.pad = 1 - sum(b.num_tokens for b in batches) / sum(b.shape[0] * b.shape[1] for b in batches)
            return
        ds = loaders.StreamingPacker([np.zeros(n, np.int8) for n in L], max_tokens=16384, buffer_size=BUFFER)
        real = slots = 0
        for batch in ds:
            b = pack_rows([len(s) for s in batch], ds.shapes, overflow=ds.overflow)
            real, slots = real + b.num_tokens, slots + b.shape[0] * b.shape[1]
        self.pad = 1 - real / slots

    def track_padded_fraction(self, packer):
        return self.pad

    track_padded_fraction.unit = "fraction of slots"


class StreamLoader(_ByLoader):
    """One ``DataLoader`` pass with ``PackedCollate`` (20k samples): the stream vs the map-style sampler."""

    params = (["stream", "map"],)

    def setup(self, loader):
        loaders = _loaders()
        import torch
        from torch.utils.data import DataLoader

        self.epoch = 0
        L = _lognormal(20_000, seed=2)
        data = [{"input_ids": torch.zeros(int(n), dtype=torch.int64)} for n in L]
        if loader == "stream":
            ds = loaders.StreamingPacker(
                data, max_tokens=16384, buffer_size=BUFFER, seq_len=1024, max_len=4096
            )
            self.loader = DataLoader(ds, batch_size=None, collate_fn=loaders.PackedCollate(ds))
        else:
            s = loaders.PackingBatchSampler(L, max_tokens=16384, seq_len=1024, pool_size=BUFFER)
            self.loader = DataLoader(data, batch_sampler=s, collate_fn=loaders.PackedCollate(s))

    def time_loader_pass(self, loader):
        self.epoch += 1  # each pass a new epoch: the map-style sampler plans it again, as the stream does
        ds = self.loader.dataset if loader == "stream" else self.loader.batch_sampler
        ds.set_epoch(self.epoch)
        for _ in self.loader:
            pass
