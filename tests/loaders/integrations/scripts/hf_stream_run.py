"""DynTileTrainer training a tiny Llama over a StreamingPacker with gradient accumulation
(``tests/stream_training.py``): each rank notes every batch it collates (its samples,
the stream's epoch); ``tests/loaders/integrations/test_hf_stream.py`` runs it in one
process and over 2 ``torchrun`` processes and checks the notes. On 2 ranks each reads
its own shard (``source_shards="ranks"``), rank 1's a fifth of rank 0's, so rank 1 runs
dry first every pass and repeats batches to keep DDP in step."""

import os
import tempfile

from framework_runs import note
from stream_training import name, named_samples, train

N, MAX_STEPS = 120, 20
data = named_samples(N)
world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
shard = data if world == 1 else data[: N * 5 // 6] if rank == 0 else data[N * 5 // 6 :]
with tempfile.TemporaryDirectory() as out:
    trainer = train(
        out, shard, MAX_STEPS, lambda epoch, names: note(batch=names, epoch=epoch), source_shards="ranks"
    )
note(global_step=trainer.state.global_step, samples=N, max_steps=MAX_STEPS, shard=[name(s) for s in shard])
