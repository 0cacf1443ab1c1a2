"""Honest per-step telemetry: tokens that are real, tokens that train, and what padding costs.

:func:`batch_telemetry` reads one collated batch (any of dyntile's collates, Hugging
Face's, or a dict of tensors): ``slots`` (``B * T``), ``real_tokens`` (the samples'
tokens), ``loss_tokens`` (targets that are not -100, shifted as a causal LM scores
them), ``padded_fraction`` (``1 - real / slots``) and ``attention_waste``
(``1 - sum L^2 / sum T^2``: the share of a dense row-by-row attention spent between
tokens of different samples or padding). The samples' lengths come from, in order:
``lengths``, ``segment_ids`` runs, a 2-D ``attention_mask``, restarting
``position_ids``; else every row is one sample of ``T`` tokens.

:class:`StepTelemetry` adds the batches of an optimiser step and times the steps,
for ``real_tokens_per_s``; the framework callbacks
(:mod:`loaders.integrations.hf_telemetry`, :mod:`loaders.integrations.lightning`)
are thin shells around it.

>>> batch = {"input_ids": torch.zeros(2, 8, dtype=torch.long), "lengths": torch.tensor([3, 5, 6])}
>>> t = batch_telemetry(batch)
>>> t.real_tokens, t.slots, round(t.padded_fraction, 3), round(t.attention_waste, 3)
(14, 16, 0.125, 0.453)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import NamedTuple

import torch

from .loss import loss_counts

__all__ = ["BatchTelemetry", "batch_telemetry", "StepTelemetry"]


class BatchTelemetry(NamedTuple):
    """The counts of one batch (or, summed, of a step): see the module docstring."""

    slots: int
    real_tokens: int
    loss_tokens: int
    attended: int  # sum of L^2 over the samples
    dense: int  # sum of T^2 over the rows

    def __add__(self, other):
        return BatchTelemetry(*(a + b for a, b in zip(self, other)))

    @property
    def padded_fraction(self) -> float:
        return 1.0 - self.real_tokens / self.slots if self.slots else 0.0

    @property
    def attention_waste(self) -> float:
        return 1.0 - self.attended / self.dense if self.dense else 0.0

    def as_dict(self) -> dict:
        """The figures a logger takes."""
        return {
            "real_tokens": self.real_tokens,
            "loss_tokens": self.loss_tokens,
            "padded_fraction": self.padded_fraction,
            "attention_waste": self.attention_waste,
        }


def batch_telemetry(
    batch: Mapping, *, input_key: str = "input_ids", label_key: str = "labels", shift: bool = True
) -> BatchTelemetry:
    """The :class:`BatchTelemetry` of one collated batch (``batch[input_key]`` ``[B, T, ...]``)."""
    if input_key not in batch:
        raise KeyError(f"batch_telemetry needs tokens, but the batch has no key {input_key!r}: {list(batch)}")
    B, T = batch[input_key].shape[:2]
    lengths = _sample_lengths(batch, B, T).to(torch.int64)
    loss = loss_counts(batch, label_key=label_key, shift=shift).loss_tokens if label_key in batch else 0
    return BatchTelemetry(B * T, int(lengths.sum()), loss, int((lengths * lengths).sum()), B * T * T)


def _sample_lengths(batch: Mapping, B: int, T: int) -> torch.Tensor:
    if batch.get("lengths") is not None:
        return torch.as_tensor(batch["lengths"])
    if batch.get("segment_ids") is not None:
        return _run_lengths(torch.as_tensor(batch["segment_ids"]).reshape(B, T), padding_id=0)
    mask = batch.get("attention_mask")
    if mask is not None and torch.as_tensor(mask).dim() == 2:
        return torch.as_tensor(mask).reshape(B, T).ne(0).sum(-1)
    if batch.get("position_ids") is not None:
        pos = torch.as_tensor(batch["position_ids"]).reshape(-1, T).expand(B, T)
        starts = torch.ones_like(pos, dtype=torch.bool)
        starts[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
        return _run_lengths(starts.cumsum(-1), padding_id=None)
    return torch.full((B,), T)


def _run_lengths(ids: torch.Tensor, padding_id) -> torch.Tensor:
    """Lengths of the runs of one id along each row (runs of ``padding_id`` left out)."""
    ids = ids.cpu()
    change = torch.ones_like(ids, dtype=torch.bool)
    change[:, 1:] = ids[:, 1:] != ids[:, :-1]
    flat_ids = ids.reshape(-1)
    starts = torch.nonzero(change.reshape(-1)).reshape(-1)
    lengths = torch.diff(starts, append=torch.tensor([flat_ids.numel()]))
    if padding_id is not None:
        lengths = lengths[flat_ids[starts] != padding_id]
    return lengths


class StepTelemetry:
    """Adds the batches of each optimiser step (:meth:`observe`) and, at its end
    (:meth:`step_end`), returns its figures with ``real_tokens_per_s`` over the time
    since the previous step ended (the first step is timed from :meth:`start`).

    >>> steps = StepTelemetry()
    >>> steps.start()
    >>> steps.observe({"input_ids": torch.zeros(1, 4, dtype=torch.long), "lengths": torch.tensor([4])})
    >>> sorted(steps.step_end())
    ['attention_waste', 'loss_tokens', 'padded_fraction', 'real_tokens', 'real_tokens_per_s']
    """

    def __init__(self, **options):
        self.options = options
        self.history: list[dict] = []
        self._step = BatchTelemetry(0, 0, 0, 0, 0)
        self._t0: float | None = None

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def observe(self, batch: Mapping) -> None:
        if self._t0 is None:
            self.start()
        self._step = self._step + batch_telemetry(batch, **self.options)

    def step_end(self) -> dict:
        now = time.perf_counter()
        elapsed = now - (self._t0 if self._t0 is not None else now)
        figures = self._step.as_dict()
        figures["real_tokens_per_s"] = self._step.real_tokens / elapsed if elapsed > 0 else 0.0
        self.history.append(figures)
        self._step, self._t0 = BatchTelemetry(0, 0, 0, 0, 0), now
        return figures
