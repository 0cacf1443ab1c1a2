"""Packing: whole samples laid end to end in fixed ``[B, T]`` batches.

Bucketing bounds the number of shapes but still pads every sample up to its bucket
boundary; packing puts several samples in one row of ``T`` tokens instead, so a run
sees one shape (two at most) and almost no padding.

* :func:`pack_lengths` -- the packer, one source of truth: a whole epoch of
  lengths -> a list of :class:`PackedBatch` (which sample goes to which row, at
  which offset), deterministic per ``seed`` and ``epoch``, balanced over ranks;
* :func:`pack_rows` -- the decoder: the lengths of one batch, *in the order the
  packer lists them*, -> the same :class:`PackedBatch` (rows and offsets). A batch
  sampler yields :attr:`PackedBatch.sample_order`; the collate calls
  :func:`pack_rows` on the lengths it receives and recovers the packer's rows.

Algorithm. Samples are shuffled (``seed``, ``epoch``), cut into pools of
``pool_size``, sorted by decreasing length inside each pool, and placed by *best
fit* (the open row with the least room that still holds the sample; a new row
only when none does) over all rows of the epoch, by a small Cython loop over a
segment tree of remaining capacities (:mod:`dyntile.cpu.packing`,
O(n log T): a million lengths in about 0.1 s). Rows never close, so the sample
that opens row ``k+1`` did not fit in row ``k``: listing each row's opener first,
a next-fit scan (:func:`pack_rows`) splits the rows exactly where the packer did.
Rows, in creation order, are then dealt into batches of at most ``B`` rows.

Shapes. ``T = seq_len`` (a multiple of ``multiple``), by default the plan's largest
boundary, else, with a ``max_tokens`` budget, the row length of least training cost
(slots, attention scores under the model's ``attention``, steps:
:func:`dyntile.planning.packing_cost.choose_seq_len`), else the longest sample
rounded up; capped by the budget. ``B = max_tokens // T`` (or ``batch_rows``).
Samples longer than ``T`` (``overflow=``):

* ``"extend"`` (default): rows of ``T2 = round_up(max length, multiple)``,
  batches ``[B2, T2]`` with ``B2 = max_tokens // T2`` (or ``B * T // T2``); each such
  row starts with one long sample and is topped up with short ones. At most two
  distinct shapes; a batch is ``[B2, T2]`` exactly when it holds a sample ``> T``;
* ``"split"``: a sample of length ``L > T`` is cut into ``ceil(L / T)`` chunks in
  consecutive rows of one batch: ``(L - 1) // T`` full rows, then its last chunk
  opens a row that other samples may fill. One shape; needs ``ceil(L / T) <= B``;
* ``"error"``: ``ValueError`` naming the sample.

Nothing is ever cut silently. Zero-length samples are allowed and take no slot:
each sits in some row as an empty segment (offset = where it would start,
``size=0``), so ``cu_seqlens`` repeats a value there.

Remainder and ranks. With ``num_replicas=R`` the number of batches of each shape is
rounded up to a multiple of ``R`` and rows are spread evenly over them (so batches
may hold fewer than ``B`` rows; the collate pads empty rows). Batches are grouped in
*steps* of ``R`` same-shape batches; batch ``k`` of the list belongs to rank
``k % R`` at step ``k // R``. When a shape has fewer rows than the batches it needs,
samples get rows of their own, one sample more each time, until every batch of the
shape is one row: a sample taken out of a shared row of that shape; for the short
shape, else a short sample taken out of a long row. Only when no sample can move is
a sample of that shape *repeated* (the rule of ``BucketBatchSampler``, which repeats
samples of a bucket): at most ``R - 1`` repeats per shape and epoch, none for
``R = 1``. So every sample appears at least once per epoch, and exactly once unless
it is one of those repeats; e.g. 130 samples that need ``[1, T2]`` batches on 4 ranks
give 132 such batches, two of them repeats. No input that :func:`packing_shapes`
accepts is refused for its number of ranks.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dyntile.planning.packed_shapes import shapes_for
from dyntile.planning.packing_checks import (
    as_lengths,
    check_budget,
    check_packing_overflow,
    check_packing_shapes,
    check_pool_size,
)
from dyntile.planning.packing_cost import RowCost, choose_seq_len, cost_model
from dyntile.shapes import as_index, check_multiple

__all__ = [
    "pack_lengths",
    "pack_into_shapes",
    "place_rows",
    "deal_rows",
    "pack_rows",
    "packing_shapes",
    "pack_checked_rows",
    "check_packing_shapes",
    "check_packing_overflow",
    "check_pool_size",
    "PackedBatch",
]


# --------------------------------------------------------------------------- result type


@dataclasses.dataclass(frozen=True, eq=False)
class PackedBatch:
    """One packed batch of shape ``[B, T]``: which piece of which sample sits where.

    One entry per *piece* (a whole sample, or one chunk of a split sample), in
    row-major order (each row's opener first):

    * ``indices`` int64 ``(P,)``: sample index of each piece;
    * ``rows`` int64 ``(P,)``: row of the piece, ``0 <= rows < B``;
    * ``offsets`` int64 ``(P,)``: first token of the piece in its row;
    * ``sizes`` int64 ``(P,)``: tokens of the piece (0 for an empty sample);
    * ``starts`` int64 ``(P,)``: first token of the piece within its sample (0
      unless the sample was split).

    >>> b = pack_rows([5, 3, 6], [(2, 8)])
    >>> b.shape, b.rows.tolist(), b.offsets.tolist()
    ((2, 8), [0, 0, 1], [0, 5, 0])
    """

    shape: tuple
    indices: np.ndarray
    rows: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    starts: np.ndarray

    @property
    def sample_order(self) -> np.ndarray:
        """Sample indices, each once, in the order a batch sampler yields them."""
        return self.indices[self.starts == 0]

    @property
    def num_tokens(self) -> int:
        """Tokens of real data in the batch."""
        return int(self.sizes.sum())

    @property
    def padded_fraction(self) -> float:
        """Fraction of the ``B * T`` slots that are padding."""
        return 1.0 - self.num_tokens / (self.shape[0] * self.shape[1])

    @property
    def row_splits(self) -> np.ndarray:
        """int64 ``(B + 1,)``: pieces of row ``r`` are ``[row_splits[r], row_splits[r+1])``."""
        return np.searchsorted(self.rows, np.arange(self.shape[0] + 1), side="left").astype(np.int64)

    def same_as(self, other: PackedBatch) -> bool:
        """True when both batches have the same shape and the same pieces in the same places."""
        return self.shape == other.shape and all(
            np.array_equal(getattr(self, f), getattr(other, f))
            for f in ("indices", "rows", "offsets", "sizes", "starts")
        )

    def __repr__(self) -> str:
        return (
            f"PackedBatch(shape={self.shape}, samples={int(np.count_nonzero(self.starts == 0))}, "
            f"padded_fraction={self.padded_fraction:.4f})"
        )


# --------------------------------------------------------------------------- shapes


def packing_shapes(
    lengths,
    seq_len: int | None = None,
    *,
    max_tokens: int | None = None,
    batch_rows: int | None = None,
    multiple: int = 8,
    overflow: str = "extend",
    plan=None,
    cost: RowCost | None = None,
    **cost_options,
) -> tuple[tuple[int, int], ...]:
    """The batch shapes ``((B, T),)`` or ``((B, T), (B2, T2))`` that packing ``lengths`` uses.

    ``T``: ``seq_len`` (must be a multiple of ``multiple``), else the largest
    boundary of ``plan``, else (with ``max_tokens`` and no ``batch_rows``) the row
    length of least cost for the model's ``attention``, see
    :func:`dyntile.planning.packing_cost.choose_seq_len` (the cost: a
    :class:`~dyntile.planning.packing_cost.RowCost` as ``cost``, or the options
    ``attention`` to ``step_cost`` of :func:`~dyntile.planning.packing_cost.row_cost`;
    only used there), else the longest sample rounded up to ``multiple``; capped by
    ``max_tokens``. ``B``: ``batch_rows``, else ``max_tokens // T``. A second shape
    appears only with ``overflow="extend"`` and samples longer than ``T``.
    Errors name the sample that does not fit.

    >>> packing_shapes([3, 17, 40], max_tokens=128)   # one row of 72 holds all 60 tokens
    ((1, 72),)
    >>> packing_shapes([3, 17, 40], 16, max_tokens=128)
    ((8, 16), (3, 40))
    """
    L = as_lengths(lengths)
    m = check_multiple(multiple)
    overflow = check_packing_overflow(overflow)
    budget = check_budget(max_tokens, batch_rows)
    model = cost_model(cost, max_tokens=budget, caller="packing_shapes", **cost_options)
    if seq_len is None and plan is None and batch_rows is None:
        return choose_seq_len(L, max_tokens=budget, multiple=m, overflow=overflow, cost=model).shapes
    return shapes_for(L, seq_len, budget, batch_rows, m, overflow, plan)


# --------------------------------------------------------------------------- packer


def _pool_order(L: np.ndarray, pool_size: int | None, shuffle: bool, rng) -> np.ndarray:
    """Shuffle, cut into pools, sort each pool by decreasing length (random tie order)."""
    n = L.size
    perm = rng.permutation(n) if shuffle else np.arange(n)
    pool = np.arange(n, dtype=np.int64) // max(n if pool_size is None else pool_size, 1)
    top = int(L.max(initial=0)) + 1
    return perm[_stable_argsort(pool * top + (top - 1 - L[perm]))]


def _stable_argsort(key: np.ndarray) -> np.ndarray:
    """Stable argsort of non-negative int keys: a counting sort when the key range is small."""
    from dyntile.cpu.packing import group_by_bin

    top = int(key.max(initial=0)) + 1
    if top <= 4 * key.size + 1024:
        return group_by_bin(np.ascontiguousarray(key, dtype=np.int64), top)
    return np.argsort(key, kind="stable")


def deal_rows(n_rows: int, group_start: np.ndarray, B: int, R: int) -> np.ndarray | None:
    """Batch id of each row: consecutive groups of rows, at most ``B`` rows per batch,
    a number of batches that is a multiple of ``R``; ``None`` if there are too few groups.

    >>> deal_rows(5, np.arange(5), B=2, R=1).tolist()  # five one-row groups, two rows a batch
    [0, 0, 1, 1, 2]
    """
    if n_rows == 0:
        return np.zeros(0, np.int64)
    g_rows = np.diff(np.append(group_start, n_rows))
    if np.all(g_rows == 1):  # no split samples: spread rows evenly
        nb = -(-n_rows // B)
        nb = -(-nb // R) * R
        if nb > n_rows:
            return None
        return np.arange(n_rows, dtype=np.int64) * nb // n_rows
    # split samples: next-fit over groups, then split the fullest batches until a multiple of R
    batches, cur, used = [], [], 0
    for g, r in enumerate(g_rows.tolist()):
        if cur and used + r > B:
            batches.append(cur)
            cur, used = [], 0
        cur.append(g)
        used += r
    batches.append(cur)
    while len(batches) % R:
        k = max(range(len(batches)), key=lambda j: len(batches[j]))
        if len(batches[k]) < 2:
            return None
        half = len(batches[k]) // 2
        batches[k : k + 1] = [batches[k][:half], batches[k][half:]]
    group_batch = np.empty(len(g_rows), np.int64)
    for j, gs in enumerate(batches):
        group_batch[gs] = j
    return np.repeat(group_batch, g_rows)


def _sort_by(key: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """``arrays`` reordered by a stable sort on ``key`` (non-negative ints; skipped when already sorted)."""
    from dyntile.cpu.packing import group_by_bin

    if key.size < 2 or bool(np.all(key[1:] >= key[:-1])):
        return list(arrays)
    srt = group_by_bin(np.ascontiguousarray(key, dtype=np.int64), int(key.max()) + 1)
    return [a[srt] for a in arrays]


@dataclasses.dataclass
class _Layout:
    """The epoch's pieces (sorted by row, each row's opener first) and rows, while rows
    of each shape are dealt into batches; rows may gain a moved or repeated sample."""

    item: np.ndarray  # (P,) position of the piece's sample in the pool order
    bin: np.ndarray  # (P,) row of the piece
    size: np.ndarray  # (P,) tokens of the piece
    start: np.ndarray  # (P,) first token of the piece within its sample
    opener: np.ndarray  # (P,) bool: the piece opens its row
    bin_cap: np.ndarray  # (rows,) capacity of each row
    cont: np.ndarray  # (rows,) bool: the row continues the split sample of the row before
    n_orig: int  # pieces before any repeat

    def move(self, piece: int, cap: int) -> np.ndarray:
        """Move ``piece`` (a whole sample, not an opener) to a new row of ``cap`` tokens."""
        new = self.bin_cap.size
        self.bin[piece], self.opener[piece] = new, True
        self.bin_cap, self.cont = np.append(self.bin_cap, cap), np.append(self.cont, False)
        return np.array([new])

    def repeat(self, item: int, cap: int) -> np.ndarray:
        """Copy sample ``item`` (all its pieces, one per row) into new rows of ``cap`` tokens."""
        src = np.flatnonzero(self.item[: self.n_orig] == item)
        new = self.bin_cap.size + np.arange(src.size)
        self.item, self.bin = np.append(self.item, self.item[src]), np.append(self.bin, new)
        self.size, self.start = np.append(self.size, self.size[src]), np.append(self.start, self.start[src])
        self.opener = np.append(self.opener, np.ones(src.size, bool))
        self.bin_cap = np.append(self.bin_cap, np.full(src.size, cap))
        self.cont = np.append(self.cont, np.arange(src.size) > 0)
        return new


def _piece_to_move(lay: _Layout, rows: np.ndarray, long: bool, T: int) -> int | None:
    """The last whole sample, not an opener, longer than ``T`` (``long``) or not, of the
    fullest row in ``rows`` that has one; ``None`` if no row has one."""
    in_rows = np.zeros(lay.bin_cap.size, bool)
    in_rows[rows] = True
    fits = lay.size > T if long else lay.size <= T
    cand = np.flatnonzero(in_rows[lay.bin] & ~lay.opener & (lay.start == 0) & fits)
    if cand.size == 0:
        return None
    pieces_in_row = np.bincount(lay.bin, minlength=lay.bin_cap.size)[lay.bin[cand]]
    return int(cand[np.lexsort((cand, pieces_in_row))[-1]])


def _repeat_item(lengths: np.ndarray, long: bool, T: int, k: int) -> int:
    """The ``k``-th sample (cycling, in pool order) to repeat for the long shape
    (``long``: a sample longer than ``T``) or the short one (one of at most ``T``
    tokens when there is any)."""
    cand = np.flatnonzero(lengths > T if long else lengths <= T)
    if cand.size == 0:
        cand = np.arange(lengths.size)
    return int(cand[k % cand.size])


def _batch_ends(rows: np.ndarray, dealt: np.ndarray) -> np.ndarray:
    """The last row of every batch (``dealt``: batch of each row, non-decreasing)."""
    if rows.size == 0:
        return rows
    return rows[np.append(np.flatnonzero(np.diff(dealt)), dealt.size - 1)]


def _deal_shape(
    lay: _Layout, shape: tuple, long: bool, T: int, R: int, lengths: np.ndarray, long_ends: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, batch of each row)`` for the rows of ``shape``, in a multiple of ``R`` batches.

    While the rows (groups of rows of a split sample) are too few for that many
    batches, one sample gets a row of its own: a sample moved out of a shared row of
    this shape; for the short shape, else a short sample moved out of a long row that
    ends its batch (``long_ends``: nothing follows it, so the decoder still finds the
    rows); else a repeated sample of this shape. Each such step adds one row and the
    number of batches needed stays the same, so at most ``R - 1`` steps are taken
    (at most ``R - 1`` repeats) and in the end every batch of the shape is one row
    (or one split sample's group of rows).
    """
    B, Ts = shape
    rows = np.flatnonzero(lay.bin_cap == Ts)
    group_start = np.flatnonzero(~lay.cont[rows])
    repeats = 0
    while (dealt := deal_rows(rows.size, group_start, B, R)) is None:
        piece = _piece_to_move(lay, rows, long, T)
        if piece is None and long_ends is not None:
            piece = _piece_to_move(lay, long_ends, False, T)
        if piece is not None:
            new = lay.move(piece, Ts)
        else:
            new = lay.repeat(_repeat_item(lengths, long, T, repeats), Ts)
            repeats += 1
        group_start = np.append(group_start, rows.size)
        rows = np.append(rows, new)
    return rows, dealt


def pack_lengths(
    lengths,
    seq_len: int | None = None,
    *,
    max_tokens: int | None = None,
    batch_rows: int | None = None,
    multiple: int = 8,
    overflow: str = "extend",
    pool_size: int | None = 65536,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    num_replicas: int = 1,
    plan=None,
    cost: RowCost | None = None,
    **cost_options,
) -> list[PackedBatch]:
    """Pack every sample of an epoch into ``[B, T]`` batches (``[B2, T2]`` for long ones).

    ``lengths`` int ``(n,)``: tokens per sample. Shapes come from
    :func:`packing_shapes` (same arguments: without ``seq_len``, ``plan`` or
    ``batch_rows``, the row length of least cost for ``attention``, or for ``cost``;
    :func:`pack_into_shapes` packs into shapes chosen beforehand). Returns the
    epoch's batches in step order: with ``num_replicas=R``, batch ``k`` is rank
    ``k % R``'s batch at step ``k // R``, and the ``R`` batches of a step share one shape. Every sample
    appears in one batch (in several rows of it when split), apart from at most
    ``num_replicas - 1`` repeats per shape that keep the ranks in step (see the
    module docstring); deterministic per ``(seed, epoch)``. ``pool_size``: samples sorted
    together (``None``: the whole epoch; smaller pools mix batches more across epochs).

    >>> batches = pack_lengths([5, 3, 6, 2, 7, 1], max_tokens=16, seed=0)
    >>> [b.shape for b in batches], sum(b.num_tokens for b in batches)
    ([(2, 8), (2, 8)], 24)
    """
    L = as_lengths(lengths)
    overflow = check_packing_overflow(overflow)
    budget = check_budget(max_tokens, batch_rows)
    model = cost_model(cost, max_tokens=budget, caller="pack_lengths", **cost_options)
    shapes = packing_shapes(
        L,
        seq_len,
        max_tokens=budget,
        batch_rows=batch_rows,
        multiple=multiple,
        overflow=overflow,
        plan=plan,
        cost=model,
    )
    return _pack(L, shapes, overflow, pool_size, shuffle, seed, epoch, num_replicas)


def pack_into_shapes(
    lengths,
    shapes,
    *,
    overflow: str = "extend",
    pool_size: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    num_replicas: int = 1,
) -> list[PackedBatch]:
    """:func:`pack_lengths` into shapes fixed beforehand, such as a stream's.

    ``shapes``: one or two ``(B, T)`` (:func:`check_packing_shapes`); the second,
    longer row is for samples longer than ``T`` (``overflow="extend"``) and may be
    longer than any of these ``lengths`` need, so that every window of a stream
    packs into the same two shapes. ``ValueError`` naming a sample that fits no shape.

    >>> [b.shape for b in pack_into_shapes([7, 6, 30, 5], [(2, 8), (1, 32)], shuffle=False)]
    [(2, 8), (2, 8), (1, 32)]
    """
    L = as_lengths(lengths)
    shapes = check_packing_shapes(shapes)
    overflow = check_packing_overflow(overflow)
    (B, T), T_max = shapes[0], shapes[-1][1]
    longest = int(L.max(initial=0))
    if (
        longest > T
        and not (overflow == "split" and -(-longest // T) <= B)
        and not (overflow == "extend" and longest <= T_max)
    ):
        i = int(np.argmax(L))
        raise ValueError(
            f"sample {i} of length {longest} fits none of shapes={shapes} (overflow={overflow!r})"
        )
    if overflow != "extend":
        shapes = shapes[:1]
    return _pack(L, shapes, overflow, pool_size, shuffle, seed, epoch, num_replicas)


def _pack(L, shapes, overflow, pool_size, shuffle, seed, epoch, num_replicas) -> list[PackedBatch]:
    """The packer proper: validated ``L``, ``shapes`` and ``overflow``, checked here: the rest."""
    R, pool_size, seed, epoch = _check_epoch_args(num_replicas, pool_size, seed, epoch)
    rng = np.random.default_rng([seed, epoch])
    order = _pool_order(L, pool_size, shuffle, rng)
    lay = _place(L[order], shapes, overflow)
    # deal the rows of each shape into batches, the long shape first (the short one
    # may take samples out of long rows that end a batch)
    T = shapes[0][1]
    dealt_by_shape: list = [None] * len(shapes)
    long_ends = None
    for s in reversed(range(len(shapes))):
        dealt_by_shape[s] = _deal_shape(lay, shapes[s], s == 1, T, R, L[order], long_ends)
        long_ends = _batch_ends(*dealt_by_shape[s])
    return _list_batches(lay, dealt_by_shape, shapes, order, R, rng if shuffle else None)


def _check_epoch_args(num_replicas, pool_size, seed, epoch) -> tuple[int, int | None, int, int]:
    """``(R, pool_size, seed, epoch)`` checked: ``R >= 1``, ``seed, epoch >= 0``."""
    R = as_index(num_replicas, "num_replicas")
    if R < 1:
        raise ValueError(f"num_replicas should be a positive integer, but got {R}")
    pool_size = check_pool_size(pool_size)
    seed, epoch = as_index(seed, "seed"), as_index(epoch, "epoch")
    if seed < 0 or epoch < 0:
        raise ValueError(
            f"seed and epoch should be non-negative integers, but got seed={seed}, epoch={epoch}"
        )
    return R, pool_size, seed, epoch


def _place(size: np.ndarray, shapes, overflow: str) -> _Layout:
    """Best fit of the samples of ``size`` (in pool order) into rows: the epoch's pieces
    (a split sample -> its full rows, then its last chunk), sorted by row, opener first."""
    from dyntile.cpu.packing import best_fit

    T, T_max, n = shapes[0][1], shapes[-1][1], size.size
    long = size > T
    open_cap = np.where(long, T_max, T).astype(np.int64)
    n_full = np.zeros(n, np.int64)
    if overflow == "split":
        n_full[long] = (size[long] - 1) // T
        size = np.where(long, size - n_full * T, size)
        open_cap[:] = T
    item_bin, bin_cap = best_fit(size, open_cap, n_full, T_max)
    if overflow == "split" and n_full.any():
        n_pieces = n_full + 1
        p_item = np.repeat(np.arange(n), n_pieces)
        p_k = np.arange(p_item.size) - np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)
        p_bin = item_bin[p_item] - n_full[p_item] + p_k
        p_size = np.where(p_k < n_full[p_item], T, size[p_item])
        p_start = p_k * T
    else:  # one piece per sample
        p_item, p_bin, p_size, p_start = np.arange(n), item_bin, size, np.zeros(n, np.int64)
    p_item, p_bin, p_size, p_start = _sort_by(p_bin, p_item, p_bin, p_size, p_start)  # opener first
    cont = np.zeros(bin_cap.size, bool)
    cont[p_bin[p_start > 0]] = True  # rows 2.. of a split sample stay with the row before
    opener = np.ones(p_bin.size, bool)
    opener[1:] = p_bin[1:] != p_bin[:-1]
    return _Layout(p_item, p_bin.copy(), p_size, p_start, opener, bin_cap, cont, p_item.size)


def place_rows(sizes: np.ndarray, shapes: tuple, overflow: str):
    """Best fit of int64 ``sizes`` (taken in this order, decreasing for the packer) into
    rows of checked ``shapes`` under a checked ``overflow``: the rows the packer deals
    into batches. The pieces (a sample, or a chunk of a split one), sorted by row with
    each row's opener first: ``item`` (position in ``sizes``), ``bin`` (row, numbered in
    the order rows open), ``size``, ``start`` (first token within the sample), ``opener``;
    per row ``bin_cap`` (its length) and ``cont`` (it continues a split sample). A
    streaming packer places each window once with it.

    >>> lay = place_rows(np.array([7, 6, 2, 1]), ((2, 8),), "extend")
    >>> lay.bin.tolist(), lay.item.tolist(), lay.bin_cap.tolist()
    ([0, 0, 1, 1], [0, 3, 1, 2], [8, 8])
    """
    return _place(sizes, shapes, overflow)


def _list_batches(
    lay: _Layout, dealt_by_shape: list, shapes, order: np.ndarray, R: int, rng
) -> list[PackedBatch]:
    """The dealt rows as :class:`PackedBatch` es, in steps of ``R`` same-shape batches
    (steps shuffled by ``rng``, kept in order when ``None``)."""
    p_item, p_bin, p_size, p_start, bin_cap = lay.item, lay.bin, lay.size, lay.start, lay.bin_cap
    batch_of_bin = np.empty(bin_cap.size, np.int64)
    local_row = np.empty(bin_cap.size, np.int64)
    batch_shape, n_batches = [], 0
    for (bins, dealt), shape in zip(dealt_by_shape, shapes):
        batch_of_bin[bins] = dealt + n_batches
        local_row[bins] = np.arange(bins.size) - np.searchsorted(dealt, dealt, side="left")
        nb = int(dealt[-1]) + 1 if dealt.size else 0
        batch_shape += [shape] * nb
        n_batches += nb
    # offsets within rows (again: samples may have moved to rows of their own)
    p_item, p_bin, p_size, p_start = _sort_by(p_bin, p_item, p_bin, p_size, p_start)
    cs = np.cumsum(p_size) - p_size
    p_off = cs - cs[np.searchsorted(p_bin, np.arange(bin_cap.size))[p_bin]]
    steps = np.arange(n_batches // R)
    if rng is not None:
        steps = rng.permutation(steps)
    batch_order = (steps[:, None] * R + np.arange(R)).reshape(-1)
    p_batch, p_item, p_bin, offs, sizes, starts = _sort_by(
        batch_of_bin[p_bin], batch_of_bin[p_bin], p_item, p_bin, p_off, p_size, p_start
    )
    bounds = np.searchsorted(p_batch, np.arange(n_batches + 1))
    idx, rows = order[p_item], local_row[p_bin]
    out = []
    for j in batch_order.tolist():
        a, b = bounds[j], bounds[j + 1]
        out.append(PackedBatch(batch_shape[j], idx[a:b], rows[a:b], offs[a:b], sizes[a:b], starts[a:b]))
    return out


# --------------------------------------------------------------------------- decoder


def pack_rows(lengths, shapes, *, overflow: str = "extend") -> PackedBatch:
    """Rows of one batch from its lengths, in the order :func:`pack_lengths` lists them.

    A next-fit scan: a sample joins the current row when it fits (``used + L <= T``)
    and opens the next row otherwise; with ``overflow="split"`` a sample longer than
    ``T`` takes ``(L - 1) // T`` full rows and opens one more for its last chunk.
    The batch is ``shapes[1] = (B2, T2)`` when it holds a sample longer than ``T``
    (``overflow="extend"``), else ``shapes[0] = (B, T)``. ``indices`` of the
    result are positions in ``lengths``. The pieces lie back to back: in sample
    order, each row filled from offset 0 with no gap, so a batch's tokens in sample
    order are its rows' contents without their padding tails. For every batch ``b`` of
    :func:`pack_lengths`, ``pack_rows(lengths[b.sample_order], shapes)`` gives the
    same rows, offsets and shape (indices relative to ``b.sample_order``).
    ``ValueError`` if the samples need more than ``B`` rows.

    >>> b = pack_rows([6, 1, 5, 3], [(4, 8)])
    >>> b.rows.tolist(), b.offsets.tolist()
    ([0, 0, 1, 1], [0, 6, 0, 5])
    """
    return pack_checked_rows(
        as_lengths(lengths), check_packing_shapes(shapes), check_packing_overflow(overflow)
    )


def pack_checked_rows(L: np.ndarray, shapes: tuple, overflow: str) -> PackedBatch:
    """:func:`pack_rows` for int64 non-negative ``L``, shapes as :func:`check_packing_shapes` gives
    them and a policy of :data:`~dyntile.overflow.PACKING_OVERFLOWS`: a collate checks
    its shapes and policy once, not per batch."""
    B, T = shapes[0]
    longest = int(L.max()) if L.size else 0
    if longest > T:
        if overflow == "extend" and len(shapes) == 2:
            B, T = shapes[1]
        elif overflow != "split":
            i = int(np.argmax(L))
            raise ValueError(
                f"sample {i} has length {longest}, longer than the rows of {T} tokens "
                f"(shapes={shapes}, overflow={overflow!r})"
            )
    if longest <= T:  # no sample to split (the common case): one kernel pass
        L = np.ascontiguousarray(L, dtype=np.int64)
        from dyntile.cpu.packing import next_fit

        rows, offs, n_rows = next_fit(L, T)
        if n_rows > B:
            _raise_too_many_rows(L, n_rows - 1, T, B, shapes)
        return PackedBatch(
            (B, T), np.arange(L.size, dtype=np.int64), rows, offs, L.copy(), np.zeros(L.size, np.int64)
        )
    idx, rows, offs, sizes, starts = [], [], [], [], []
    row, used = -1, T + 1  # no row open yet
    for i, n in enumerate(L.tolist()):
        if n > T:  # split: full rows, then the last chunk opens a row
            full = (n - 1) // T
            for k in range(full):
                row += 1
                idx.append(i), rows.append(row), offs.append(0), sizes.append(T), starts.append(k * T)
            row, used, start, n = row + 1, 0, full * T, n - full * T
        else:
            start = 0
            if used + n > T or row < 0:
                row, used = row + 1, 0
        idx.append(i), rows.append(row), offs.append(used), sizes.append(n), starts.append(start)
        used += n
    if row >= B:
        _raise_too_many_rows(L, row, T, B, shapes)
    a = [np.asarray(v, dtype=np.int64) for v in (idx, rows, offs, sizes, starts)]
    return PackedBatch((B, T), *a)


def _raise_too_many_rows(L: np.ndarray, row: int, T: int, B: int, shapes) -> None:
    raise ValueError(
        f"these {L.size} samples ({int(L.sum())} tokens) need {row + 1} rows of {T} tokens, "
        f"more than the {B} rows of a batch; were they yielded by a packing sampler with "
        f"the same shapes={shapes}?"
    )
