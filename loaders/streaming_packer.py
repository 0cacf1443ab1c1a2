"""``StreamingPacker``: whole samples of a stream packed into fixed ``[B, T]`` batches.

The streaming form of :class:`~loaders.packing_sampler.PackingBatchSampler`: each
window of ``buffer_size`` samples (:mod:`loaders.stream_window`) is packed by the
same packer's best fit (:func:`dyntile.planning.packing.place_rows`, over the
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

from dyntile.planning.packing import check_packing_overflow, deal_rows, packing_shapes, place_rows
from dyntile.planning.packing_cost import RowCost, cost_model
from dyntile.shapes import check_multiple, round_up

from .stream_ranks import rank0_value
from .stream_window import StreamWindows, window_args

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
    cost: one ``cost=`` :class:`~dyntile.planning.packing_cost.RowCost`, or its options
    as keywords (``attention``, ``causal``, ``d_model``, ``attention_weight``,
    ``step_cost``: those of :func:`~dyntile.planning.row_cost`) fix :attr:`shapes`
    (module docstring). ``buffer_size``: samples planned together (at least ``B``); a
    larger window mixes samples from further apart in the stream and leaves a little
    less padding, but holds each sample longer (from its read until its batch is
    yielded), colder in cache and scanned by Python's collector while it lives, and
    has fewer windows to plan: windows of 2048 to 4096 give the fastest loader pass
    (``asv_benches/streaming_compare.py --buffer``), much smaller ones a slower one.
    ``length``: how long a sample is (default: its ``input_ids``, or ``len(sample)``;
    a key name or a function), checked against its token sequences.
    ``source_shards``: what the source splits itself by (``"ranks"``, ``"workers"``),
    so it is not split twice; see :mod:`loaders.stream_source`. ``drop_last``: when one
    rank runs out of data first, the others stop too, dropping what they hold
    (``True``), or go on while it repeats its batches (``False``); both are counted in
    :attr:`report` and warned about (:mod:`loaders.stream_ranks`). ``balance_steps``:
    the batches of a window are dealt by cost into groups of that many steps, so that
    every rank and worker takes batches of comparable cost at each step, without
    communication (*Cost balance* in :mod:`loaders.stream_window`). Each batch is a list
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
        balance_steps: int = 8,
        cost: RowCost | None = None,
        **cost_options,
    ):
        super().__init__(source, exact=True, **window_args(locals()))
        self.overflow = check_packing_overflow(overflow)
        m = check_multiple(multiple)
        self._cost = cost_model(cost, max_tokens=self.max_tokens, caller="StreamingPacker", **cost_options)
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

    def _plan_window(self, lengths: np.ndarray, seed: int, last: bool):
        n = lengths.size
        if n == 0:
            return [], np.zeros(0), np.zeros(0, np.int64)
        rng = np.random.default_rng([self.seed, seed])
        perm = rng.permutation(n) if self.shuffle else np.arange(n, dtype=np.int64)
        # Placed once, by the packer's best fit over the window sorted by decreasing
        # length (the permutation breaks ties between equal lengths at random): each
        # shape's rows, in the order they opened, are then dealt into batches here
        # without the spare ones.
        lp = lengths[perm]
        top = int(lp.max())
        # decreasing length, stable: a radix sort of 16-bit keys where lengths allow it
        key = (top - lp).astype(np.uint16) if top < 1 << 16 else -lp
        order = np.argsort(key, kind="stable")
        lay = place_rows(lp[order], self.shapes, self.overflow)
        index = perm[order][lay.item]
        if len(self.shapes) == 1:
            rows = [_Rows(lay.bin, index, lay.size, lay.start, lay.bin_cap.size)]
        else:
            rows = []
            for _, T in self.shapes:
                mine = lay.bin_cap == T
                rank = np.cumsum(mine) - 1
                sel = mine[lay.bin]
                row = rank[lay.bin[sel]]
                rows.append(_Rows(row, index[sel], lay.size[sel], lay.start[sel], int(rank[-1]) + 1))
        spare = [] if last else [r.spare(shape[0], lengths) for r, shape in zip(rows, self.shapes)]
        taken = [r.index[r.in_rows(sp)] for r, sp in zip(rows, spare)]
        carry = np.concatenate(taken) if taken else np.zeros(0, np.int64)
        if carry.size > self.buffer_size // 2:  # a window must take new samples: carry nothing
            spare, carry = [], np.zeros(0, np.int64)
        batches, costs = [], []
        for k, (r, shape) in enumerate(zip(rows, self.shapes)):
            b, c = r.deal(shape, spare[k] if spare else np.zeros(0, np.int64), self._cost)
            batches += b
            costs.append(c)
        costs = np.concatenate(costs)
        if self.shuffle:  # ties in cost are taken in a random order
            order = rng.permutation(len(batches))
            batches, costs = [batches[k] for k in order.tolist()], costs[order]
        return batches, costs, carry


class _Rows:
    """The pieces of one shape's rows, sorted by row (each row's opener first): ``row``
    (numbered in the order the rows opened), ``index`` (sample index in the window),
    ``size``, ``start`` (as in :class:`~dyntile.planning.packing.PackedBatch`)."""

    def __init__(self, row: np.ndarray, index: np.ndarray, size: np.ndarray, start: np.ndarray, n_rows: int):
        self.row, self.index, self.size, self.start, self.n_rows = row, index, size, start, n_rows

    def spare(self, B: int, lengths: np.ndarray) -> np.ndarray:
        """The rows beyond whole batches of ``B`` rows (``n_rows % B`` of them, the
        emptiest), to carry to the next window; none when too few rows hold whole samples."""
        k = self.n_rows % B
        if not k:
            return np.zeros(0, np.int64)
        split = np.bincount(self.row, weights=self.size != lengths[self.index], minlength=self.n_rows)
        whole = np.flatnonzero(split == 0)
        if k > whole.size:
            return np.zeros(0, np.int64)
        fill = np.bincount(self.row, weights=self.size, minlength=self.n_rows)
        return np.sort(whole[np.argsort(fill[whole], kind="stable")[:k]])

    def in_rows(self, rows: np.ndarray) -> np.ndarray:
        """bool ``(pieces,)``: the pieces that lie in ``rows``."""
        mask = np.zeros(self.n_rows, bool)
        mask[rows] = True
        return mask[self.row]

    def deal(self, shape: tuple, spare: np.ndarray, model: RowCost) -> tuple[list, np.ndarray]:
        """The batches of the rows less ``spare`` (each a list of window indices in the order
        :class:`~loaders.packed_collate.PackedCollate` decodes), and their costs. Rows keep
        their order: a row's first sample did not fit any row opened before it, so the
        decoder splits the rows where the packer did, whichever rows were taken out."""
        if self.n_rows == spare.size:  # no rows, or all of them carried on
            return [], np.zeros(0)
        row, start, size, index = self.row, self.start, self.size, self.index
        if spare.size:
            keep = np.ones(self.n_rows, bool)
            keep[spare] = False
            kept = keep[row]
            row = (np.cumsum(keep) - 1)[row[kept]]
            start, size, index = start[kept], size[kept], index[kept]
        n_rows = self.n_rows - spare.size
        cont = row[start > 0]  # rows 2.. of a split sample stay with the row before
        if cont.size:
            opens_group = np.ones(n_rows, bool)
            opens_group[cont] = False
            batch = deal_rows(n_rows, np.flatnonzero(opens_group), shape[0], 1)[row]
            whole = start == 0
            index, in_batch = index[whole], batch[whole]
        else:
            batch = in_batch = deal_rows(n_rows, np.arange(n_rows), shape[0], 1)[row]
        n_batches = int(batch[-1]) + 1
        bounds = np.searchsorted(in_batch, np.arange(n_batches + 1)).tolist()
        index = index.tolist()
        out = [index[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        B, T = shape
        s = size.astype(np.float64)  # integer sums below 2**53: exact in float64
        if model.attention == "dense":
            scores = np.full(n_batches, float(B * T * T))
        else:
            pairs = s * (s + 1) / 2 if model.causal else s * s
            scores = np.bincount(batch, weights=pairs, minlength=n_batches)
        return out, B * T + model.attention_weight * scores
