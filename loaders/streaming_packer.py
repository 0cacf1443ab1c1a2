"""``StreamingPacker``: whole samples of a stream packed into fixed ``[B, T]`` batches.

The streaming form of :class:`~loaders.packing_sampler.PackingBatchSampler`: each
window of ``buffer_size`` samples (:mod:`loaders.stream_window`) is packed by the
same packer (:func:`dyntile.planning.packing.pack_into_shapes`, best fit over the
window's samples sorted by length), and each batch is yielded as the list of its
samples in the order :class:`~loaders.packed_collate.PackedCollate` decodes, so
``DataLoader(packer, batch_size=None, collate_fn=PackedCollate(packer))`` lays the
rows out exactly as planned.

Shapes are fixed before the stream starts, since every window must use the same
ones: ``T = seq_len``, else the row length of least cost
(:func:`dyntile.planning.packing_cost.choose_seq_len`) for the first ``probe_size``
samples of the source; ``B = max_tokens // T``. Samples longer than ``T``
(``overflow``): ``"extend"`` gives them rows of ``T2 = max_len`` (default: the
whole budget, rounded down to ``multiple``), ``B2 = max_tokens // T2`` rows a
batch, topped up with short samples; ``"split"`` cuts them in chunks of ``T``;
``"error"`` refuses them. A sample that fits no shape raises ``ValueError`` with its
position, before any batch of its window is yielded. Zero-length samples are kept
(an empty segment, as the packer and collate treat them).
"""

from __future__ import annotations

import operator

import numpy as np

from dyntile.planning.packing import PackedBatch, check_packing_overflow, pack_into_shapes, packing_shapes
from dyntile.planning.packing_cost import RowCost, cost_model
from dyntile.shapes import check_multiple, round_up

from .stream_ranks import rank0_value
from .stream_window import StreamWindows

__all__ = ["StreamingPacker", "stream_shapes"]


def stream_shapes(seq_len: int, max_tokens: int, max_len: int | None, multiple: int, overflow: str) -> tuple:
    """The packing shapes of a stream: ``((B, T),)``, and ``(B2, T2)`` for ``overflow="extend"``.

    >>> stream_shapes(512, 4096, None, 8, "extend")
    ((8, 512), (1, 4096))
    >>> stream_shapes(512, 4096, 1000, 8, "extend"), stream_shapes(512, 4096, None, 8, "split")
    (((8, 512), (4, 1000)), ((8, 512),))
    """
    B = max_tokens // seq_len
    if B < 1:
        raise ValueError(f"max_tokens={max_tokens} is smaller than one row of seq_len={seq_len} tokens")
    if overflow != "extend":
        return ((B, seq_len),)
    T2 = max_tokens // multiple * multiple if max_len is None else round_up(max_len, multiple)
    if T2 > max_tokens:
        raise ValueError(f"max_len={max_len} does not fit the budget max_tokens={max_tokens} of one batch")
    return ((B, seq_len),) if T2 <= seq_len else ((B, seq_len), (max_tokens // T2, T2))


class StreamingPacker(StreamWindows):
    """An ``IterableDataset`` of packed batches over any stream of samples.

    ``source``: an iterable of samples that ``iter()`` starts over (a list, a torch or
    ``datasets`` ``IterableDataset``) or a generator function. ``max_tokens``: the
    budget of a batch; ``seq_len``, ``max_len``, ``overflow``, ``multiple`` and the
    cost options (``attention``, ``causal``, ``d_model``, ``attention_weight``,
    ``step_cost``, or one ``cost=`` :class:`~dyntile.planning.packing_cost.RowCost`) fix :attr:`shapes`
    (module docstring). ``buffer_size``: samples planned together (at least ``B``).
    ``length``: how long a sample is (default: its ``input_ids``, or ``len(sample)``;
    a key name or a function), checked against its token sequences.
    ``source_shards``: what the source splits itself by (``"ranks"``, ``"workers"``),
    so it is not split twice; see :mod:`loaders.stream_source`. ``drop_last``: when one
    rank runs out of data first, the others stop too, dropping what they hold
    (``True``), or go on while it repeats its batches (``False``); both are counted in
    :attr:`report` and warned about (:mod:`loaders.stream_ranks`). Each batch is a list
    of samples; resumable with :meth:`state_dict` (torchdata's ``StatefulDataLoader``).

    >>> packer = StreamingPacker([[1] * n for n in (5, 3, 6, 2, 7, 1)], max_tokens=16, seq_len=8,
    ...                          overflow="error", buffer_size=6)
    >>> packer.shapes, sorted(len(s) for b in packer for s in b)
    (((2, 8),), [1, 2, 3, 5, 6, 7])
    """

    def __init__(
        self,
        source,
        *,
        max_tokens: int,
        buffer_size: int = 4096,
        length=None,
        seed: int = 0,
        shuffle: bool = True,
        overflow: str = "extend",
        drop_last: bool = False,
        seq_len: int | None = None,
        max_len: int | None = None,
        multiple: int = 8,
        probe_size: int | None = None,
        source_shards=None,
        num_replicas: int | None = None,
        rank: int | None = None,
        attention: str = "varlen",
        causal: bool = True,
        d_model: int | None = None,
        attention_weight: float | None = None,
        step_cost: float | None = None,
        cost: RowCost | None = None,
    ):
        super().__init__(
            source,
            max_tokens=max_tokens,
            buffer_size=buffer_size,
            length=length,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            source_shards=source_shards,
            num_replicas=num_replicas,
            rank=rank,
            exact=True,
        )
        self.overflow = check_packing_overflow(overflow)
        m = check_multiple(multiple)
        options = dict(attention=attention, causal=causal, d_model=d_model, attention_weight=attention_weight)
        self._cost = cost_model(cost, max_tokens=self.max_tokens, step_cost=step_cost, **options)
        if seq_len is None:
            probe = self._source.probe(self.buffer_size if probe_size is None else operator.index(probe_size))
            if probe.size == 0:
                raise ValueError("the source yielded no sample to choose seq_len from: pass seq_len=")
            choice = packing_shapes(
                probe,
                max_tokens=self.max_tokens,
                multiple=m,
                overflow=self.overflow,
                cost=self._cost,
            )
            seq_len = rank0_value(choice[0][1], "ranks" in self._source.shards)
        T = operator.index(seq_len)
        if T < 1 or T % m:
            raise ValueError(f"seq_len should be a positive multiple of multiple={m}, but got seq_len={T}")
        self.shapes = stream_shapes(T, self.max_tokens, max_len, m, self.overflow)
        if self.buffer_size < self.shapes[0][0]:
            raise ValueError(
                f"buffer_size={self.buffer_size} is smaller than one batch of {self.shapes[0][0]} rows "
                f"(shapes={self.shapes}): every batch would be part empty; raise buffer_size"
            )

    def _config(self) -> dict:
        return {**super()._config(), "shapes": [list(s) for s in self.shapes], "overflow": self.overflow}

    def _check_window(self, lengths: np.ndarray, positions: np.ndarray) -> None:
        (B, T), T_max = self.shapes[0], self.shapes[-1][1]
        if self.overflow == "split":
            bad = -(-lengths // T) > B
        else:
            bad = lengths > T_max
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"sample {int(positions[i])} of this reader has length {int(lengths[i])}, longer than "
                f"every shape {self.shapes} can hold (overflow={self.overflow!r}); raise max_len or "
                "max_tokens, or pass overflow='split'"
            )

    def _pack(self, lengths: np.ndarray, seed: int) -> list:
        return pack_into_shapes(
            lengths,
            self.shapes,
            overflow=self.overflow,
            pool_size=None,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=seed,
        )

    def _plan_window(self, lengths: np.ndarray, seed: int, last: bool):
        if lengths.size == 0:
            return [], np.zeros(0), np.zeros(0, np.int64)
        packed = self._pack(lengths, seed)
        carry = np.zeros(0, np.int64) if last else self._spare_rows(packed, lengths)
        if carry.size:  # pack the rest again: whole batches now, the spare rows wait for the next window
            keep = np.ones(lengths.size, bool)
            keep[carry] = False
            keep = np.flatnonzero(keep)
            packed = [_take(b, keep) for b in self._pack(lengths[keep], seed)]
        return [b.sample_order for b in packed], self._costs(packed), carry

    def _spare_rows(self, packed: list, lengths: np.ndarray) -> np.ndarray:
        """Window indices of the samples of the rows beyond whole batches (per shape,
        rows mod ``B`` of them, the emptiest), to carry on; none when they are split
        samples or more than half the buffer."""
        carry = []
        for B, T in self.shapes:
            mine = [b for b in packed if b.shape == (B, T) and b.rows.size]
            if not mine:
                continue
            rows = np.array([int(b.rows[-1]) + 1 for b in mine])
            pieces = np.array([b.rows.size for b in mine])
            # the rows of all these batches numbered one after another, pieces in row order
            row = np.concatenate([b.rows for b in mine]) + np.repeat(np.cumsum(rows) - rows, pieces)
            index = np.concatenate([b.indices for b in mine])
            size = np.concatenate([b.sizes for b in mine])
            n_rows = int(rows.sum())
            whole = np.flatnonzero(np.bincount(row, weights=size != lengths[index], minlength=n_rows) == 0)
            spare = n_rows % B
            if spare and spare <= whole.size:
                fill = np.bincount(row, weights=size, minlength=n_rows)
                bounds = np.searchsorted(row, np.arange(n_rows + 1))
                for r in whole[np.argsort(fill[whole], kind="stable")[:spare]].tolist():
                    carry.append(index[bounds[r] : bounds[r + 1]])
        out = np.concatenate(carry) if carry else np.zeros(0, np.int64)
        return out if out.size <= self.buffer_size // 2 else np.zeros(0, np.int64)

    def _costs(self, packed: list) -> np.ndarray:
        """Each batch's cost (slots and attention scores, :mod:`dyntile.planning.packing_cost`)."""
        w, causal = self._cost.attention_weight, self._cost.causal
        if not packed:
            return np.zeros(0)
        B, T = np.array([b.shape for b in packed], np.int64).T
        if self._cost.attention == "dense":
            scores = B * T * T
        else:  # integer sums below 2**53: exact in float64
            s = np.concatenate([b.sizes for b in packed]).astype(np.float64)
            batch = np.repeat(np.arange(len(packed)), [b.sizes.size for b in packed])
            scores = np.bincount(batch, weights=s * (s + 1) / 2 if causal else s * s, minlength=len(packed))
        return B * T + w * scores


def _take(b: PackedBatch, keep: np.ndarray) -> PackedBatch:
    """``b`` with its sample indices mapped through ``keep`` (positions in a subset -> in the window)."""
    return PackedBatch(b.shape, keep[b.indices], b.rows, b.offsets, b.sizes, b.starts)
