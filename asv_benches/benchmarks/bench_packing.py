"""Packing benchmarks: speed of a packed epoch, padding and distinct shapes.

Data: the docstring token lengths of ``shared/data`` (and a million lengths
resampled from them), or a synthetic log-normal stand-in when the data is absent
(``real_data.docstring_lengths``); ``CollateEpoch`` needs the real token ids and
is skipped without them. The reference beside
dyntile is Hugging Face's ``DataCollatorWithFlattening`` (no padding, but one
``[1, total]`` row whose length changes with every batch); skipped when
``transformers`` is not installed.
"""

import numpy as np

from .real_data import DATA, docstring_lengths


def _lengths(name):
    L = docstring_lengths()
    if name == "resampled_1M":
        L = np.random.default_rng(0).choice(L, 1_000_000)
    return L


class PackEpoch:
    """Packing a whole epoch of lengths: time, padded fraction, distinct shapes."""

    params = (["docstrings", "resampled_1M"], [None, 512], [8192, 16384])
    param_names = ["data", "seq_len", "max_tokens"]

    def setup(self, data, seq_len, max_tokens):
        from dyntile.planning.packing import pack_lengths

        self.L = _lengths(data)
        self.pack = pack_lengths
        self.batches = pack_lengths(self.L, seq_len, max_tokens=max_tokens, seed=0)

    def time_pack_lengths(self, data, seq_len, max_tokens):
        self.pack(self.L, seq_len, max_tokens=max_tokens, seed=0, epoch=1)

    def track_padded_fraction(self, data, seq_len, max_tokens):
        slots = sum(b.shape[0] * b.shape[1] for b in self.batches)
        return 1.0 - sum(b.num_tokens for b in self.batches) / slots

    def track_distinct_shapes(self, data, seq_len, max_tokens):
        return len({b.shape for b in self.batches})

    track_padded_fraction.unit = "fraction of slots"
    track_distinct_shapes.unit = "shapes"


class SamplerEpoch:
    """A full epoch of ``PackingBatchSampler`` (packing + yielding index lists)."""

    params = (["docstrings", "resampled_1M"], [1, 8])
    param_names = ["data", "num_replicas"]

    def setup(self, data, num_replicas):
        try:
            from loaders.packing_sampler import PackingBatchSampler
        except ImportError as e:  # torch missing
            raise NotImplementedError(str(e)) from e
        self.sampler = PackingBatchSampler(
            _lengths(data), max_tokens=16384, seed=0, num_replicas=num_replicas, rank=0
        )
        self.epoch = 0

    def time_sampler_epoch(self, data, num_replicas):
        self.epoch += 1
        self.sampler.set_epoch(self.epoch)  # a fresh epoch: packing is not cached
        for _ in self.sampler:
            pass


class CollateEpoch:
    """Collating an epoch of real token sequences: dyntile packed vs HF flattening.

    Every library gets the same samples, built in ``setup``: dicts of ``input_ids`` as
    Python lists, as a tokenizer or a Hugging Face dataset yields them
    (``dyntile-tensors``: the same ids as 1-D tensors, as a torch ``Dataset`` may)."""

    params = (["dyntile", "dyntile-tensors", "hf_flattening"],)
    param_names = ["library"]

    def setup(self, library):
        try:
            from loaders.packed_collate import PackedCollate
            from loaders.packing_sampler import PackingBatchSampler
        except ImportError as e:
            raise NotImplementedError(str(e)) from e
        path = DATA / "tokens_cpython_docstrings_sample.npz"
        if not path.exists():
            raise NotImplementedError(f"real data not found at {path}")
        z = np.load(path)
        ids, off = z["ids"].astype(np.int64), z["offsets"]
        seqs = [ids[off[j] : off[j + 1]] for j in range(len(off) - 1)]
        sampler = PackingBatchSampler(np.diff(off), max_tokens=4096, seed=0)
        if library == "dyntile-tensors":
            import torch

            self.batches = [[{"input_ids": torch.from_numpy(seqs[i])} for i in b] for b in sampler]
        else:
            self.batches = [[{"input_ids": seqs[i].tolist()} for i in b] for b in sampler]
        if library.startswith("dyntile"):
            collate = PackedCollate(sampler)
        else:
            try:
                from transformers import DataCollatorWithFlattening
            except ImportError as e:
                raise NotImplementedError(f"transformers is not installed: {e}") from e
            hf = DataCollatorWithFlattening(return_tensors="pt")

            def collate(samples):
                return hf(samples)

        self.collate = collate
        self.outputs = [collate(b) for b in self.batches]

    def time_collate_epoch(self, library):
        for b in self.batches:
            self.collate(b)

    def track_distinct_shapes(self, library):
        return len({tuple(o["input_ids"].shape) for o in self.outputs})

    def track_padded_fraction(self, library):
        slots = sum(o["input_ids"].numel() for o in self.outputs)
        tokens = sum(len(s["input_ids"]) for b in self.batches for s in b)
        return 1.0 - tokens / slots

    track_padded_fraction.unit = "fraction of slots"
    track_distinct_shapes.unit = "shapes"
