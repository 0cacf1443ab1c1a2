"""torchdata's StatefulDataLoader checkpoints and resumes dyntile samplers exactly: a run
stopped after any batch of two epochs and resumed from its state_dict, in a new loader
and sampler, fetches what the uninterrupted run fetched (with and without workers)."""

import numpy as np
import pytest

pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from loaders import BucketBatchSampler, PackingBatchSampler  # noqa: E402

LENGTHS = np.random.default_rng(8).integers(1, 70, 97)
SAMPLERS = {
    "bucket": lambda: BucketBatchSampler(LENGTHS, max_tokens=300, max_buckets=3, seed=6),
    "packing": lambda: PackingBatchSampler(LENGTHS, max_tokens=300, seed=6),
}
EPOCHS = 2


def loader(make, workers):
    sampler = make()
    return sampler, stateful.StatefulDataLoader(
        range(len(LENGTHS)), batch_sampler=sampler, collate_fn=list, num_workers=workers
    )


def run(make, workers, stop=None, checkpoint=None):
    """Batches of epochs 0..EPOCHS-1, or from a ``checkpoint`` ``(epoch, loader state)``;
    with ``stop=(epoch, k)`` they end after batch k of that epoch, and the checkpoint
    a training loop would save then comes with them."""
    sampler, dl = loader(make, workers)
    first = 0
    if checkpoint is not None:
        first, state = checkpoint
        dl.load_state_dict(state)
    out = []
    for epoch in range(first, EPOCHS):
        sampler.set_epoch(epoch)  # the same epoch as a loaded state keeps its position
        for k, batch in enumerate(dl):
            out.append(batch)
            if (epoch, k) == stop:
                return out, (epoch, dl.state_dict())
    return out, None


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", SAMPLERS)
def test_resume_after_any_batch_equals_the_uninterrupted_run(name, workers):
    make = SAMPLERS[name]
    full, _ = run(make, workers)
    per_epoch = len(make())
    assert len(full) >= 2 * per_epoch - 2 and full[:per_epoch] != full[per_epoch : 2 * per_epoch]
    stops = (
        [(0, 0), (0, per_epoch // 2), (0, per_epoch - 1), (1, 1)]
        if workers
        else [(e, k) for e in range(EPOCHS) for k in range(0, per_epoch, 3)] + [(0, per_epoch - 1)]
    )
    for stop in stops:
        head, checkpoint = run(make, workers, stop=stop)
        rest, _ = run(make, workers, checkpoint=checkpoint)
        assert head + rest == full, f"stopped after batch {stop[1]} of epoch {stop[0]}"
