"""``Corpus``: the token sequences (or only their lengths) the demo batches and trains on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dyntile.cli.errors import CLIError
from dyntile.cli.tokenizer import SPECIALS, WordTokenizer
from dyntile.dtypes import as_int64

__all__ = ["Corpus"]

_SYNTHETIC_VOCAB = 4096
#: token ids a corpus may hold: a model has one embedding row per id (the demo's 2**20 rows of width 64
#: are 256 MiB, four times that with the optimizer's state), so larger ids are refused before any run
MAX_VOCAB = 2**20


@dataclass(frozen=True)
class Corpus:
    """Ragged token sequences: ``lengths`` int64 ``(N,)`` and ``sequence(i)`` int64 ``(lengths[i],)``.

    When only lengths are known (a lengths file), ``sequence(i)`` draws ids at random
    from ``seed`` and ``i`` (deterministic; throughput is real, the loss is not).

    >>> c = Corpus.from_lengths([3, 5], name="toy")
    >>> c.lengths.tolist(), c.sequence(1).shape, c.synthetic
    ([3, 5], (5,), True)
    """

    name: str
    lengths: np.ndarray
    vocab_size: int
    sequences: Sequence[np.ndarray] | None = None
    seed: int = 0

    @property
    def synthetic(self) -> bool:
        """True when token ids are drawn at random (only lengths were given)."""
        return self.sequences is None

    def __len__(self) -> int:
        return len(self.lengths)

    def sequence(self, i: int) -> np.ndarray:
        """Token ids of sample ``i`` (int64, 1-D)."""
        if self.sequences is not None:
            return self.sequences[i]
        rng = np.random.default_rng((self.seed, int(i)))
        return rng.integers(len(SPECIALS), self.vocab_size, size=int(self.lengths[i]), dtype=np.int64)

    @classmethod
    def from_lengths(cls, lengths, name: str, seed: int = 0, lines: Sequence[int] | None = None) -> Corpus:
        """Lengths only; ids are drawn at random per sample. ``lines``: the line of the file each
        length came from, named in errors (else its index)."""
        return cls(name, _check_lengths(lengths, name, lines), _SYNTHETIC_VOCAB, None, seed)

    @classmethod
    def from_sequences(cls, sequences: Sequence, name: str, lines: Sequence[int] | None = None) -> Corpus:
        """Token id sequences (non-empty, non-negative integers below ``MAX_VOCAB``); the
        vocabulary is ``max id + 1``. ``lines``: the line of the file each sequence came from,
        named in errors (else ``sequence i``)."""
        seqs = [_check_ids(s, _sample(i, lines), name) for i, s in enumerate(sequences)]
        lengths = _check_lengths([len(s) for s in seqs], name, lines)
        tops = [
            int(s.max()) if s.size else 0 for s in seqs
        ]  # before the int64 cast: uint64 ids stay as they are
        top = max(tops, default=0)
        if top >= MAX_VOCAB:
            raise CLIError(
                f"{name}: token ids should be below {MAX_VOCAB} (2**20: a model has one embedding row "
                f"per id), but the largest is {top} ({_sample(tops.index(top), lines)}); renumber the ids "
                f"densely first, e.g. numpy.unique(ids, return_inverse=True)[1]"
            )
        return cls(name, lengths, max(top + 1, len(SPECIALS) + 1), [s.astype(np.int64) for s in seqs])

    @classmethod
    def from_texts(cls, texts: Sequence[str], name: str, vocab_size: int = 4096) -> Corpus:
        """Texts tokenized by a :class:`WordTokenizer` fitted on them."""
        tok = WordTokenizer.fit(texts, vocab_size=vocab_size)
        seqs = tok.encode_all(texts)
        return cls(name, _check_lengths([len(s) for s in seqs], name), tok.vocab_size, seqs)

    def truncated(self, max_length: int) -> Corpus:
        """Explicit truncation: every sequence cut to at most ``max_length`` tokens."""
        lengths = np.minimum(self.lengths, max_length)
        seqs = None if self.sequences is None else [s[:max_length] for s in self.sequences]
        return Corpus(self.name, lengths, self.vocab_size, seqs, self.seed)


def _sample(i: int, lines: Sequence[int] | None) -> str:
    """How an error names sample ``i``: its line in the file when known, else its index."""
    return f"sequence {i}" if lines is None else f"line {lines[i]}"


def _number(n: int) -> str:
    """``n`` for an error message; a number of thousands of digits is named by its size."""
    digits = len(str(abs(n))) if n.bit_length() < 10_000 else None
    return str(n) if digits is not None and digits <= 40 else f"a number of {digits or 'over 3000'} digits"


def _check_lengths(lengths, name: str, lines: Sequence[int] | None = None) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.dtype.kind in "fO" and isinstance(lengths, list):  # 2**63 becomes a float, 2**70 an object
        for i, n in enumerate(lengths):
            if isinstance(n, int) and n.bit_length() > 63:
                where = f"lengths[{i}]" if lines is None else f"line {lines[i]}"
                raise CLIError(f"{name}: lengths should be below 2**63, but {where} is {_number(n)}")
    if arr.ndim != 1 or arr.size == 0:
        raise CLIError(f"{name}: expected a non-empty 1-D list of lengths, but got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise CLIError(f"{name}: lengths should be integers, but got dtype {arr.dtype}")
    try:
        arr = as_int64(arr).copy()
    except ValueError as exc:
        raise CLIError(f"{name}: {exc}") from None
    bad = np.flatnonzero(arr < 1)
    if bad.size:
        i = int(bad[0])
        where = f"lengths[{i}]={arr[i]}" if lines is None else f"{arr[i]} at line {lines[i]}"
        raise CLIError(f"{name}: lengths should be positive integers, but got {where}")
    return arr


def _check_ids(seq, where: str, name: str) -> np.ndarray:
    """``seq`` as a 1-D integer array, or a ``CLIError`` naming ``where`` (``line 3``, ``sequence 2``)."""
    try:
        arr = np.asarray(seq)
    except ValueError as exc:
        raise CLIError(f"{name}: {where} is not a flat list of token ids ({exc})") from None
    if arr.dtype.kind in "fO" and isinstance(seq, list):  # NumPy holds 2**63 as a float, 2**70 as an object
        big = [n for n in seq if isinstance(n, int) and n.bit_length() > 63]
        if big:
            raise CLIError(
                f"{name}: token ids should be from 0 to below {MAX_VOCAB} (2**20), but {where} holds "
                f"{_number(big[0])}"
            )
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise CLIError(
            f"{name}: {where} should be a 1-D list of integer token ids, but got shape {arr.shape} "
            f"dtype {arr.dtype}"
        )
    if arr.size == 0:
        raise CLIError(f"{name}: {where} holds no token ids; every sample needs at least one")
    if arr.min() < 0:
        raise CLIError(f"{name}: token ids should be non-negative, but {where} holds {arr.min()}")
    return arr
