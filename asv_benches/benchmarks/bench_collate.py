"""Collating token batches: DynTileCollate against the usual references.

Batches of 64 dict samples ``{"input_ids", "labels"}`` of variable length (lengths
drawn from the CPython docstring lengths in ``../shared/data`` when present, else
a log-normal stand-in), leaves given as torch tensors or as Python lists:

* ``Collate.time_collate`` -- one batch, per library: ``dyntile`` (no plan: batch
  max rounded to 8), ``dyntile_plan`` (8-bucket plan), ``pad_sequence``
  (``torch.nn.utils.rnn.pad_sequence`` per key + lengths + mask: the hand-written
  collate; tensors only) and ``hf`` (Hugging Face ``DataCollatorWithPadding``,
  ``pad_to_multiple_of=8``, on ``input_ids`` alone: it does not pad ragged labels;
  only when ``transformers`` is installed; so its time is of half the work of the
  others': ``CollateSpeedup`` compares it with dyntile on the same one-key batches);
* ``CollateSpeedup.track_speedup`` -- dyntile time over reference time, measured
  side by side in one process (medians of interleaved repeats, each pass after
  ``WARMUP_SECONDS`` of its own method, as asv warms a time benchmark; lower is
  better, like every asv track), on random and length-grouped batches (a bucketing
  sampler's), and on grouped batches built just before each collate (``fresh``: a
  ``DataLoader`` worker's case, no warm-up), tensor and list leaves; targets: at most
  1/3 against ``pad_sequence`` and 1/100 against ``hf``;
* ``LoaderSpeedup.track_speedup`` -- the same ratio through a ``DataLoader`` with one
  worker (collate in the worker, the batch crossing to the main process), against
  ``pad_sequence`` and against DynTileCollate with torch's per-tensor transfer;
* ``CollateMemory.peakmem_collate`` -- peak memory of one large collate.

torch runs single-threaded here, as it does in ``DataLoader`` workers (which set
``torch.set_num_threads(1)``), where a ``collate_fn`` runs.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

try:
    import torch
    from torch.nn.utils.rnn import pad_sequence
    from torch.utils.data import DataLoader
except ImportError:
    torch = None

from .real_data import docstring_lengths

BATCH = 64
N_BATCHES = 16
LIBRARIES = ["dyntile", "dyntile_plan", "pad_sequence", "hf"]
WARMUP_SECONDS = 0.1  # asv's default warmup_time of a time benchmark (CPython)


def warmed(seconds, fn, warmup: float = WARMUP_SECONDS) -> float:
    """``seconds(fn)``, one timed pass of ``fn``, after untimed passes of the same ``fn``
    for at least ``warmup`` seconds (at least one): ``fn`` in its own steady state, as an
    asv time benchmark or ``timeit`` measures it. One pass is not enough after another
    method ran: on the VMs these figures come from, memory a call has not touched for a
    millisecond or more costs up to ~0.7 us a page to reach again, for a few passes."""
    end = time.perf_counter() + warmup
    seconds(fn)
    while time.perf_counter() < end:
        seconds(fn)
    return seconds(fn)


def make_batches(
    leaves: str,
    n_batches: int = N_BATCHES,
    batch: int = BATCH,
    seed: int = 0,
    order: str = "random",
    labels: bool = True,
):
    """``n_batches`` lists of ``batch`` dict samples (``input_ids``, and ``labels``
    unless ``labels=False``).

    ``leaves``: ``"tensors"`` or ``"lists"`` (Python ints, as tokenizers give them).
    ``order="random"``: each batch draws lengths from the whole corpus (random
    batching: mostly padding); ``"grouped"``: batches of similar lengths, as a
    bucketing sampler delivers them. Every method gets the same batches.
    """
    rng = np.random.default_rng(seed)
    L = docstring_lengths()
    draws = rng.choice(L, (n_batches, batch))
    if order == "grouped":
        draws = np.sort(draws.reshape(-1)).reshape(n_batches, batch)
        draws = rng.permuted(draws[rng.permutation(n_batches)], axis=1)
    batches = []
    for row in draws:
        samples = []
        for n in row:
            ids = torch.from_numpy(rng.integers(1, 30522, int(n)))
            if leaves == "lists":
                sample = {"input_ids": ids.tolist(), "labels": ids.tolist()}
            else:
                sample = {"input_ids": ids, "labels": ids.clone()}
            if not labels:
                del sample["labels"]
            samples.append(sample)
        batches.append(samples)
    return L, batches


def pad_sequence_collate(samples):
    """The usual hand-written collate: pad_sequence per key, lengths, mask."""
    ids = [s["input_ids"] for s in samples]
    lengths = torch.tensor([len(x) for x in ids])
    input_ids = pad_sequence(ids, batch_first=True, padding_value=0)
    return {
        "input_ids": input_ids,
        "labels": pad_sequence([s["labels"] for s in samples], batch_first=True, padding_value=-100),
        "attention_mask": torch.arange(input_ids.shape[1])[None, :] < lengths[:, None],
        "lengths": lengths,
    }


def hf_collate():
    """``DataCollatorWithPadding(pad_to_multiple_of=8)`` with a tiny word-level tokenizer.

    It pads ``input_ids`` (and builds ``attention_mask``) but not ragged ``labels``,
    so it is compared on samples of ``input_ids`` only (``make_batches(labels=False)``),
    with dyntile given the same samples."""
    try:
        from tokenizers import Tokenizer, models
        from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast
    except ImportError:
        raise NotImplementedError("transformers is not installed") from None
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1}, "[UNK]")),
        pad_token="[PAD]",
        unk_token="[UNK]",
    )
    return DataCollatorWithPadding(tok, pad_to_multiple_of=8, return_tensors="pt")


def make_collate(library: str, leaves: str, lengths):
    if torch is None:
        raise NotImplementedError("torch is not installed")
    torch.set_num_threads(1)  # as in DataLoader workers, where collate_fn runs
    from dyntile.planning import plan_buckets
    from loaders import DynTileCollate

    pad_values = {"input_ids": 0, "labels": -100}
    if library == "dyntile":
        return DynTileCollate(pad_values=pad_values)
    if library == "dyntile_plan":
        return DynTileCollate(plan_buckets(lengths, max_buckets=8), pad_values=pad_values)
    if library == "pad_sequence":
        if leaves != "tensors":
            raise NotImplementedError("pad_sequence takes tensors only")
        return pad_sequence_collate
    return hf_collate()


class Collate:
    params = [LIBRARIES, ["tensors", "lists"]]
    param_names = ["library", "leaves"]

    def setup(self, library, leaves):
        lengths, self.batches = make_batches(leaves, n_batches=1, labels=library != "hf")
        self.collate = make_collate(library, leaves, lengths)
        self.collate(self.batches[0])  # warm caches and lazy imports

    def time_collate(self, library, leaves):
        self.collate(self.batches[0])


class CollateSpeedup:
    """``order="fresh"``: length-grouped batches whose samples are built just before
    each collate (``torch.tensor`` per leaf, or new int objects for lists), as a
    ``Dataset.__getitem__`` in a ``DataLoader`` worker makes them; only the collates
    are timed. Caches are then cold for both collates."""

    params = [["pad_sequence", "hf"], ["random", "grouped", "fresh"], ["tensors", "lists"]]
    param_names = ["reference", "order", "leaves"]
    timeout = 300

    def setup(self, reference, order, leaves):
        lengths, self.batches = make_batches(
            leaves, order="grouped" if order == "fresh" else order, labels=reference != "hf"
        )
        self.ours = make_collate("dyntile", leaves, lengths)
        self.ref = make_collate(reference, leaves, lengths)
        self.rounds = 5 if reference == "hf" else 15
        self.fresh = order == "fresh"

    def _build(self, samples: list) -> list:
        if isinstance(samples[0]["input_ids"], torch.Tensor):
            return [{k: torch.tensor(v.tolist()) for k, v in s.items()} for s in samples]
        return [{k: [x + 0 for x in v] for k, v in s.items()} for s in samples]

    def _seconds(self, fn) -> float:
        """One pass over the batches (as collate_compare.py times them)."""
        t0 = time.perf_counter()
        for b in self.batches:
            fn(b)
        return time.perf_counter() - t0

    def _fresh_seconds(self) -> tuple[float, float]:
        """One pass, each collate on samples built for it just before (untimed); the
        two collates take turns going first."""
        pairs = ((0, self.ours), (1, self.ref))
        t = [0.0, 0.0]
        for i, b in enumerate(self.batches):
            for side, fn in pairs if i % 2 else pairs[::-1]:
                samples = self._build(b)
                t0 = time.perf_counter()
                fn(samples)
                t[side] += time.perf_counter() - t0
        return t[0], t[1]

    def track_speedup(self, reference, order, leaves):
        ours, ref = [], []
        for i in range(self.rounds):  # interleaved: fair on a busy machine
            if self.fresh:
                o, r = self._fresh_seconds()
            elif i % 2:  # the order alternates; each pass is timed
                r, o = warmed(self._seconds, self.ref), warmed(self._seconds, self.ours)  # in steady state
            else:
                o, r = warmed(self._seconds, self.ours), warmed(self._seconds, self.ref)
            ours.append(o)
            ref.append(r)
        return statistics.median(ours) / statistics.median(ref)

    track_speedup.unit = "dyntile time / reference time"


class _Samples:
    """A map-style dataset over ready samples (``DataLoader`` needs ``__getitem__``)."""

    def __init__(self, samples: list):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        return self.samples[i]


def loader_seconds(collate, batches: list, workers: int = 1) -> float:
    """Seconds a ``DataLoader`` (``workers`` worker processes, in order, batches of
    ``len(batches[0])``) takes to deliver ``batches`` after its first one: the worker
    collates and the batch crosses to this process, as in training."""
    samples = [s for b in batches for s in b]
    loader = DataLoader(
        _Samples(samples),
        batch_size=len(batches[0]),
        collate_fn=collate,
        num_workers=workers,
        prefetch_factor=4 if workers else None,
    )
    it = iter(loader)
    next(it)  # worker start-up: not timed
    t0 = time.perf_counter()
    for _ in it:
        pass
    return time.perf_counter() - t0


class LoaderSpeedup:
    """Through a ``DataLoader`` with one worker: the collate runs in the worker and
    each batch crosses to the main process. ``reference="dyntile_torch_transfer"``
    is DynTileCollate with ``worker_transfer="torch"`` (a shared-memory segment per
    tensor, as every other collate's batches cross), which isolates what the
    one-buffer transfer saves. Lower is better."""

    params = [["pad_sequence", "dyntile_torch_transfer"], ["random", "grouped"]]
    param_names = ["reference", "order"]
    timeout = 300

    def setup(self, reference, order):
        lengths, self.batches = make_batches("tensors", n_batches=24, order=order)
        self.ours = make_collate("dyntile", "tensors", lengths)
        if reference == "pad_sequence":
            self.ref = pad_sequence_collate
        else:
            from loaders import DynTileCollate

            self.ref = DynTileCollate(pad_values={"input_ids": 0, "labels": -100}, worker_transfer="torch")

    def track_speedup(self, reference, order):
        ours, ref = [], []
        turns = ((self.ours, ours), (self.ref, ref))
        for i in range(5):  # interleaved, alternating who goes first
            for fn, times in turns if i % 2 else turns[::-1]:
                times.append(loader_seconds(fn, self.batches))
        return statistics.median(ours) / statistics.median(ref)

    track_speedup.unit = "dyntile time / reference time"


class CollateMemory:
    """Peak memory of one collate of 64 long samples (2k-16k tokens)."""

    params = [["dyntile", "pad_sequence"]]
    param_names = ["library"]

    def setup(self, library):
        if torch is None:
            raise NotImplementedError("torch is not installed")
        rng = np.random.default_rng(0)
        self.samples = [
            {
                "input_ids": torch.from_numpy(rng.integers(1, 30522, int(n))),
                "labels": torch.from_numpy(rng.integers(1, 30522, int(n))),
            }
            for n in rng.integers(2048, 16384, BATCH)
        ]
        self.collate = make_collate(library, "tensors", np.array([16384]))

    def peakmem_collate(self, library):
        self.collate(self.samples)
