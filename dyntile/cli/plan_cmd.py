"""``dyntile plan``: bucket boundaries, batch sizes and expected padding for a set of lengths,
and the packing shapes the cost of training on them picks (varlen and dense attention)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from dyntile.cli.errors import CLIError
from dyntile.cli.progress import add_progress_argument
from dyntile.cli.sources import corpus_from_args, describe_lengths
from dyntile.cli.table import count, format_table

__all__ = ["add_plan_arguments", "run_plan", "plan_rows", "packing_lines"]


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``dyntile plan`` besides the shared data/plan options."""
    p.add_argument(
        "--batch-tokens", type=int, default=2048, help="token budget per batch (default 2048, as in demo)"
    )
    p.add_argument("--out", metavar="PLAN.json", help="save the plan as JSON (load with BucketPlan.load)")
    p.add_argument(
        "--d-model",
        type=int,
        default=768,
        help="model width that weighs attention against the linear layers when packing "
        "(a score costs 1/(6 d_model) of a token's work; default 768)",
    )
    add_progress_argument(p)


def plan_rows(plan, lengths: np.ndarray, batch_tokens: int) -> list[list]:
    """One row per bucket: boundary, samples, share, batch size, padded % inside the bucket."""
    bucket = plan.bucket_of(lengths)
    sizes = plan.batch_sizes(batch_tokens)
    rows = []
    for b, (bound, bs) in enumerate(zip(plan.boundaries, sizes)):
        members = lengths[bucket == b]
        pad = 1.0 - members.sum() / (bound * members.size) if members.size else 0.0
        rows.append(
            [
                b,
                bound,
                members.size,
                f"{100 * members.size / lengths.size:.1f}",
                bs,
                f"{bs * bound}",
                f"{100 * pad:.1f}",
            ]
        )
    return rows


def packing_lines(lengths: np.ndarray, batch_tokens: int, d_model: int, multiple: int) -> list[str]:
    """The packing shapes of least cost for varlen and for dense attention, next to the
    longest-sample rule's (rows as long as the longest sample): two header lines and a table."""
    from dyntile.planning.packing_cost import choose_seq_len, format_shapes

    choices = {
        a: choose_seq_len(lengths, max_tokens=batch_tokens, multiple=multiple, attention=a, d_model=d_model)
        for a in ("varlen", "dense")
    }
    rows = [[f"{a} attention", c.chosen] for a, c in choices.items()]
    rows += [[f"longest sample, {a}", c.longest] for a, c in choices.items()]
    table = [
        [
            label,
            format_shapes(c.shapes),
            c.batches,
            f"{100 * c.padded_fraction:.1f}",
            f"{round(c.cost):,}",
            f"{round(c.slots):,}",
            f"{round(c.attention):,}",
            f"{round(c.overhead):,}",
        ]
        for label, c in rows
    ]
    model = choices["varlen"].model
    header = [
        f"packing: row length T of least cost, budget {batch_tokens} tokens/batch; cost = slots + "
        f"attention scores / {6 * d_model} (d_model {d_model}) + {model.step_cost:g} slots per step",
        "         (varlen: scores within each segment, causal; dense: T*T per row, a [B, 1, T, T] mask)",
    ]
    headers = ["packing for", "shapes (BxT)", "batches", "padded %", "cost", "slots", "attention", "steps"]
    return header + ["", format_table(headers, table)]


def run_plan(args: argparse.Namespace, out=None) -> int:
    """Plan, print the plan and save it when ``--out`` is given; return the exit status."""
    out = sys.stdout if out is None else out
    for name in ("buckets", "multiple", "batch_tokens", "d_model"):
        if getattr(args, name) < 1:
            raise CLIError(
                f"--{name.replace('_', '-')} should be a positive integer, but got {getattr(args, name)}"
            )
    if args.out and not Path(args.out).resolve().parent.is_dir():  # say so before the work, not after
        raise CLIError(f"--out {args.out}: the folder {Path(args.out).resolve().parent} does not exist")
    import dyntile

    corpus = corpus_from_args(args)
    lengths = corpus.lengths
    plan = dyntile.plan_buckets(lengths, max_buckets=args.buckets, multiple=args.multiple, cost=args.cost)
    try:
        rows = plan_rows(plan, lengths, args.batch_tokens)
    except ValueError as exc:  # a budget under one sample of a bucket
        raise CLIError(f"--batch-tokens {args.batch_tokens}: {exc}") from None
    print(f"data   : {corpus.name}", file=out)
    print(f"lengths: {describe_lengths(lengths)}", file=out)
    print(
        f"plan   : {count(len(plan.boundaries), 'bucket')}, multiple {plan.multiple}, cost {plan.cost}, "
        f"budget {args.batch_tokens} tokens/batch",
        file=out,
    )
    print(file=out)
    headers = ["bucket", "boundary", "samples", "share %", "batch size", "tokens/batch", "padded %"]
    print(format_table(headers, rows), file=out)
    print(file=out)
    plain = 1.0 - lengths.sum() / (lengths.size * int(lengths.max()))
    print(
        f"expected padding: {100 * plan.padding_ratio(lengths, cost='linear'):.1f}% of tokens, "
        f"{100 * plan.padding_ratio(lengths, cost='quadratic'):.1f}% of attention cost "
        f"(padding everything to the longest sample: {100 * plain:.1f}% of tokens)",
        file=out,
    )
    try:
        packing = packing_lines(lengths, args.batch_tokens, args.d_model, plan.multiple)
    except ValueError as exc:  # a sample longer than the budget: no second shape holds it
        raise CLIError(f"--batch-tokens {args.batch_tokens}: {exc}") from None
    print(file=out)
    print("\n".join(packing), file=out)
    if args.out:
        try:
            plan.save(args.out)
        except OSError as exc:
            raise CLIError(f"cannot write the plan to {args.out!r}: {exc}") from None
        print(f"plan saved to {args.out} (dyntile.BucketPlan.load({args.out!r}))", file=out)
    return 0
