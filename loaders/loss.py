"""Loss normalisation for dyntile's batches: one answer however samples are batched.

Packing and token budgets change how many samples and loss tokens each step holds,
so a loss averaged per micro-batch weights a token by the company it kept. The
right normaliser is a count over the whole optimiser step: every micro-batch of the
gradient-accumulation window, on every rank. Two means:

* ``"token"``: every loss token weighs the same; the loss is the sum of the
  token losses over the number of loss tokens;
* ``"sequence"``: every sample weighs the same, each of its tokens ``1 / n`` of it;
  the loss is the sum over the number of samples. A sample is a run of one
  ``segment_ids`` value in a packed row (:class:`~loaders.PackedCollate`'s) or a
  row of a padded batch; a split sample's chunks count as samples of their own.

A label of -100 counts nothing; a sample with no loss token is no sample. With
``shift`` (causal language models, as Hugging Face's ``ForCausalLMLoss``),
position ``t`` predicts ``labels[:, t + 1]``, and the counts are of those targets.

>>> labels = torch.tensor([[-100, 5, 6, -100, 8, -100]])      # two packed samples
>>> segments = torch.tensor([[1, 1, 1, 2, 2, 0]])
>>> loss_counts({"labels": labels, "segment_ids": segments})
LossCounts(loss_tokens=3, samples=2)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = ["LossCounts", "loss_counts", "window_counts", "target_weights", "normalised_loss", "MEANS"]

#: the loss means :func:`normalised_loss` computes
MEANS = ("token", "sequence")
IGNORE = -100


class LossCounts(NamedTuple):
    """Loss tokens and samples of a batch (or of a window of batches: ``a + b`` adds them)."""

    loss_tokens: int
    samples: int

    def __add__(self, other):
        return LossCounts(self.loss_tokens + other.loss_tokens, self.samples + other.samples)

    def total(self, mean: str) -> int:
        """The normaliser of ``mean``: ``loss_tokens`` for ``"token"``, ``samples`` for ``"sequence"``."""
        return self.loss_tokens if _check_mean(mean) == "token" else self.samples


def _check_mean(mean: str) -> str:
    if mean not in MEANS:
        raise ValueError(f"mean should be one of {MEANS}, but got {mean!r}")
    return mean


def _targets(labels: torch.Tensor, segment_ids: torch.Tensor | None, shift: bool):
    """``(targets, sample key)`` of shape ``[B, T']``: the labels each position is
    scored against, and which sample each target belongs to (one key per sample)."""
    if labels.dim() < 1:
        raise ValueError(f"labels should be [B, T] (or [T]), but got a scalar of shape {tuple(labels.shape)}")
    labels = labels.reshape(-1, labels.shape[-1])
    B, T = labels.shape
    if segment_ids is None:
        key = torch.arange(B, device=labels.device)[:, None].expand(B, T)  # a padded batch: one sample a row
    else:
        segment_ids = segment_ids.reshape(-1, segment_ids.shape[-1])
        if tuple(segment_ids.shape) != (B, T):
            raise ValueError(
                f"segment_ids should have the labels' shape {(B, T)}, but got {tuple(segment_ids.shape)}"
            )
        rows = torch.arange(B, device=labels.device)[:, None]
        key = rows * (int(segment_ids.max()) + 1 if segment_ids.numel() else 1) + segment_ids.long()
    if shift:
        labels, key = labels[:, 1:], key[:, 1:]
    return labels, key


def target_weights(
    labels: torch.Tensor, segment_ids: torch.Tensor | None = None, *, mean: str = "token", shift: bool = True
) -> torch.Tensor:
    """Weight of each target (float64 ``[B, T - 1]`` with ``shift``, else ``[B, T]``):
    1 for a loss token (``"token"``), ``1 / n`` of its sample's ``n`` loss tokens
    (``"sequence"``), 0 for -100.

    >>> target_weights(torch.tensor([[-100, 5, 6, -100, 8]]), torch.tensor([[1, 1, 1, 2, 2]]),
    ...                mean="sequence").tolist()
    [[0.5, 0.5, 0.0, 1.0]]
    """
    targets, key = _targets(labels, segment_ids, shift)
    valid = targets != IGNORE
    if _check_mean(mean) == "token":
        return valid.to(torch.float64)
    _, inverse, counts = torch.unique(key[valid], return_inverse=True, return_counts=True)
    weights = torch.zeros(targets.shape, dtype=torch.float64, device=targets.device)
    weights[valid] = 1.0 / counts[inverse].to(torch.float64)
    return weights


def loss_counts(
    batch: Mapping, *, label_key: str = "labels", segment_key: str = "segment_ids", shift: bool = True
) -> LossCounts:
    """The :class:`LossCounts` of one collated batch (``batch[label_key]`` ``[B, T]``,
    and ``batch[segment_key]`` if the batch is packed). See the module docstring.

    >>> loss_counts({"labels": torch.tensor([[1, 2, 3], [4, -100, -100]])}, shift=False)
    LossCounts(loss_tokens=4, samples=2)
    """
    if label_key not in batch:
        raise KeyError(f"loss_counts needs labels, but the batch has no key {label_key!r}: {list(batch)}")
    targets, key = _targets(torch.as_tensor(batch[label_key]), batch.get(segment_key), shift)
    valid = targets != IGNORE
    return LossCounts(int(valid.sum()), int(torch.unique(key[valid]).numel()))


def window_counts(counts: Iterable[LossCounts] | LossCounts, *, group=None) -> LossCounts:
    """The counts of an optimiser step: summed over the accumulation window's
    ``counts``, then over the ranks of ``group`` when ``torch.distributed`` is
    initialised (every rank must call it). Under DDP, which averages gradients over
    ``W`` ranks, scale each rank's loss by ``W`` (``normalised_loss(..., scale=W)``).

    >>> window_counts([LossCounts(10, 2), LossCounts(7, 3)])
    LossCounts(loss_tokens=17, samples=5)
    """
    if isinstance(counts, LossCounts):
        counts = [counts]
    local = sum(counts, LossCounts(0, 0))
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        t = torch.tensor([local.loss_tokens, local.samples], dtype=torch.int64)
        dist.all_reduce(t, group=group)
        local = LossCounts(int(t[0]), int(t[1]))
    return local


def normalised_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    total: int | float | torch.Tensor,
    segment_ids: torch.Tensor | None = None,
    mean: str = "token",
    shift: bool = True,
    scale: float = 1.0,
) -> torch.Tensor:
    """This micro-batch's share of the step's loss: the cross-entropy of ``logits``
    ``[B, T, V]`` against ``labels`` ``[B, T]``, weighted by :func:`target_weights`,
    summed, over ``total`` (the window's :meth:`LossCounts.total`), times ``scale``.
    The shares of a window add up to its mean loss, so their gradients do too.

    >>> logits, labels = torch.zeros(1, 3, 4), torch.tensor([[0, 1, 2]])
    >>> round(float(normalised_loss(logits, labels, total=2)), 4)   # ln 4
    1.3863
    """
    weights = target_weights(labels, segment_ids, mean=mean, shift=shift)
    targets = labels.reshape(-1, labels.shape[-1])
    logits = logits.reshape(-1, *logits.shape[-2:])
    if shift:
        logits, targets = logits[:, :-1], targets[:, 1:]
    flat = logits.reshape(-1, logits.shape[-1])
    if flat.dtype in (torch.float16, torch.bfloat16):
        flat = flat.float()  # as Hugging Face's losses: the softmax in float32
    targets = targets.reshape(-1).to(flat.device)
    per_target = F.cross_entropy(flat, targets, ignore_index=IGNORE, reduction="none")
    weighted = (per_target * weights.reshape(-1).to(per_target.dtype)).sum()
    return weighted / total * scale
