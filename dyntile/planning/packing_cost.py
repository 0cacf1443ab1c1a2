"""The packed row length ``T``, chosen by what an epoch costs a model to train on.

Packing fills rows almost completely at any ``T`` (under 1% padding), so padding
alone hardly tells row lengths apart. What does is the attention a model computes
over a packed row and the number of steps an epoch takes. The cost of an epoch
packed into ``(B, T)`` batches (and ``(B2, T2)`` ones for the samples longer than
``T``), in *slot units* (the work of one token through a layer's linear maps)::

    cost = slots + attention_weight * scores + step_cost * batches

* ``slots``: ``B * T`` summed over the epoch's batches, each shape counted (padding
  and empty rows count: the model computes them);
* ``scores``: attention scores computed. ``attention="varlen"`` (a kernel that
  attends within segments, such as ``dyntile.varlen_attention``): per packed piece
  of ``L`` tokens, ``L * (L + 1) / 2`` when ``causal`` (a causal kernel skips the
  masked half), else ``L**2``. ``attention="dense"`` (a model that attends over the
  whole row through a ``[B, 1, T, T]`` block-diagonal mask, which computes every
  score whatever the mask): ``T**2`` per row;
* ``batches``: the epoch's steps (on one rank).

Defaults, and why. A score costs about ``4 * d_model`` flops (``q . k`` and its
share of the weighted sum of ``v``) where a token costs ``24 * d_model**2`` flops
in a transformer layer's linear maps (QKV ``6 d^2``, output ``2 d^2``, a 4x MLP
``16 d^2``); the backward pass scales both alike. So ``attention_weight =
1 / (6 * d_model)``, with ``d_model = 768`` (a BERT-base or GPT-2-small layer)
unless ``d_model`` or the weight itself is given. ``step_cost = max_tokens / 16``:
a step's fixed work besides its tokens (the optimizer update, a gradient
all-reduce, kernel launches, Python), taken as a sixteenth of a full batch's. It
is what weighs against short steps: one row of 1600 tokens in a budget of 2048
leaves a fifth of every step unused, and the epoch takes more steps.
``step_cost=0`` counts compute only.

Search. Candidates are multiples of ``multiple``: 24 log-spaced lengths from the
lengths' 90th percentile up to the longest sample, each also raised to the longest
row with the same ``B = max_tokens // T`` (the one that fills the budget best),
and the row length of the longest-sample rule (the longest sample rounded up, or a
little more when that wastes less of the last batch: :attr:`SeqLenChoice.longest`).
Each candidate is costed by running the packer's own best-fit placement
(:func:`dyntile.cpu.packing.best_fit`) on the lengths in decreasing order and
dealing its rows into batches as :func:`dyntile.planning.packing.pack_lengths`
does. The figures are exact for up to 16384 lengths in one pool (``pool_size``) on
one rank; beyond 16384 lengths, rows and batches are counted on 16384 evenly spaced
quantiles of the lengths and scaled, so that a search runs the packer on at most
16384 lengths per candidate whatever the corpus. The cheapest candidate wins; ties
go to the shorter ``T``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

from dyntile.planning.packed_shapes import shapes_for
from dyntile.planning.packing_checks import as_lengths, check_packing_overflow
from dyntile.shapes import as_index, check_multiple, round_up

__all__ = [
    "choose_seq_len",
    "row_cost",
    "RowCost",
    "cost_model",
    "format_shapes",
    "SeqLenChoice",
    "CandidateCost",
    "ATTENTIONS",
    "DEFAULT_D_MODEL",
]

ATTENTIONS = ("varlen", "dense")
DEFAULT_D_MODEL = 768
STEP_COST_SHARE = 1 / 16  # a step's fixed work, as a share of a full batch's
GRID_POINTS = 24  # log-spaced candidate row lengths
SAMPLE = 16384  # lengths simulated at most (evenly spaced quantiles beyond)


# --------------------------------------------------------------------------- the cost model


@dataclasses.dataclass(frozen=True)
class RowCost:
    """The weights of the cost of a packed epoch, in slot units (see the module docstring).

    >>> row_cost("dense", d_model=64, max_tokens=2048)
    RowCost(attention='dense', causal=True, attention_weight=0.0026041666666666665, step_cost=128.0)
    """

    attention: str
    causal: bool
    attention_weight: float
    step_cost: float

    def __post_init__(self):
        if not isinstance(self.attention, str) or self.attention not in ATTENTIONS:
            raise ValueError(f"attention should be one of {ATTENTIONS}, but got {self.attention!r}")
        if not isinstance(self.causal, (bool, np.bool_)):
            got = f"{self.causal!r} of type {type(self.causal).__name__}"
            raise TypeError(f"causal should be True or False, but got {got}")
        object.__setattr__(self, "causal", bool(self.causal))
        object.__setattr__(self, "attention_weight", _as_weight(self.attention_weight, "attention_weight"))
        object.__setattr__(self, "step_cost", _as_weight(self.step_cost, "step_cost"))

    def describe(self) -> str:
        """One line: which attention, the weight of a score and of a step."""
        kind = f"{self.attention} attention" + (
            ", causal" if self.causal and self.attention == "varlen" else ""
        )
        w = f"1/{1 / self.attention_weight:.0f}" if self.attention_weight > 0 else "0"
        return f"{kind}, {w} slot per score, {self.step_cost:g} slots per step"


def _as_weight(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} should be a non-negative number, but got {value!r} of type {type(value).__name__}"
        )
    w = float(value)
    if not (math.isfinite(w) and w >= 0):
        raise ValueError(f"{name} should be a non-negative finite number, but got {value!r}")
    return w


def row_cost(
    attention: str = "varlen",
    *,
    causal: bool = True,
    d_model: int | None = None,
    attention_weight: float | None = None,
    step_cost: float | None = None,
    max_tokens: int | None = None,
) -> RowCost:
    """The validated :class:`RowCost` for these options.

    ``attention``: ``"varlen"`` or ``"dense"``; ``causal``: a ``bool``; ``d_model``
    (a positive int) or ``attention_weight`` (a number ``>= 0``, slot units per
    score), not both: the weight is ``1 / (6 * d_model)``, ``d_model = 768`` by
    default; ``step_cost`` (a number ``>= 0``, slot units per step), by default
    ``max_tokens / 16`` (0 without ``max_tokens``).
    """
    if not isinstance(attention, str) or attention not in ATTENTIONS:  # named before d_model's errors
        raise ValueError(f"attention should be one of {ATTENTIONS}, but got {attention!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal should be True or False, but got {causal!r} of type {type(causal).__name__}")
    if d_model is not None and attention_weight is not None:
        raise ValueError(
            f"pass d_model or attention_weight, not both (attention_weight = 1 / (6 * d_model)), "
            f"but got d_model={d_model!r}, attention_weight={attention_weight!r}"
        )
    if attention_weight is None:
        if isinstance(d_model, (bool, np.bool_)):
            raise TypeError(f"d_model should be a positive integer, but got {d_model!r}")
        d = DEFAULT_D_MODEL if d_model is None else as_index(d_model, "d_model")
        if d < 1:
            raise ValueError(f"d_model should be a positive integer, but got {d}")
        weight = 1.0 / (6 * d)
    else:
        weight = attention_weight
    if step_cost is None:
        step = STEP_COST_SHARE * max_tokens if max_tokens is not None else 0.0
    else:
        step = step_cost
    return RowCost(attention, causal, weight, step)


#: the options of :func:`row_cost` and their defaults: what ``cost=`` stands for
COST_OPTIONS = dict(attention="varlen", causal=True, d_model=None, attention_weight=None, step_cost=None)


def cost_model(
    cost: RowCost | None = None, *, max_tokens: int | None = None, caller: str = "cost_model", **options
) -> RowCost:
    """The :class:`RowCost` a packing function uses: ``cost`` when given (then the
    ``options`` of :func:`row_cost` stay at their defaults), else ``row_cost(**options,
    max_tokens=max_tokens)``. A public function takes ``cost=None, **cost_options``,
    calls this once (``caller``: its name, for the errors) and passes the value down.

    >>> cost_model(attention="dense", d_model=64, max_tokens=2048).describe()
    'dense attention, 1/384 slot per score, 128 slots per step'
    >>> cost_model(row_cost("dense"), attention="dense")
    Traceback (most recent call last):
    ValueError: pass cost or its options, not both, but got cost and attention
    >>> cost_model(caller="pack_lengths", pool_sze=8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: pack_lengths got unexpected keyword argument(s) ['pool_sze']: its cost options are ...
    """
    unknown = sorted(set(options) - set(COST_OPTIONS))
    if unknown:
        raise TypeError(
            f"{caller} got unexpected keyword argument(s) {unknown}: its cost options are "
            f"{sorted(COST_OPTIONS)} (see dyntile.planning.row_cost)"
        )
    if cost is None:
        return row_cost(**options, max_tokens=max_tokens)
    if not isinstance(cost, RowCost):
        raise TypeError(
            f"cost should be a RowCost (see row_cost), but got {cost!r} of type {type(cost).__name__}"
        )
    given = [k for k, v in options.items() if not (v is COST_OPTIONS[k] or v == COST_OPTIONS[k])]
    if given:
        raise ValueError(f"pass cost or its options, not both, but got cost and {', '.join(given)}")
    return cost


# --------------------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class CandidateCost:
    """What an epoch packed into ``shapes`` costs (slot units), and its parts.

    ``batches``: steps of the epoch; ``slots``: ``B * T`` summed over them;
    ``scores``: attention scores computed; ``attention`` and ``overhead``: the
    weighted scores and steps; ``cost = slots + attention + overhead``;
    ``padded_fraction``: share of the slots that is padding. Estimates (scaled from
    a quantile sample) when :attr:`SeqLenChoice.sampled` is below the number of lengths.
    """

    shapes: tuple
    batches: int
    slots: int
    scores: float
    attention: float
    overhead: float
    cost: float
    padded_fraction: float

    @property
    def seq_len(self) -> int:
        """``T`` of the first shape."""
        return self.shapes[0][1]

    def describe(self) -> str:
        """One line: shapes, batches, padding, the cost and its parts."""
        return (
            f"{format_shapes(self.shapes)}: {self.batches} batches, "
            f"{100 * self.padded_fraction:.1f}% padded, cost {_short(self.cost)} = "
            f"{_short(self.slots)} slots + {_short(self.attention)} attention "
            f"+ {_short(self.overhead)} steps"
        )


@dataclasses.dataclass(frozen=True)
class SeqLenChoice:
    """The packing shapes of least cost, the cost that chose them and every candidate's.

    ``shapes``: ``((B, T),)`` or ``((B, T), (B2, T2))``, as
    :func:`dyntile.planning.packing.packing_shapes` returns them;
    ``packing_shapes(lengths, choice.seq_len, max_tokens=...)`` gives the same.
    ``cost``: their cost; ``candidates``: every :class:`CandidateCost` tried, by
    increasing ``T``; ``longest``: the candidate of the longest-sample rule;
    ``model``: the :class:`RowCost` used; ``sampled``: lengths the packer was run
    on (all of them, or a quantile sample of large corpora).
    """

    shapes: tuple
    cost: float
    candidates: tuple
    longest: CandidateCost
    model: RowCost
    sampled: int

    @property
    def seq_len(self) -> int:
        """``T``: pass it as ``seq_len`` to get these shapes again."""
        return self.shapes[0][1]

    @property
    def chosen(self) -> CandidateCost:
        """The chosen candidate, with its parts of the cost."""
        return next(c for c in self.candidates if c.shapes == self.shapes)

    def describe(self) -> str:
        """Two lines: the chosen shapes with their cost, the model, and the longest-sample rule's cost."""
        return (
            f"{self.chosen.describe()} ({self.model.describe()})\n"
            f"longest-sample rule {self.longest.describe()}"
        )


def format_shapes(shapes) -> str:
    """``((2, 1024), (1, 1600))`` -> ``"2x1024 + 1x1600"``."""
    return " + ".join(f"{b}x{t}" for b, t in shapes)


def _short(x: float) -> str:
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


# --------------------------------------------------------------------------- the search


def choose_seq_len(
    lengths,
    *,
    max_tokens: int,
    multiple: int = 8,
    overflow: str = "extend",
    cost: RowCost | None = None,
    **cost_options,
) -> SeqLenChoice:
    """The packing shapes of least cost for ``lengths`` under a budget of ``max_tokens`` per batch.

    ``lengths`` int ``(n,)``: tokens per sample. ``overflow``: what samples longer
    than ``T`` do (``"extend"``, ``"split"``, ``"error"``, as in
    :func:`dyntile.planning.packing.pack_lengths`); the cost: ``cost`` (a
    :class:`RowCost`) or the options of :func:`row_cost`. Returns a :class:`SeqLenChoice`; ``.shapes`` is what
    ``packing_shapes``, ``pack_lengths`` and ``PackingBatchSampler`` use by default.
    Deterministic (no seed: the shapes stay the same every epoch).

    >>> L = [30, 60, 120] * 200 + [1000] * 3
    >>> choose_seq_len(L, max_tokens=2048).shapes                      # rows of half the budget
    ((2, 1000),)
    >>> choose_seq_len(L, max_tokens=2048, attention="dense").shapes   # short rows, long ones apart
    ((17, 120), (2, 1000))
    >>> c = choose_seq_len(L, max_tokens=2048, attention="dense")
    >>> c.longest.shapes, round(c.longest.cost / c.cost, 2)           # the longest-sample rule
    (((1, 1168),), 1.23)
    """
    L = as_lengths(lengths)
    m = check_multiple(multiple)
    overflow = check_packing_overflow(overflow)
    if max_tokens is None:
        raise ValueError("choose_seq_len needs a token budget: pass max_tokens (tokens per batch)")
    budget = as_index(max_tokens, "max_tokens")
    if budget < 1:
        raise ValueError(f"max_tokens should be a positive integer, but got {budget}")
    model = cost_model(cost, max_tokens=budget, caller="choose_seq_len", **cost_options)
    rule = shapes_for(L, None, budget, None, m, overflow)  # the longest-sample rule; raises its errors
    epoch = _Epoch(L)
    candidates = []
    for T in _candidate_lengths(epoch, m, budget, rule[0][1], overflow):
        try:
            shapes = rule if T == rule[0][1] else shapes_for(L, T, budget, None, m, overflow)
        except ValueError:  # split samples over one batch's rows, or overflow="error"
            continue
        candidates.append(_cost_of(epoch, shapes, overflow, model))
    best = min(candidates, key=lambda c: c.cost)  # the first of equals: the shortest T
    longest = next(c for c in candidates if c.shapes == rule)
    return SeqLenChoice(best.shapes, best.cost, tuple(candidates), longest, model, epoch.sorted_desc.size)


@dataclasses.dataclass
class _Epoch:
    """The lengths as the search reads them: all (for exact score sums) and, in
    decreasing order, those the packer is run on (a quantile sample of large sets)."""

    L: np.ndarray
    sorted_desc: np.ndarray = dataclasses.field(init=False)
    scale: float = dataclasses.field(init=False)  # lengths per simulated length
    tokens: int = dataclasses.field(init=False)
    ascending: np.ndarray = dataclasses.field(init=False)
    _whole: dict = dataclasses.field(init=False, default_factory=dict)

    def __post_init__(self):
        self.ascending = np.sort(self.L)
        n = self.L.size
        pick = self.ascending
        if n > SAMPLE:  # the midpoints of SAMPLE equal slices (same distribution), and the longest
            pick = self.ascending[(2 * np.arange(SAMPLE, dtype=np.int64) + 1) * n // (2 * SAMPLE)]
            pick[-1] = self.ascending[-1]
        self.sorted_desc = np.ascontiguousarray(pick[::-1], dtype=np.int64)
        self.scale = n / max(pick.size, 1)
        self.tokens = int(self.L.sum())

    def pair_sum(self, sizes: np.ndarray, causal: bool) -> float:
        """Scores of segments of ``sizes`` tokens: ``L (L + 1) / 2`` each (``causal``) or ``L**2``."""
        s = sizes.astype(np.float64)
        return float(np.sum(s * (s + 1) / 2 if causal else s * s))

    def whole_pair_sum(self, causal: bool) -> float:
        """:meth:`pair_sum` of the whole samples (every candidate without splits shares it)."""
        key = bool(causal)
        if key not in self._whole:
            self._whole[key] = self.pair_sum(self.L, key)
        return self._whole[key]


def _candidate_lengths(epoch: _Epoch, m: int, budget: int, T_rule: int, overflow: str) -> list[int]:
    """Row lengths to try, ascending: multiples of ``m`` from the 90th percentile up to the
    longest sample (log-spaced), each also raised to fill the budget at its ``B``, and ``T_rule``."""
    L = epoch.ascending
    if L.size == 0 or L[-1] == 0:
        return [T_rule]
    T0 = min(max(round_up(int(L[-1]), m), m), budget // m * m)
    if overflow == "error":
        lo = T0
    else:
        q90 = int(L[min(int(math.ceil(0.9 * (L.size - 1))), L.size - 1)])
        lo = min(max(round_up(q90, m), m), T0)
    grid = np.unique(np.ceil(np.geomspace(lo, T0, GRID_POINTS) / m).astype(np.int64) * m)
    grid = np.clip(grid, lo, T0)
    filled = (budget // (budget // grid)) // m * m  # the longest row with the same B
    top = max(T0, T_rule)
    out = set(grid.tolist()) | set(filled[filled <= top].tolist()) | {T_rule}
    return sorted(out)


def _cost_of(epoch: _Epoch, shapes: tuple, overflow: str, model: RowCost) -> CandidateCost:
    """Pack the (sampled) lengths into ``shapes`` as the packer does, count, cost."""
    from dyntile.cpu.packing import best_fit

    s = epoch.sorted_desc
    (B, T), T_max = shapes[0], shapes[-1][1]
    if overflow == "split" and s.size and s[0] > T:
        long = s > T
        n_full = np.where(long, (s - 1) // T, 0).astype(np.int64)
        _, bin_cap = best_fit(s - n_full * T, np.full(s.size, T, np.int64), n_full, T)
        batches = [_split_batches(n_full[long] + 1, bin_cap.size, B, epoch.scale)]
        L = epoch.L
        nf = np.where(L > T, (L - 1) // T, 0)
        scores_varlen = float(nf.sum()) * (T * (T + 1) / 2 if model.causal else T * T) + epoch.pair_sum(
            L - nf * T, model.causal
        )
    else:
        cap = np.where(s > T, T_max, T).astype(np.int64)
        _, bin_cap = best_fit(s, cap, np.zeros(s.size, np.int64), T_max)
        batches = [math.ceil(np.count_nonzero(bin_cap == t) * epoch.scale / b) for b, t in shapes]
        scores_varlen = epoch.whole_pair_sum(model.causal)
    slots = sum(nb * b * t for nb, (b, t) in zip(batches, shapes))
    if model.attention == "dense":
        scores = float(sum(nb * b * t * t for nb, (b, t) in zip(batches, shapes)))
    else:
        scores = scores_varlen
    n_batches = sum(batches)
    attention, overhead = model.attention_weight * scores, model.step_cost * n_batches
    padded = max(0.0, 1.0 - epoch.tokens / slots) if slots else 0.0
    return CandidateCost(
        tuple(shapes), n_batches, slots, scores, attention, overhead, slots + attention + overhead, padded
    )


def _split_batches(group_rows: np.ndarray, n_rows: int, B: int, scale: float) -> int:
    """Batches of a split packing on one rank: next fit of the split samples' groups of rows
    (they come first, the samples being in decreasing order), then the single rows."""
    batches, used = 0, B  # no batch open yet
    for r in group_rows.tolist():
        if used + r > B:
            batches, used = batches + 1, 0
        used += r
    singles = n_rows - int(group_rows.sum())
    singles -= min(singles, B - used)
    batches += -(-singles // B)
    return math.ceil(batches * scale)
