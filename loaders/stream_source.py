"""Reading a stream's source: which part this process reads, and each sample's length.

A streaming loader (:mod:`loaders.stream_window`) reads its source through
:class:`StreamSource`:

* the source is *re-iterable*: an iterable whose ``iter()`` starts over (a list, a
  torch ``IterableDataset``, a ``datasets.IterableDataset``) or a function that
  returns a fresh iterator (a generator function). A one-shot iterator (a generator
  object) is refused: a second epoch and an exact resume both read the source again;
* each *reader* (one ``DataLoader`` worker of one rank) reads its own part:
  sample ``g`` of the source goes to reader ``g % readers``, with
  ``readers = ranks * workers``, unless the source already splits itself
  (``source_shards``): ``"workers"`` for a source that splits among ``DataLoader``
  workers (a ``datasets.IterableDataset`` does, by its shards), ``"ranks"`` for one
  split among ranks (after ``datasets.distributed.split_dataset_by_node``), both
  for one that does both; ``None`` (default) detects a ``datasets.IterableDataset``
  (``"workers"``, and ``"ranks"`` too once split by node);
* every sample is measured by ``length`` (default: the length of its ``input_ids``,
  or ``len(sample)``) and checked against its token sequences, so the collate
  lays it out exactly as the planner did. An error names the sample's position
  in this reader's part (and in the source when the source is not pre-split).
"""

from __future__ import annotations

import gc
import itertools
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter, itemgetter

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import get_worker_info

from dyntile.tensor_reader import describe_rows, native_module

from .distributed import launcher_world_size, resolve_replicas

__all__ = ["StreamSource", "PartReader", "SOURCE_SHARDS", "token_lengths", "process_ranks"]

SOURCE_SHARDS = ("ranks", "workers")
_DEFAULT_KEY = "input_ids"


def _shape_length(v) -> int | None:
    shape = v.shape  # not len(): a tensor's goes through torch's function dispatch
    return int(shape[0]) if len(shape) else None


_LENGTH_OF = {list: len, tuple: len, torch.Tensor: _shape_length, np.ndarray: _shape_length}


def _leaf_length(v) -> int | None:
    """Tokens of a token sequence (a list, tuple, or an array or tensor of >= 1 dim), else ``None``."""
    f = _LENGTH_OF.get(type(v))
    if f is not None:
        return f(v)
    if isinstance(v, (torch.Tensor, np.ndarray)):
        return _shape_length(v)
    return len(v) if isinstance(v, (list, tuple)) else None


_SEQUENCES = (list, tuple, torch.Tensor, np.ndarray)
_NOT_TOKENS = "not tokens"  # a column of values that are no token sequences (an id, a label)
_shape = attrgetter("shape")
_first = itemgetter(0)


def _column_lengths(values: list):
    """int64 lengths of a column of one key's values when :func:`_leaf_length` would give
    every one of them the same way (all lists and tuples; all tensors or arrays of >= 1 dim);
    ``_NOT_TOKENS`` when it gives none of them a length; ``None`` otherwise (mixed kinds,
    subclasses), for the per-sample rule to settle. 1-D CPU tensors are read natively
    where :mod:`dyntile.tensor_reader` can.

    >>> _column_lengths([[1, 2], (3,)]).tolist(), _column_lengths([7, 8]), _column_lengths([[1], 2])
    ([2, 1], 'not tokens', None)
    """
    n = len(values)
    if isinstance(values[0], torch.Tensor):
        read = describe_rows(values)  # None unless every value is a plain 1-D CPU tensor of one dtype
        if read is not None:
            return read[0].reshape(n)
    kinds = set(map(type, values))
    if kinds <= {list, tuple}:
        return np.fromiter(map(len, values), np.int64, n)
    if kinds <= {torch.Tensor, np.ndarray}:
        shapes = list(map(_shape, values))
        dims = set(map(len, shapes))
        if 0 not in dims:
            return np.fromiter(map(_first, shapes), np.int64, n)
        return _NOT_TOKENS if dims == {0} else None
    if not any(issubclass(k, _SEQUENCES) for k in kinds):
        return _NOT_TOKENS
    return None


def _dict_columns(samples: list) -> tuple[list, list] | None:
    """``(keys, columns)`` of exact dicts with one key set (sample 0's keys, per key its
    values), read natively where :mod:`dyntile.tensor_reader` can; ``None`` for any other list."""
    native = native_module()
    if native is not None:
        try:
            return native.dict_columns(samples)
        except Exception:  # a key's __eq__ raised: the per-sample route says where
            return None
    if set(map(type, samples)) != {dict}:
        return None
    keys = list(samples[0])
    if set(map(len, samples)) != {len(keys)}:
        return None
    try:
        return keys, [list(map(itemgetter(k), samples)) for k in keys]
    except KeyError:  # the same number of keys, not the same keys
        return None


def token_lengths(sample) -> dict:
    """``{key: length}`` of a sample's token sequences (a bare sequence: ``{"input_ids": len}``).

    >>> token_lengths({"input_ids": [1, 2, 3], "labels": [1, 2, 3], "id": 7})
    {'input_ids': 3, 'labels': 3}
    """
    if isinstance(sample, Mapping):
        out = {}
        for k, v in sample.items():
            n = _leaf_length(v)
            if n is not None:
                out[k] = n
        return out
    n = _leaf_length(sample)
    return {} if n is None else {_DEFAULT_KEY: n}


def _default_length(sample) -> int:
    if isinstance(sample, Mapping):
        if _DEFAULT_KEY not in sample:
            raise KeyError(
                f"the sample has no {_DEFAULT_KEY!r} key (keys {sorted(sample)}): pass length= "
                "(a function of a sample, or a key name) to say how long a sample is"
            )
        return len(sample[_DEFAULT_KEY])
    return len(sample)


def _check_shards(source_shards, source) -> frozenset:
    if source_shards is None:  # a datasets.IterableDataset splits itself among workers, and ranks once split
        if type(source).__module__.startswith("datasets") and hasattr(source, "n_shards"):
            split = getattr(source, "_distributed", None) is not None
            return frozenset({"workers", "ranks"} if split else {"workers"})
        return frozenset()
    shards = (source_shards,) if isinstance(source_shards, str) else tuple(source_shards)
    bad = [s for s in shards if s not in SOURCE_SHARDS]
    if bad:
        raise ValueError(
            f"source_shards should be None or some of {SOURCE_SHARDS} (what the source splits "
            f"itself by), but got {source_shards!r}"
        )
    return frozenset(shards)


def process_ranks(num_replicas: int | None = None, rank: int | None = None) -> tuple[int, int]:
    """``(num_replicas, rank)`` as :func:`loaders.distributed.resolve_replicas` finds them, and in
    a ``DataLoader`` worker without a process group (started by spawn or forkserver) from the
    launcher's ``WORLD_SIZE`` and ``RANK``.

    >>> process_ranks(4, 1)
    (4, 1)
    """
    if get_worker_info() is not None and num_replicas is None and rank is None and not dist.is_initialized():
        num_replicas, rank = launcher_world_size(), int(os.environ.get("RANK", "0"))
    return resolve_replicas(num_replicas, rank)


class StreamSource:
    """The samples of one reader, each with its position and length.

    ``source``: a re-iterable or a function returning a fresh iterator (see the module
    docstring); ``length``: ``None``, a key name, or a function ``sample -> int``;
    ``exact``: every token sequence of a sample must have the measured length
    (packing); else the longest one must (bucketing, where keys may differ).

    >>> StreamSource([[1, 2], [3], [4, 5, 6]]).probe(10).tolist()
    [2, 1, 3]
    """

    def __init__(self, source, *, length=None, source_shards=None, exact: bool = True):
        if isinstance(source, Iterator) and not callable(source):
            raise TypeError(
                f"source should be re-iterable: an iterable whose iter() starts over (a list, a torch "
                f"IterableDataset, a datasets.IterableDataset) or a function returning a fresh iterator "
                f"(a generator function), but got a one-shot {type(source).__name__}, which a second "
                f"epoch or a resume cannot read again"
            )
        if not (isinstance(source, Iterable) or callable(source)):
            raise TypeError(f"source should be an iterable of samples, but got {type(source).__name__}")
        self.source = source
        self.shards = _check_shards(source_shards, source)
        if length is None:
            self._length: Callable = _default_length
        elif isinstance(length, str):
            key = length
            self._length = lambda s: len(s[key])
        elif callable(length):
            self._length = length
        else:
            raise TypeError(
                f"length should be None, a key name or a function of a sample, but got {length!r}"
            )
        self.exact = bool(exact)

    def reader(self, num_replicas: int | None = None, rank: int | None = None) -> tuple[int, int]:
        """``(index, count)`` of the reader this process is: its rank and ``DataLoader``
        worker, less what the source splits itself."""
        info = get_worker_info()
        W, w = (1, 0) if info is None else (info.num_workers, info.id)
        R, r = process_ranks(num_replicas, rank)
        if "ranks" in self.shards:
            R, r = 1, 0
        if "workers" in self.shards:
            W, w = 1, 0
        return r * W + w, R * W

    def _open(self) -> Iterator:
        src = self.source
        if callable(src) and not isinstance(src, Iterable):
            src = src()
        it = iter(src)
        return it

    def part(self, reader: tuple[int, int]) -> PartReader:
        """A :class:`PartReader` of reader ``reader`` = ``(index, count)``, from the start."""
        return PartReader(self, reader)

    def _where(self, pos: int, g: int, count: int) -> str:
        """A sample's position in this reader's part, and in the source when that differs."""
        return f"sample {pos} of this reader" + (f" (sample {g} of the source)" if count > 1 else "")

    def measure(self, sample, pos: int = 0, g: int = 0, count: int = 1) -> int:
        """The length of a sample, checked: an int ``>= 0`` that its token sequences agree with."""
        if self._length is _default_length and type(sample) is dict and len(sample) == 1:
            v = sample.get(_DEFAULT_KEY)  # one token key: nothing to disagree with
            f = _LENGTH_OF.get(type(v))
            n = None if f is None else f(v)
            if n is not None:
                return n
        tokens = token_lengths(sample)
        n = tokens.get(_DEFAULT_KEY) if self._length is _default_length else None
        if n is None:
            try:
                n = operator.index(self._length(sample))
            except Exception as e:
                raise type(e)(f"cannot measure {self._where(pos, g, count)}: {e}") from e
            if n < 0:
                raise ValueError(f"{self._where(pos, g, count)} has length {n}; lengths should be >= 0")
        if len(tokens) > 1 or (tokens and self._length is not _default_length):
            lens = tokens.values()
            if (self.exact and min(lens) != n) or max(lens) != n:
                raise ValueError(
                    f"{self._where(pos, g, count)}: its measured length is {n}, but its token sequences "
                    f"have lengths {tokens}; length= should give the number of tokens the collate lays out"
                )
        return n

    def measure_many(self, samples: list, pos: int = 0, index: int = 0, count: int = 1) -> np.ndarray:
        """int64 ``(len(samples),)``: :meth:`measure` of consecutive samples of a part, from
        position ``pos`` of reader ``(index, count)``. Samples of one layout (dicts of the same
        keys, or bare sequences of one kind) are measured and checked a key at a time, and
        any other window sample by sample; an error names the first bad sample either way.

        >>> StreamSource([]).measure_many([{"input_ids": [1, 2], "id": 0}, {"input_ids": [3], "id": 1}])
        array([2, 1])
        """
        lengths = self._bulk_lengths(samples) if self._length is _default_length else None
        if lengths is None:
            lengths = [self.measure(s, p, p * count + index, count) for p, s in enumerate(samples, pos)]
        return np.asarray(lengths, np.int64).reshape(len(samples))

    def _bulk_lengths(self, samples: list) -> np.ndarray | None:
        """What :meth:`measure` gives every sample under the default ``length``, computed a key
        at a time; ``None`` when the samples do not share one layout or one of them is bad
        (:meth:`measure` then finds which, and says so)."""
        if not samples:
            return np.zeros(0, np.int64)
        if type(samples[0]) is not dict:  # bare token sequences of one kind
            n = _column_lengths(samples) if len(set(map(type, samples))) == 1 else None
            return None if n is None or n is _NOT_TOKENS else n
        got = _dict_columns(samples)
        if got is None:
            return None
        lengths, others = None, []
        for key, column in zip(*got):
            n = _column_lengths(column)
            if n is None:
                return None
            if key == _DEFAULT_KEY:
                lengths = n
            elif n is not _NOT_TOKENS:
                others.append(n)
        if lengths is None or lengths is _NOT_TOKENS:
            return None
        for n in others:  # every token sequence of a sample has its length (exact) or fits in it
            if (n != lengths).any() if self.exact else (n > lengths).any():
                return None
        return lengths

    def probe(self, n: int) -> np.ndarray:
        """int64 ``(<= n,)``: the lengths of the first ``n`` samples of the source (or of this
        process's part, for a source that splits itself by rank)."""
        return np.asarray(self.part((0, 1)).take(n)[1], dtype=np.int64)


#: samples read between two collections of the youngest generation: a dict and a tensor
#: each, about half a KB, so that a chunk is still in a core's L2 cache when it is scanned
READ_CHUNK = 1024


def _plan_collections(k: int) -> int:
    """Samples to read between two explicit collections of the youngest generation while
    ``k`` samples are read with the collector paused (0: none, the collector's automatic
    collections are off); first, between windows, the two young generations are collected
    if generation 1's count could otherwise pass its threshold before the window is done.

    A window's samples are alive from their read until the window is done, and a stream
    always holds a window. Each is scanned once by a collection of the youngest
    generation: in chunks, as they are read and still in cache, rather than all at once
    by the first automatic collection after the read, when most are not. A collection
    of generation 1, whenever it comes, moves the window alive then (thousands of
    objects) to the oldest generation, and enough there start a full collection of
    every object of the process; before a window is read, the window before it gone,
    it finds little alive (the carried samples): it is cheap and restarts the count to
    the next one. The collector's thresholds are read, never changed.

    >>> _plan_collections(4096) in (0, 1024)
    True
    """
    t0, t1, _ = gc.get_threshold()
    if not t0 or k < 1:
        return 0
    # the chunks' collections add to generation 1's count: at most half its threshold less
    # one of them, so that the count stays below it while the window is alive
    chunks = max(1, min(-(-k // READ_CHUNK), t1 // 2 - 1))
    if gc.get_count()[1] + chunks + 2 > t1:
        gc.collect(1)
    return -(-k // chunks)


class PartReader:
    """One reader's part of a source, read some samples at a time.

    >>> part = StreamSource([[1, 2], [3], [4, 5, 6], [7]]).part((1, 2))   # reader 1 of 2
    >>> samples, lengths, ended = part.take(5)
    >>> samples, lengths.tolist(), ended
    ([[3], [7]], [1, 1], True)
    """

    def __init__(self, source: StreamSource, reader: tuple[int, int]):
        index, count = reader
        it = source._open()
        self._it = it if count == 1 else itertools.islice(it, index, None, count)
        self._src, self._index, self._count = source, index, count
        self.pos = 0  # samples of the part read so far

    def take(self, k: int) -> tuple[list, np.ndarray, bool]:
        """``(samples, lengths, ended)``: the next ``k`` samples of the part (fewer when it
        ``ended``), measured and checked (:meth:`StreamSource.measure_many`, a chunk at a
        time as they are read); int64 lengths.
        A source that raises does so after the samples before it are checked, naming the
        position it raised at."""
        samples: list = []
        parts: list = []
        failed = None
        pos, count, index = self.pos, self._count, self._index
        # The collector is paused while a window is read. Its samples live about a window
        # (until their batch is yielded): automatic collections during the read would move
        # most of them to the oldest generation, and enough there start a full collection,
        # which scans every object of the process. Read with the collector paused, each
        # chunk is measured and collected while in cache (_plan_collections), and most
        # samples are freed before they grow old. Paused only if it was on; on again
        # before anything is raised.
        paused = gc.isenabled()
        chunk = _plan_collections(k) if paused else 0
        if paused:
            gc.disable()
        try:
            while True:
                first = len(samples)
                want = min(chunk or k, k - first)
                try:
                    samples.extend(itertools.islice(self._it, want))  # keeps what was read before a raise
                except Exception as e:
                    failed = e
                if len(samples) > first:
                    parts.append(self._src.measure_many(samples[first:], pos + first, index, count))
                    if chunk:
                        gc.collect(0)
                if failed is not None or len(samples) - first < want or len(samples) == k:
                    break
        finally:
            if paused:
                gc.enable()
        lengths = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else np.zeros(0, np.int64)
        self.pos = pos = pos + len(samples)
        if failed is not None:
            where = self._src._where(pos, pos * count + index, count)
            raise RuntimeError(
                f"the source raised while reading {where}: {type(failed).__name__}: {failed}"
            ) from failed
        return samples, lengths, len(samples) < k
