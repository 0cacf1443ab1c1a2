"""The two batching baselines the demo compares dyntile against.

Both fill batches greedily under the same token budget as dyntile
(``batch_size * longest_in_batch <= max_tokens``) and pad each batch to its own
longest sample with ``torch.nn.utils.rnn.pad_sequence``:

* ``"random"``: samples in shuffled order (the plain ``DataLoader(shuffle=True)`` habit);
* ``"sorted"``: shuffled, cut into pools, each pool sorted by length, batches shuffled
  (fairseq / torchtext style "bucket iterator").
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

__all__ = ["BudgetBatchSampler", "pad_sequence_collate", "ORDERS"]

ORDERS = ("random", "sorted")


class BudgetBatchSampler(torch.utils.data.Sampler):
    """``batch_sampler`` of greedy token-budget batches in random or pool-sorted order.

    >>> s = BudgetBatchSampler([4, 4, 4, 9], max_tokens=12, order="sorted", seed=0)
    >>> sorted(sorted(b) for b in s)
    [[0, 1, 2], [3]]
    """

    def __init__(self, lengths, max_tokens: int, order: str = "random", pool_size: int = 1024, seed: int = 0):
        if order not in ORDERS:
            raise ValueError(f"order should be one of {ORDERS}, but got {order!r}")
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if self.lengths.size and self.lengths.max() > max_tokens:
            i = int(self.lengths.argmax())
            raise ValueError(f"sample {i} has {self.lengths[i]} tokens, more than max_tokens={max_tokens}")
        self.max_tokens, self.order, self.pool_size, self.seed = (
            int(max_tokens),
            order,
            int(pool_size),
            int(seed),
        )
        self.epoch = 0
        self._batches = self._build()

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle deterministically for ``epoch``."""
        self.epoch = int(epoch)
        self._batches = self._build()

    def _build(self) -> list[list[int]]:
        rng = np.random.default_rng((self.seed, self.epoch))
        order = rng.permutation(self.lengths.size)
        if self.order == "sorted":
            pools = [order[i : i + self.pool_size] for i in range(0, order.size, self.pool_size)]
            order = (
                np.concatenate([p[np.argsort(self.lengths[p], kind="stable")] for p in pools])
                if pools
                else order
            )
        batches = _greedy(order, self.lengths, self.max_tokens)
        if self.order == "sorted":
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)


def _greedy(order: np.ndarray, lengths: np.ndarray, max_tokens: int) -> list[list[int]]:
    batches, cur, longest = [], [], 0
    for i in order.tolist():
        n = int(lengths[i])
        if cur and (len(cur) + 1) * max(longest, n) > max_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    return batches


def pad_sequence_collate(samples: list[dict]) -> dict[str, torch.Tensor]:
    """``[{"input_ids": (L_i,)}]`` -> ``input_ids``, ``position_ids``, ``segment_ids`` ``[B, max L_i]``.

    >>> out = pad_sequence_collate([{"input_ids": torch.tensor([5, 6, 7])}, {"input_ids": torch.tensor([8])}])
    >>> out["input_ids"].tolist(), out["segment_ids"].tolist()
    ([[5, 6, 7], [8, 0, 0]], [[1, 1, 1], [1, 0, 0]])
    """
    seqs = [s["input_ids"] for s in samples]
    ids = pad_sequence(seqs, batch_first=True, padding_value=0)
    lengths = torch.tensor([len(s) for s in seqs])
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    segments = (positions < lengths[:, None]).long()
    return {"input_ids": ids, "position_ids": positions.contiguous(), "segment_ids": segments}
