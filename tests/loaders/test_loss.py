"""loaders.loss: one optimiser step's gradient, however its samples are batched.

64 samples in one padded batch, the same samples packed over 4 accumulation steps,
and over 2 gloo ranks with 2 steps each give one gradient (fp64, 1e-6 relative), for
the token mean and the sequence mean; Hugging Face's Trainer logs one loss for
batch 8 / accumulation 1 and batch 2 / accumulation 4."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from gloo_ranks import on_gloo_ranks
from loaders import DynTileCollate, PackedCollate
from loaders.loss import LossCounts, loss_counts, normalised_loss, target_weights, window_counts

VOCAB, N, WORLD = 23, 64, 2


def dataset(seed=0):
    """64 samples of 1..20 tokens; each masks a random prompt with -100 (some wholly)."""
    rng = np.random.default_rng(seed)
    out = []
    for n in rng.integers(1, 21, N):
        ids = torch.as_tensor(rng.integers(1, VOCAB, n))
        labels = ids.clone()
        labels[: rng.integers(0, n + 1)] = -100
        out.append({"input_ids": ids, "labels": labels})
    return out


class TokenModel(torch.nn.Module):
    """fp64 logits from each token and a causal running mean of its sample (segment)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, 8, dtype=torch.float64)
        self.head = torch.nn.Linear(16, VOCAB, dtype=torch.float64)

    def forward(self, input_ids, segment_ids):
        x = self.embed(input_ids)
        same = segment_ids[:, :, None] == segment_ids[:, None, :]
        causal = torch.ones(same.shape[1:], dtype=torch.bool).tril()
        w = (same & causal).to(x.dtype)
        ctx = w @ x / w.sum(-1, keepdim=True)
        return self.head(torch.cat([x, ctx], -1))


def segments_of(batch):
    return batch.get("segment_ids", batch["attention_mask"].long() if "attention_mask" in batch else None)


def step_gradient(batches, mean, counts=None, scale=1.0):
    """The summed gradient of the batches' normalised losses."""
    model = TokenModel()
    counts = counts or window_counts([loss_counts(b) for b in batches])
    for b in batches:
        seg = segments_of(b)
        logits = model(b["input_ids"], seg)
        packed = "segment_ids" in b
        normalised_loss(
            logits,
            b["labels"],
            total=counts.total(mean),
            segment_ids=seg if packed else None,
            mean=mean,
            scale=scale,
        ).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def padded(samples):
    return DynTileCollate(multiple=8)(samples)


def packed_steps(samples, steps):
    size = len(samples) // steps
    return [PackedCollate([(16, 32)])(samples[i * size : (i + 1) * size]) for i in range(steps)]


def close(a, b, rel=1e-6):
    return float((a - b).abs().max()) <= rel * float(b.abs().max())


def test_counts_skip_ignored_labels_and_empty_samples():
    labels = torch.tensor([[-100, 5, 6, -100, 8, -100, -100], [1, -100, -100, -100, -100, -100, -100]])
    seg = torch.tensor([[1, 1, 1, 2, 2, 3, 0], [1, 1, 0, 0, 0, 0, 0]])
    # shifted: row 0 targets 5, 6 (sample 1), 8 (sample 2); sample 3 and row 1 have none
    assert loss_counts({"labels": labels, "segment_ids": seg}) == LossCounts(3, 2)
    assert loss_counts({"labels": labels, "segment_ids": seg}, shift=False) == LossCounts(4, 3)
    w = target_weights(labels, seg, mean="sequence")
    assert w[0].tolist() == [0.5, 0.5, 0, 1, 0, 0] and float(w.sum()) == 2
    with pytest.raises(ValueError, match="mean should be one of"):
        target_weights(labels, mean="row")
    with pytest.raises(KeyError, match="no key 'labels'"):
        loss_counts({"input_ids": labels})


@pytest.mark.parametrize("mean", ["token", "sequence"])
def test_padded_and_packed_over_accumulation_give_one_gradient(mean):
    samples = dataset()
    one = padded(samples)
    assert one["input_ids"].shape[0] == N
    want = step_gradient([one], mean)
    four = packed_steps(samples, 4)
    assert window_counts([loss_counts(b) for b in four]) == loss_counts(one)
    assert close(step_gradient(four, mean), want)
    # the per-micro-batch mean (each step normalised alone) is a different gradient: the test can fail
    alone = sum(step_gradient([b], mean) / 4 for b in four)
    assert not close(alone, want, rel=1e-3)


def _rank(rank: int) -> dict:
    mine = packed_steps(dataset(), 4)[2 * rank : 2 * rank + 2]  # 2 accumulation steps a rank
    counts = window_counts([loss_counts(b) for b in mine])  # all-reduced over the ranks
    grads = {}
    for mean in ("token", "sequence"):
        grad = step_gradient(mine, mean, counts, scale=WORLD)
        dist.all_reduce(grad)
        grads[mean] = (grad / WORLD).tolist()  # what DDP does to gradients
    return {"grads": grads, "counts": list(counts)}


@pytest.mark.slow
def test_two_ranks_over_gloo_give_the_same_gradient(tmp_path):
    res = on_gloo_ranks(_rank, tmp_path, WORLD)
    one = padded(dataset())
    assert res[0]["counts"] == res[1]["counts"] == list(loss_counts(one))
    for mean in ("token", "sequence"):
        want = step_gradient([one], mean)
        for r in res:
            assert close(torch.tensor(r["grads"][mean], dtype=torch.float64), want), mean
