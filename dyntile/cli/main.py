"""``dyntile`` / ``python -m dyntile``: argument parsing and subcommand dispatch.

``dyntile demo`` needs no arguments and no downloads; plain ``dyntile`` prints help.
Errors in the input (a missing file, a bad line, a bad flag) print
``dyntile: error: ...`` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dyntile import __version__
from dyntile.cli.errors import CLIError

__all__ = ["main", "build_parser", "MAX_BATCH_TOKENS", "MAX_SEED"]

#: the largest --batch-tokens: the demo's model has one position embedding row per token of a
#: batch (2**20 rows of width 64: 256 MiB); budgets past it would allocate gigabytes, and past
#: int64 they overflow the planned batch sizes
MAX_BATCH_TOKENS = 2**20
#: the largest --seed: torch.manual_seed takes 64-bit seeds (NumPy takes any non-negative integer)
MAX_SEED = 2**64 - 1

_EPILOG = """examples:
  dyntile demo                                  # stdlib docstrings, four batching methods, one table
  dyntile demo --limit 2000 --steps 10 --plot demo.png
  dyntile demo --data lengths.txt --no-compile  # your lengths (ids drawn at random)
  dyntile demo --data train.jsonl --field input_ids
  dyntile plan lengths.npy --buckets 8 --out plan.json
  dyntile bench
"""


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (default: docstrings of the Python standard library)")
    g.add_argument("--field", help="key holding token ids or text in a .jsonl file")
    g.add_argument("--pad-id", type=int, help="strip this trailing id from rows of a 2-D .npy array")
    g.add_argument(
        "--allow-pickle", action="store_true", help="load object arrays from .npy (trusted files only)"
    )
    g.add_argument("--limit", type=int, help="use only the first N samples (docstrings)")
    g.add_argument(
        "--max-length", type=int, help="truncate samples to N tokens (explicit; never done otherwise)"
    )
    g.add_argument(
        "--vocab-size", type=int, default=4096, help="word vocabulary built from a text corpus (default 4096)"
    )
    g.add_argument("--seed", type=int, default=0, help="shuffling, init and random ids (default 0)")
    g = p.add_argument_group("plan")
    g.add_argument("--buckets", type=int, default=8, help="most bucket boundaries (default 8)")
    g.add_argument("--multiple", type=int, default=8, help="boundaries are multiples of this (default 8)")
    g.add_argument(
        "--cost",
        choices=("linear", "quadratic"),
        default="linear",
        help="minimise padded tokens (linear) or padded attention cost (quadratic)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``dyntile`` command."""
    from dyntile.cli.bench_cmd import add_bench_arguments
    from dyntile.cli.demo import add_demo_arguments
    from dyntile.cli.plan_cmd import add_plan_arguments

    parser = argparse.ArgumentParser(
        prog="dyntile",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Pad and tile ragged batches into a few planned shapes; see what it does for training.",
    )
    parser.add_argument("--version", action="version", version=f"dyntile {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{demo,plan,bench}")

    demo = sub.add_parser(
        "demo",
        help="compare batching methods on a corpus: padding, shapes, speed, recompiles",
        description="Batch a corpus four ways (random, sorted pools, dyntile buckets, dyntile "
        "packing), time a DataLoader pass and a short torch.compile training run "
        "of a small transformer, and print one table. The default compile "
        "backend (aot_eager) runs in about a minute on 2 cores; with "
        "--backend inductor most of the time is compilation (a few minutes).",
    )
    demo.add_argument("--data", metavar="FILE", help="lengths or token ids (.txt, .npy, .npz, .jsonl)")
    _add_data_arguments(demo)
    add_demo_arguments(demo)

    plan = sub.add_parser(
        "plan",
        help="plan bucket boundaries and batch sizes for a lengths file",
        description="Plan buckets for LENGTHS, print boundaries, batch sizes and expected "
        "padding, and optionally save the plan as JSON (BucketPlan.load).",
    )
    plan.add_argument(
        "data",
        nargs="?",
        metavar="LENGTHS",
        help="lengths or token ids (.txt, .npy, .npz, .jsonl); default: stdlib docstrings",
    )
    _add_data_arguments(plan)
    add_plan_arguments(plan)

    bench = sub.add_parser(
        "bench",
        help="quick GEMM and collate timings against NumPy / torch",
        description="Time dyntile.matmul against numpy.matmul (and torch) and dyntile's "
        "padding against torch's pad_sequence; print ratios. The history "
        "lives in the asv suite (asv_benches/).",
    )
    add_bench_arguments(bench)
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from dyntile.cli.demo import run_demo

        return run_demo(args)
    if args.command == "plan":
        from dyntile.cli.plan_cmd import run_plan

        return run_plan(args)
    from dyntile.cli.bench_cmd import run_bench

    return run_bench(args)


def _check_batch_tokens(budget: int | None) -> None:
    """``CLIError`` for a ``--batch-tokens`` (of demo or plan) outside 1..MAX_BATCH_TOKENS."""
    if budget is not None and not 1 <= budget <= MAX_BATCH_TOKENS:
        raise CLIError(
            f"--batch-tokens should be a positive number of tokens up to {MAX_BATCH_TOKENS} (2**20), "
            f"but got {budget}"
        )


def _check_seed(seed: int) -> None:
    """``CLIError`` for a ``--seed`` outside what NumPy's and torch's generators take (0..2**64-1)."""
    if not 0 <= seed <= MAX_SEED:
        raise CLIError(
            f"--seed should be a non-negative integer up to {MAX_SEED} (2**64 - 1, the seeds torch "
            f"takes), but got {seed}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse ``argv`` (default ``sys.argv[1:]``), run, return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        print("\nstart with: dyntile demo", file=sys.stdout)
        return 0
    try:
        _check_seed(getattr(args, "seed", 0))
        _check_batch_tokens(getattr(args, "batch_tokens", None))
        return _dispatch(args)
    except (CLIError, ValueError) as exc:
        print(
            f"dyntile: error: {' '.join(str(exc).splitlines())}", file=sys.stderr
        )  # one line, as argparse's
        return 2
    except KeyboardInterrupt:
        print("dyntile: interrupted", file=sys.stderr)
        return 130
