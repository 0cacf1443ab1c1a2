"""``dyntile demo``: one table that shows what planned shapes do for a training loop.

For each batching method (:mod:`dyntile.cli.methods`) the demo runs

1. one loader pass over the epoch (``DataLoader`` + the method's sampler and
   collate): padded fraction and distinct shapes measured on the real tensors,
   batches/s of the data pipeline;
2. a short training run of :class:`~dyntile.cli.model.TinyTransformer` under
   ``torch.compile`` (:func:`~dyntile.cli.train.train`) on the same batches: real
   (non-padding) tokens/s, steps that compiled, graphs compiled.

Every method gets the same token budget per batch and the same model and seed; each
trains with its attention (``--attention``: by default SDPA with the mask for the
baselines, :func:`dyntile.varlen_attention` for dyntile's rows).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from dyntile.cli.errors import CLIError
from dyntile.cli.progress import add_progress_argument, progress
from dyntile.cli.sources import corpus_from_args, describe_lengths
from dyntile.cli.table import count, format_table

__all__ = ["LoaderStats", "loader_pass", "run_demo", "add_demo_arguments"]


@dataclass(frozen=True)
class LoaderStats:
    """What one pass of a ``DataLoader`` produced: batches, slots, real tokens, shapes, time."""

    batches: int
    real: int
    slots: int
    empty_row_slots: int
    shapes: frozenset
    seconds: float
    complete: bool

    @property
    def padded_fraction(self) -> float:
        return 1.0 - self.real / self.slots if self.slots else 0.0

    @property
    def sample_padded_fraction(self) -> float:
        """Padding inside rows that hold data (leaves out rows that are all padding)."""
        used = self.slots - self.empty_row_slots
        return 1.0 - self.real / used if used else 0.0

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Real tokens per second (batches differ in size between methods)."""
        return self.real / self.seconds if self.seconds else 0.0


def loader_pass(loader, max_batches: int | None, desc: str, show: bool) -> LoaderStats:
    """Iterate ``loader`` (at most ``max_batches``) and measure every batch it yields."""
    total = len(loader) if max_batches is None else min(len(loader), max_batches)
    n = real = slots = empty = 0
    shapes = set()
    t0 = time.perf_counter()
    for batch in progress(loader, total, desc, show):
        seg = batch["segment_ids"]
        n, real, slots = n + 1, real + int((seg != 0).sum()), slots + seg.numel()
        empty += int((seg == 0).all(dim=1).sum()) * seg.shape[1]
        shapes.add(tuple(seg.shape))
        if n >= total:
            break
    return LoaderStats(n, real, slots, empty, frozenset(shapes), time.perf_counter() - t0, n >= len(loader))


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``dyntile demo`` (the data options are shared with ``dyntile plan``)."""
    g = p.add_argument_group("training run")
    g.add_argument(
        "--steps",
        type=int,
        default=20,
        help="optimizer steps per method (default 20); with --model llama, the size of the one "
        "sample draw every method trains on: about steps x batch-tokens real tokens",
    )
    g.add_argument(
        "--batch-tokens",
        type=int,
        default=2048,
        help="token budget per batch, padding included, the same for every method (default 2048)",
    )
    g.add_argument(
        "--pack-len",
        type=int,
        default=None,
        help="row length T of packed batches (default: the T of least training cost for the "
        "packing row's attention, see `dyntile plan`)",
    )
    g.add_argument(
        "--stream",
        action="store_true",
        help="the packing row streams the corpus (loaders.StreamingPacker, a 4096-sample buffer) "
        "instead of sampling it (PackingBatchSampler)",
    )
    g.add_argument(
        "--pack-overflow",
        choices=("extend", "split"),
        default="extend",
        help="samples longer than --pack-len: whole, in a second packed shape (default), "
        "or split into chunks over consecutive rows (one shape)",
    )
    g.add_argument(
        "--methods",
        default=None,
        help="comma-separated subset of random,sorted,buckets,packing (default: all four); with "
        "--model llama, of group_by_length,flattening,sorted,packing (default: all four)",
    )
    g.add_argument(
        "--attention",
        default="auto",
        metavar="KIND|METHOD=KIND,...",
        help="attention each method trains with: dense (SDPA over the row with a block-diagonal "
        "causal mask) or varlen (dyntile.varlen_attention on the segments); one kind for "
        "every method, or METHOD=KIND pairs over the default (auto: dense for random and "
        "sorted, varlen for buckets and packing)",
    )
    g.add_argument(
        "--model",
        choices=("tiny", "llama"),
        default="tiny",
        help="tiny: the demo's own transformer, four batching methods (default); llama: a tiny "
        "Hugging Face LlamaForCausalLM against what Hugging Face users run (needs transformers, "
        "takes longer; see dyntile.cli.demo_llama)",
    )
    g.add_argument("--no-compile", action="store_true", help="train eagerly (no torch.compile)")
    g.add_argument(
        "--backend",
        default=None,
        choices=("inductor", "aot_eager", "eager"),
        help="torch.compile backend (default aot_eager for the tiny model: Dynamo traces and "
        "recompiles on every new shape exactly as with Inductor, without Inductor's code "
        "generation, so the demo runs in about a minute on 2 cores; inductor adds ~15 s of "
        "compiling per graph; default inductor for --model llama)",
    )
    # BERT-Tiny's shape (2 layers, width 128, 2 heads of 64): the smallest model trained
    # and used in practice, and one that trains in about a minute per method here
    g.add_argument("--d-model", type=int, default=128, help="model width (default 128, as BERT-Tiny)")
    g.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    g.add_argument("--heads", type=int, default=2, help="attention heads (default 2: head dim 64)")
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's choice); 1 is steadier on a busy machine",
    )
    g.add_argument("--max-batches", type=int, default=None, help="cap on batches in the loader pass")
    g.add_argument("--plot", metavar="FILE.png", help="write a figure (needs matplotlib)")
    add_progress_argument(g)


def _parse_methods(text: str | None, model: str = "tiny") -> list[str]:
    """``--methods``: the names of ``model``'s methods it lists, in its order; all by default."""
    if model == "llama":
        from dyntile.cli.demo_llama import LLAMA_METHODS as METHODS
    else:
        from dyntile.cli.methods import METHODS
    if text is None:
        return list(METHODS)
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in METHODS]
    if bad or not names or len(set(names)) != len(names):
        which = " (with --model llama)" if model == "llama" else ""
        raise CLIError(
            f"--methods should list some of {','.join(METHODS)}{which}, each once, but got {text!r}"
        )
    return names


def _parse_attention(text: str, methods: list[str]) -> dict[str, str]:
    """``--attention``: one kind for every method, or ``METHOD=KIND`` pairs over the default."""
    from dyntile.cli.methods import DEFAULT_ATTENTION, METHODS
    from dyntile.cli.model import ATTENTIONS

    kinds = dict(DEFAULT_ATTENTION)
    text = text.strip()
    if text in ATTENTIONS:
        return {m: text for m in methods}
    if text != "auto":
        for pair in text.split(","):
            method, _, kind = pair.strip().partition("=")
            if method not in METHODS or kind not in ATTENTIONS:
                raise CLIError(
                    f"--attention should be auto, {' or '.join(ATTENTIONS)}, or METHOD=KIND pairs "
                    f"(METHOD in {','.join(METHODS)}, KIND in {','.join(ATTENTIONS)}), but got {text!r}"
                )
            kinds[method] = kind
    return {m: kinds[m] for m in methods}


def _check_positive(args, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CLIError(f"--{name.replace('_', '-')} should be a positive integer, but got {value}")


def _validate_args(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """Check the options before anything runs; return the methods and each one's attention."""
    _check_positive(
        args,
        "threads",
        "steps",
        "batch_tokens",
        "pack_len",
        "buckets",
        "d_model",
        "layers",
        "heads",
        "max_batches",
    )
    if args.d_model % args.heads:
        raise CLIError(f"--d-model should be a multiple of --heads, but got {args.d_model} and {args.heads}")
    from dyntile.cli.torch_import import require_torch

    require_torch()
    model = getattr(args, "model", "tiny")
    methods = _parse_methods(args.methods, model)
    attention = _parse_attention(args.attention, methods) if model == "tiny" else {}
    if args.plot:
        from dyntile.cli.plot import require_matplotlib

        require_matplotlib()  # before the run, not after it
    return methods, attention


def _corpus_and_plan(args: argparse.Namespace, out):
    """Read the corpus, check that every sample fits a batch, plan its buckets and print both."""
    import dyntile

    corpus = corpus_from_args(args)
    lengths = corpus.lengths
    if lengths.max() > args.batch_tokens:
        i = int(lengths.argmax())
        raise CLIError(
            f"sample {i} has {lengths[i]} tokens, more than --batch-tokens={args.batch_tokens}; "
            f"raise --batch-tokens or truncate explicitly with --max-length"
        )
    plan = dyntile.plan_buckets(lengths, max_buckets=args.buckets, multiple=args.multiple, cost=args.cost)
    print(
        f"corpus : {corpus.name}"
        + (" (lengths only: token ids drawn at random)" if corpus.synthetic else ""),
        file=out,
    )
    print(f"lengths: {describe_lengths(lengths)}", file=out)
    print(
        f"plan   : {count(len(plan.boundaries), 'bucket')} {list(plan.boundaries)}, batch sizes "
        f"{list(plan.batch_sizes(args.batch_tokens, multiple=1))} at {args.batch_tokens} tokens/batch, "
        f"planned padding {100 * plan.padding_ratio(lengths, cost='linear'):.1f}%",
        file=out,
    )
    out.flush()
    return corpus, plan


def run_demo(args: argparse.Namespace, out=None) -> int:
    """Run the demo for parsed ``args``; print the table to ``out``; return the exit status."""
    out = sys.stdout if out is None else out
    methods, attention = _validate_args(args)
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from dyntile.cli.allocator import keep_freed_memory

    kept = keep_freed_memory()
    from dyntile.cli.methods import TokenDataset
    from dyntile.cli.train import warm_up_compiler

    t_start = time.perf_counter()
    corpus, plan = _corpus_and_plan(args, out)
    if getattr(args, "model", "tiny") == "llama":
        from dyntile.cli.demo_llama import run_llama_demo

        code = run_llama_demo(args, corpus, plan, out, methods)
        print(f"wall time {time.perf_counter() - t_start:.1f} s", file=out)
        return code
    dataset = TokenDataset(corpus)
    compile_backend = None if args.no_compile else (args.backend or "aot_eager")
    warm_up = 0.0 if compile_backend is None else warm_up_compiler(compile_backend)
    rows, stats, packing = [], {}, None
    for name in methods:
        row, stats[name], batching = _run_method(
            args, name, attention[name], corpus, plan, dataset, compile_backend
        )
        rows.append(row)
        packing = batching if name == "packing" else packing
    print(file=out)
    print(format_table(_HEADERS, rows), file=out)
    print(file=out)
    lengths = corpus.lengths
    planned = plan.padding_ratio(lengths, cost="linear")
    for note in _notes(args, compile_backend, stats, planned, warm_up, packing, lengths):
        print(note, file=out)
    if kept:
        print(_MEMORY_NOTE, file=out)
    if args.plot:
        _plot(args.plot, lengths, plan, methods, stats, out)
    print(f"wall time {time.perf_counter() - t_start:.1f} s", file=out)
    return 0


_HEADERS = [
    "method",
    "attention",
    "batches",
    "shapes",
    "padded %",
    "loader tok/s",
    "steps",
    "graphs",
    "compile s",
    "tok/s",
    "steady tok/s",
    "loss",
]

_MEMORY_NOTE = (
    "memory: freed blocks stay in the process (glibc mallopt), so no step pays page faults for "
    "re-allocating its activations (as with jemalloc or tcmalloc)."
)


def _run_method(args, name: str, attention: str, corpus, plan, dataset, compile_backend):
    """One method's loader pass and training run: its table row, its loader stats, its batching."""
    import torch

    from dyntile.cli.methods import build_batching
    from dyntile.cli.model import TinyTransformer
    from dyntile.cli.train import train

    show = not args.no_progress
    build = dict(
        max_tokens=args.batch_tokens,
        pack_len=args.pack_len,
        pack_overflow=args.pack_overflow,
        seed=args.seed,
        attention=attention,
        d_model=args.d_model,
        stream=getattr(args, "stream", False),
    )
    measured = build_batching(name, corpus, plan, **build)
    ls = loader_pass(measured.loader(dataset), args.max_batches, f"{name}: loader", show)
    batching = build_batching(name, corpus, plan, **build)
    torch.manual_seed(args.seed)
    # every batch has B * T <= budget, so positions stay below it
    model = TinyTransformer(
        corpus.vocab_size,
        args.batch_tokens,
        args.d_model,
        args.heads,
        args.layers,
        attention=batching.attention,
    )
    steps = min(args.steps, len(batching.batch_sampler))
    bar = progress(range(steps), steps, f"{name}: train", show)
    tr = train(
        model,
        batching.loader(dataset),
        steps=steps,
        backend=compile_backend,
        dynamic=batching.dynamic,
        recompile_limit=len(plan.boundaries) + 2,
        on_step=lambda: next(bar, None),
    )
    for _ in bar:
        pass
    return _row(batching.label, batching.attention, ls, tr), ls, measured


def _plot(path: str, lengths: np.ndarray, plan, methods: list[str], stats: dict, out) -> None:
    """``--plot``: the lengths, the buckets and each method's padded fraction in one figure."""
    from dyntile.cli.methods import LABELS
    from dyntile.cli.plot import plot_demo

    written = plot_demo(
        path,
        lengths,
        plan.boundaries,
        [LABELS[m] for m in methods],
        [stats[m].padded_fraction for m in methods],
    )
    print(f"plot written to {written}", file=out)


def _row(label: str, attention: str, ls: LoaderStats, tr) -> list:
    graphs = "-" if tr.graphs is None else tr.graphs
    return [
        label,
        attention,
        f"{ls.batches}" + ("" if ls.complete else "+"),
        len(ls.shapes),
        f"{100 * ls.padded_fraction:.1f}",
        f"{ls.tokens_per_s:.0f}",
        tr.steps,
        graphs,
        f"{tr.compile_seconds:.1f}",
        f"{tr.tokens_per_s:.0f}",
        f"{tr.steady_tokens_per_s:.0f}",
        f"{tr.first_loss:.2f}->{tr.last_loss:.2f}",
    ]


def _packing_note(shapes, seq_len: int, longer: int, overflow: str) -> str:
    """What the packed shapes ``(B, T)`` mean, for rows of ``seq_len`` tokens of which
    ``longer`` samples do not fit."""
    named = ", ".join(f"{b}x{t}" for b, t in sorted(shapes, key=lambda bt: bt[1]))
    if longer == 0:
        return f"dyntile packing: shape {named} (B x T): rows of T={seq_len} tokens hold every sample whole."
    if overflow == "split":
        return (
            f"dyntile packing: shape {named} (B x T); the {longer} samples longer than T={seq_len} are split "
            f"into chunks over consecutive rows, each chunk its own segment (--pack-overflow)."
        )
    if len(shapes) == 1:
        return (
            f"dyntile packing: shape {named} (B x T); the {longer} samples longer than T={seq_len} "
            f"are kept whole in its rows, and the shorter ones share those rows (--pack-overflow)."
        )
    return (
        f"dyntile packing: shapes {named} (B x T); the {longer} samples longer than T={seq_len} "
        f"are kept whole in rows of the second shape (--pack-overflow)."
    )


def _choice_note(batching) -> str:
    """What chose the packed row length: ``--pack-len``, or the cost of each candidate."""
    T = batching.batch_sampler.shapes[0][1]
    if batching.packing is None:
        return f"dyntile packing: T={T} from --pack-len."
    lines = batching.packing.describe().split("\n")
    probed = getattr(batching, "probed", 0)  # a stream chooses T on its first samples
    on = f" on the stream's first {probed} samples" if probed else ""
    return (
        f"dyntile packing: T={T}, the least training cost for {batching.attention} attention{on}: "
        f"{lines[0]}; against the {lines[1]}."
    )


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _notes(
    args,
    backend,
    stats: dict,
    planned: float,
    warm_up: float,
    packing=None,
    lengths: np.ndarray | None = None,
) -> list[str]:
    """The lines under the table; ``packing``: the packing method's batching, if it ran."""
    how = "eager (--no-compile)" if backend is None else f"torch.compile(backend={backend!r})"
    notes = [
        "batches, shapes, padded %, loader tok/s (real tokens/s): one pass of the DataLoader over the epoch"
        + ("" if all(s.complete for s in stats.values()) else " ('+': capped by --max-batches)")
        + ".",
        f"training: the first {args.steps} batches of each method (--steps), budget {args.batch_tokens} "
        f"tokens/batch, TinyTransformer d_model={args.d_model} layers={args.layers} heads={args.heads}, "
        f"next-token loss inside each sample, {how}, {_torch_threads()} torch threads.",
        "attention: dense = SDPA over the whole row with a block-diagonal causal mask "
        "(every score computed); varlen = dyntile.varlen_attention on the segments "
        "(only the scores inside samples).",
        "tok/s counts real (non-padding) tokens; steady tok/s leaves out the steps that compiled.",
    ]
    if "buckets" in stats:
        b = stats["buckets"]
        notes.insert(
            1,
            f"dyntile buckets: {100 * b.sample_padded_fraction:.1f}% padding inside samples' rows "
            f"(planned {100 * planned:.1f}%) + {100 * b.empty_row_slots / max(b.slots, 1):.1f}% in empty "
            "rows that top up each bucket's last batch (one shape per bucket).",
        )
    if packing is not None:
        T = packing.batch_sampler.shapes[0][1]
        notes.insert(1, _choice_note(packing))
        notes.insert(
            1, _packing_note(stats["packing"].shapes, T, int((lengths > T).sum()), args.pack_overflow)
        )
    if backend is not None:
        notes.append(
            "graphs: graphs torch.compile built (first compile + every recompilation); "
            "the baselines use torch.compile's defaults (a static graph, then one dynamic graph "
            "after the first shape change); dyntile compiles dynamic=False: one static graph per "
            "planned shape (bucket or packed shape), each compiled once. "
            f"The compiler's one-time start-up ({warm_up:.1f} s) ran before the first method."
        )
    return notes
