"""Print batches/s of DynTileCollate next to the usual ways of padding token batches.

Batches of 64 variable-length token sequences (lengths drawn from the CPython
docstring lengths in ``../shared/data`` when present, else a log-normal stand-in),
given as dicts of ``input_ids`` and ``labels``:

* ``pad_sequence``: ``torch.nn.utils.rnn.pad_sequence`` per key + a mask built
  from the lengths (the hand-written collate most code uses);
* ``default_collate``-style ``torch.stack`` is impossible on ragged data, so not shown;
* Hugging Face ``DataCollatorWithPadding(pad_to_multiple_of=8)`` (only when
  ``transformers`` is installed): it pads ``input_ids`` and builds the mask but
  does not pad ragged ``labels``, so it runs in tables of its own on samples of
  ``input_ids`` alone, next to dyntile on the same samples;
* ``dyntile``: ``DynTileCollate`` (no plan: batch max rounded up to 8; and with an
  8-bucket plan).

Then the same two-key comparison against ``pad_sequence`` on samples built just
before each collate (as a ``DataLoader`` worker's ``__getitem__`` makes them): the
caches are then cold for both, which costs dyntile's per-tensor reads more; and
against Hugging Face on new lists of new ints (as a tokenizer hands them over).
Last, the two-key batches through a ``DataLoader`` with one worker, where each
batch also crosses from the worker to the main process (DynTileCollate's
one-buffer transfer, next to torch's per-tensor one).

Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python asv_benches/collate_compare.py``
(medians of interleaved repeats; ratios are what to read on a busy machine). The
tables time each method's pass over the batches after untimed passes of its own for
at least ``WARMUP_SECONDS`` (steady state, as asv warms a time benchmark); ``--cold``
adds the same tables timed right after the other methods' passes, and the
fresh-sample lines time collates of samples made just before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the asv suite, as a package

from benchmarks.bench_collate import (  # noqa: E402
    WARMUP_SECONDS,
    hf_collate,
    loader_seconds,
    make_batches,
    pad_sequence_collate,
    warmed,
)

from dyntile.planning import plan_buckets  # noqa: E402
from loaders import DynTileCollate  # noqa: E402


def measure(fn, batches, repeat: int) -> float:
    """Median seconds per batch over ``repeat`` passes through ``batches``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for b in batches:
            fn(b)
        times.append((time.perf_counter() - t0) / len(batches))
    return statistics.median(times)


def as_tensors(sample: dict) -> dict:
    """A sample as a ``Dataset.__getitem__`` returning tensors builds it."""
    return {k: torch.tensor(v) for k, v in sample.items()}


def as_new_lists(sample: dict) -> dict:
    """A sample as a tokenizer returns it: new lists of new int objects."""
    return {k: [x + 0 for x in v] for k, v in sample.items()}


def fresh_ratio(batches, ours, reference, repeat: int, build=as_tensors) -> tuple[float, float, float]:
    """``(our us/batch, reference us/batch, reference time / our time)`` when every
    collate gets samples built just before it (``build`` per sample, as a
    ``Dataset.__getitem__`` in a ``DataLoader`` worker makes them); only the collate is
    timed, the two collates alternate which goes first, medians over ``repeat`` passes."""
    pairs = (("ours", ours), ("reference", reference))
    totals = {"ours": [], "reference": []}
    for _ in range(repeat):
        t = dict.fromkeys(totals, 0.0)
        for i, b in enumerate(batches):
            for name, fn in pairs if i % 2 else pairs[::-1]:
                fresh = [build(s) for s in b]
                t0 = time.perf_counter()
                fn(fresh)
                t[name] += time.perf_counter() - t0
        for name in totals:
            totals[name].append(t[name] / len(batches) * 1e6)
    ours_us, ref_us = statistics.median(totals["ours"]), statistics.median(totals["reference"])
    return ours_us, ref_us, ref_us / ours_us


def rotated(methods: dict, rounds: int, seconds, warm: bool = True) -> dict:
    """``{name: [seconds per batch, one per round]}``, the methods interleaved and their
    order rotated each round (fair on a busy machine). With ``warm``, each timed pass
    follows untimed passes of the same method for at least ``WARMUP_SECONDS`` (asv's
    default warm-up): each is timed in its own steady state, as asv and timeit time it,
    not in the state the method before it left. (Right after HF's ~0.1 s of Python,
    dyntile's first pass over the batches takes 2-3x its steady time and its second
    1.3-1.8x: on this VM, memory untouched for a millisecond or more costs up to ~0.7 us
    a page to reach again. The fresh-sample lines, and ``--cold``, measure that case.)"""
    results = {name: [] for name in methods}
    turns = list(methods.items())
    for r in range(rounds):
        for name, fn in turns[r % len(turns) :] + turns[: r % len(turns)]:
            results[name].append(warmed(seconds, fn) if warm else seconds(fn))
    return results


def print_table(title: str, results: dict) -> None:
    """us/batch, batches/s and each method's time over the first method's (medians)."""
    base = statistics.median(next(iter(results.values())))
    print(f"\n{title}")
    print(f"{'method':34s} {'us/batch':>10s} {'batches/s':>10s} {'dyntile speedup':>16s}")
    for name, ts in results.items():
        t = statistics.median(ts)
        print(f"{name:34s} {t * 1e6:10.1f} {1 / t:10.0f} {t / base:15.1f}x")


def loader_table(order: str, args) -> None:
    """us/batch through a ``DataLoader`` with one worker (the collate runs there and
    every batch crosses to this process), the methods interleaved, medians."""
    _, batches = make_batches("tensors", args.batches, args.batch, order=order)
    pads = {"input_ids": 0, "labels": -100}
    methods = {
        "dyntile (one-buffer transfer)": DynTileCollate(pad_values=pads),
        "dyntile (torch's transfer)": DynTileCollate(pad_values=pads, worker_transfer="torch"),
        "pad_sequence + mask": pad_sequence_collate,
    }
    results = rotated(
        methods,
        max(1, args.repeat // 2),
        lambda fn: loader_seconds(fn, batches) / (len(batches) - 1),
        warm=False,
    )  # each pass starts its own worker
    print_table(
        f"through a DataLoader (1 worker), {order} batches of {args.batch} dict samples (input_ids, labels)",
        results,
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument(
        "--cold",
        action="store_true",
        help="also time each pass right after the other methods' (no warm-up pass)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # as in DataLoader workers, where a collate_fn runs
    cases = [
        (kind, order, labels)
        for labels in (True, False)
        for kind, order in (
            ("tensors", "random"),
            ("tensors", "grouped"),
            ("lists", "random"),
            ("lists", "grouped"),
        )
    ]
    for kind, order, labels in cases:
        L, batches = make_batches(kind, args.batches, args.batch, order=order, labels=labels)
        plan = plan_buckets(L, max_buckets=8)
        pads = {"input_ids": 0, "labels": -100} if labels else {"input_ids": 0}
        methods = {
            "dyntile (multiple=8)": DynTileCollate(pad_values=pads),
            "dyntile (8-bucket plan)": DynTileCollate(plan, pad_values=pads),
        }
        if labels and kind == "tensors":
            methods["pad_sequence + mask"] = pad_sequence_collate
        elif not labels:
            try:
                methods["HF DataCollatorWithPadding(8)"] = hf_collate()
            except NotImplementedError:  # transformers is not installed
                continue
        if len(methods) == 2:
            continue
        for fn in methods.values():  # warm up
            fn(batches[0])
        keys = "input_ids, labels" if labels else "input_ids"
        for warm in (True, False) if args.cold else (True,):
            results = rotated(methods, args.repeat, lambda fn: measure(fn, batches, 1), warm=warm)
            state = (
                f"each after {WARMUP_SECONDS} s of its own passes"
                if warm
                else "each after the method before it"
            )
            print_table(
                f"{kind}, {order} batches: {args.batches} batches of {args.batch} dict samples ({keys}); "
                f"{state}",
                results,
            )

    for order in ("random", "grouped"):
        _, lists = make_batches("lists", args.batches, args.batch, order=order)
        ours, ref, ratio = fresh_ratio(
            lists,
            DynTileCollate(pad_values={"input_ids": 0, "labels": -100}),
            pad_sequence_collate,
            args.repeat,
        )
        print(
            f"\nfresh samples, {order} batches (built just before each collate; input_ids, labels): "
            f"dyntile {ours:.1f} us, pad_sequence + mask {ref:.1f} us: {ratio:.1f}x"
        )
    try:
        hf = hf_collate()
    except NotImplementedError:  # transformers is not installed
        hf = None
    for order in ("random", "grouped") if hf is not None else ():
        _, lists = make_batches("lists", args.batches, args.batch, order=order, labels=False)
        ours, ref, ratio = fresh_ratio(
            lists,
            DynTileCollate(pad_values={"input_ids": 0}),
            hf,
            max(1, args.repeat // 2),
            build=as_new_lists,
        )
        print(
            f"\nfresh samples, {order} batches (new lists of new ints just before each collate; input_ids): "
            f"dyntile {ours:.1f} us, HF DataCollatorWithPadding(8) {ref:.1f} us: {ratio:.1f}x"
        )
    for order in ("random", "grouped"):
        loader_table(order, args)


if __name__ == "__main__":
    main()
