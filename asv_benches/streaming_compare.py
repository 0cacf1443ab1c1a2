"""Print the streaming loaders next to the map-style packer on one corpus.

Corpus: ``--samples`` log-normal token lengths (``exp(N(5, 1))``, at most 4000), each
sample ``{"input_ids": int64 tensor}`` cut from one token array when it is read (as a
tokenized dataset's ``__getitem__`` or a stream's reader hands it over). Three tables:

1. planning alone, in samples/s on one core: ``StreamingPacker`` and
   ``StreamingBucketer`` iterated without a collate over samples already made
   (measuring and planning every sample), beside the rate at which the corpus
   itself makes them and the map-style ``PackingBatchSampler`` planning an epoch
   from its lengths;
2. padding: the stream packer (a window of ``--buffer``) against the offline
   ``PackingBatchSampler`` with ``pool_size`` equal to the buffer, and with one pool;
3. a ``DataLoader`` pass with ``PackedCollate``, real tokens/s: the stream
   (``DataLoader(packer, batch_size=None)``) against the map-style sampler
   (``DataLoader(dataset, batch_sampler=PackingBatchSampler)``, re-planned every pass
   with ``set_epoch``, as every epoch is), and the ratio.

What the stream pays that the map-style loader does not: a sample lives from its read
until its window is done (a window of other samples), where a map-style sample dies
within its batch. So it is collated a window after it was made, out of cache; and the
window's dicts and tensors are objects Python's cyclic collector tracks while they live:
each is scanned once by a young collection (the stream reads a window with the collector
paused, measuring and collecting it a chunk at a time while the chunk is in cache, and
collects the young generations between windows when a generation-1 collection is due,
so that few of them reach the oldest generation, whose full collections scan every
object of the process). A window lets its samples go together, in the order they were
read, so the next window's samples are made in that memory in order. It also measures
every sample and plans each window (about twice the map-style sampler's planning of an
epoch from lengths it is given). These costs of holding a window are what is left
between the two. The last table is also shown with the
collector off (``gc.disable()``). ``--buffer`` sets the stream's window and the
map-style sampler's ``pool_size`` (default: ``StreamingPacker``'s ``buffer_size``).

Planning and the loader passes are timed in this process's CPU time (``--clock cpu``,
the default: with ``num_workers=0`` all their work is in this process, and time lost to
other processes on a shared machine is not counted) or in wall time (``--clock wall``);
each round runs the stream and the map-style pass one after the other (which goes first
alternates), and the ratio shown is the median of the rounds' ratios (``--repeats``
rounds, 25 by default: about a minute).

Run: ``python asv_benches/streaming_compare.py`` (``PYTHONPATH=.`` to measure this
tree's ``loaders`` rather than the installed one). ``--cores 1`` pins the process to
one core.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import statistics
import time

import numpy as np
import torch
from torch.utils.data import DataLoader

from loaders import PackedCollate, PackingBatchSampler, StreamingBucketer, StreamingPacker


class Corpus(torch.utils.data.Dataset):
    """Samples cut from one token array on access; iterating it streams them in order."""

    def __init__(self, lengths: np.ndarray):
        self.lengths = lengths
        self.ends = np.cumsum(lengths)
        self.tokens = torch.arange(int(self.ends[-1]), dtype=torch.int64) % 30000

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict:
        end = int(self.ends[i])
        return {"input_ids": self.tokens[end - int(self.lengths[i]) : end]}

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _timed(fn, clock=time.perf_counter) -> float:
    t = clock()
    fn()
    return clock() - t


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=50_000)
    p.add_argument("--buffer", type=int, default=None, help="the window (default: StreamingPacker's)")
    p.add_argument("--max-tokens", type=int, default=16384)
    # one pass is a quarter of a second, and on a shared machine single rounds' ratios range
    # from 0.6 to 1.4: 25 rounds put the median within about two points run to run
    p.add_argument("--repeats", type=int, default=25)
    p.add_argument("--cores", type=int, default=1)
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = p.parse_args(argv)
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cores])
        torch.set_num_threads(args.cores)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rng = np.random.default_rng(0)
    L = np.clip(rng.lognormal(5.0, 1.0, args.samples).astype(np.int64), 1, 4000)
    corpus = Corpus(L)
    B = args.buffer or inspect.signature(StreamingPacker).parameters["buffer_size"].default
    packer = StreamingPacker(corpus, max_tokens=args.max_tokens, buffer_size=B)
    bucketer = StreamingBucketer(corpus, max_tokens=args.max_tokens, buffer_size=B)
    print(
        f"corpus: {len(L)} samples, mean length {L.mean():.0f}, max {L.max()}; buffer {B}; "
        f"budget {args.max_tokens} tokens/batch; {args.cores or 'all'} core(s)"
    )
    print(f"stream packer shapes {packer.shapes}; bucketer boundaries {bucketer.plan.boundaries}")

    # 1. planning alone: over samples already made (a list), and the corpus's own reading for scale
    made = list(corpus)
    planners = {
        "StreamingPacker": StreamingPacker(
            made, max_tokens=args.max_tokens, buffer_size=B, seq_len=packer.shapes[0][1]
        ),
        "StreamingBucketer": StreamingBucketer(
            made, max_tokens=args.max_tokens, buffer_size=B, plan=bucketer.plan
        ),
    }
    offline = PackingBatchSampler(L, max_tokens=args.max_tokens, seq_len=packer.shapes[0][1], pool_size=B)
    map_name = "PackingBatchSampler (map)"  # a fresh epoch each time: lengths known, nothing to measure
    plan = {"reading the corpus alone": [], **{k: [] for k in planners}, map_name: []}
    for r in range(args.repeats):
        plan["reading the corpus alone"].append(len(L) / _timed(lambda: sum(1 for _ in corpus), clock))
        for name, ds in planners.items():
            plan[name].append(len(L) / _timed(lambda ds=ds: sum(len(b) for b in ds), clock))
        plan[map_name].append(len(L) / _timed(lambda r=r: offline.packed_batches(epoch=r), clock))
    print(
        "\nplanning alone (measure + plan samples already made, no collate), samples/s, median of",
        args.repeats,
    )
    for name, v in plan.items():
        print(f"  {name:26s} {statistics.median(v):>12,.0f}")

    del made, planners  # 50k live samples would slow every garbage collection below
    gc.collect()

    # 2. padding
    def stream_pad(ds) -> float:
        real = slots = 0
        collate = PackedCollate(ds)
        for batch in ds:
            b = collate(batch)["packing"]
            real, slots = real + b.num_tokens, slots + b.shape[0] * b.shape[1]
        return 1 - real / slots

    def offline_pad(pool) -> tuple:
        s = PackingBatchSampler(L, max_tokens=args.max_tokens, pool_size=pool)
        bs = s.packed_batches()
        return 1 - sum(b.num_tokens for b in bs) / sum(b.shape[0] * b.shape[1] for b in bs), s.shapes

    print("\npadded fraction of the slots")
    print(
        f"  {'stream packer (window ' + str(B) + ')':36s} {100 * stream_pad(packer):6.2f} %  {packer.shapes}"
    )
    for pool in (B, None):
        pad, shapes = offline_pad(pool)
        print(f"  {'PackingBatchSampler pool_size=' + str(pool):36s} {100 * pad:6.2f} %  {shapes}")

    # 3. loader pass, real tokens/s
    T = packer.shapes[0][1]
    stream = StreamingPacker(
        corpus, max_tokens=args.max_tokens, buffer_size=B, seq_len=T, max_len=int(L.max())
    )
    sampler = PackingBatchSampler(L, max_tokens=args.max_tokens, seq_len=T, pool_size=B)
    loaders = {
        "stream": DataLoader(stream, batch_size=None, collate_fn=PackedCollate(stream)),
        "map": DataLoader(corpus, batch_sampler=sampler, collate_fn=PackedCollate(sampler)),
    }
    tps = {k: [] for k in (*loaders, *(k + ", gc off" for k in loaders))}
    for r in range(2 * args.repeats + 2):
        gc_off = r > args.repeats  # the second half: Python's cyclic collector off
        if gc_off:
            gc.disable()
        # one after the other, the first of a round taking turns: neither pass always finds
        # the heap and caches as the other left them
        for name in list(loaders)[:: 1 if r % 2 else -1]:
            dl = loaders[name]
            sampler.set_epoch(r)
            stream.set_epoch(r)
            real = 0

            def run(dl=dl):
                nonlocal real
                for out in dl:
                    real += int(out["lengths"].sum())

            dt = _timed(run, clock)
            if r not in (0, args.repeats + 1):  # the first pass of each half warms up
                tps[name + (", gc off" if gc_off else "")].append(real / dt)
        gc.enable()
    print(
        f"\nDataLoader pass with PackedCollate (num_workers=0), real tokens/s ({args.clock} time), "
        f"median of {args.repeats}"
    )
    for gc_note in ("", ", gc off"):
        s, m = tps["stream" + gc_note], tps["map" + gc_note]
        print(f"  {'StreamingPacker' + gc_note:36s} {statistics.median(s):>14,.0f}")
        print(f"  {'PackingBatchSampler (map)' + gc_note:36s} {statistics.median(m):>14,.0f}")
        ratios = sorted(a / b for a, b in zip(s, m))
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
        # the spread of the rounds says how much of a difference the machine's load can make
        print(
            f"  stream / map{gc_note}: {statistics.median(ratios):.2f}x "
            f"(rounds: quartiles {q1:.2f}-{q3:.2f}, {ratios[0]:.2f}-{ratios[-1]:.2f} in all)"
        )


if __name__ == "__main__":
    main()
