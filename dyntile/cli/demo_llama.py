"""``dyntile demo --model llama``: the batching methods on a real model class.

A tiny ``transformers.LlamaForCausalLM`` from a config (random weights, no download)
trains on the demo's corpus, eager and under ``torch.compile``, with what Hugging
Face users run and with dyntile:

* ``group_by_length``: the ``Trainer``'s ``LengthGroupedSampler``, a fixed number of
  samples per batch (the token budget over the mean length), padded to the batch's
  longest, ``sdpa`` with the padding mask;
* ``flattening``: ``DataCollatorWithFlattening`` on the same fixed-size batches in
  random order, one ``[1, N]`` row, ``sdpa`` (transformers builds the dense
  ``N x N`` block mask from the restarting ``position_ids``);
* ``sorted pools``: token-budget batches from length-sorted pools, padded, ``sdpa``;
* ``dyntile packing``: ``PackingBatchSampler`` + ``PackedCollate``, the model's
  attention ``dyntile_varlen`` (:func:`loaders.integrations.huggingface.register_attention`).

Every method trains from the same initial weights with the same token budget, on the
same samples: one seeded draw of the corpus of about ``--steps`` x ``--batch-tokens``
real tokens, and each method runs one epoch of its own sampler and collate over that
draw, every sample once (so the methods take different numbers of steps for the same
work, and real tokens/s compares like with like). The eager and the compiled run of a
method train on the very same batches. Before timing, each run does a warm-up pass:
one forward and backward on each distinct batch shape of its steps, in order, with no
optimizer step (the weights stay as they are). Under ``torch.compile`` the warm-up
builds every graph the steps need (its seconds are the compile time, a column of
their own); eager, it fills the kernels' per-shape caches alike. Then every step is
timed, none left out, interleaved (one step of each run in turn) so machine noise
falls on all alike; a graph built during the timed steps shows in the table. Tokens/s
counts real tokens only. The loss is the next-token loss over the epoch, each loss
token weighted once (the same tokens for every method). Last, the overhead of the
registered attention over calling :func:`dyntile.varlen_attention` directly on the
same tensors is timed (forward and backward, medians).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from dyntile.cli.errors import CLIError
from dyntile.cli.table import format_table

__all__ = ["run_llama_demo", "LLAMA_METHODS"]

#: (method, label, attention route): ``padded`` = sdpa with the padding mask, ``packed`` =
#: sdpa on one flattened row (transformers' block mask from ``position_ids``), ``varlen`` =
#: the registered ``dyntile_varlen`` on ``segment_ids``
_METHODS = (
    ("group_by_length", "group_by_length + padding", "padded"),
    ("flattening", "DataCollatorWithFlattening", "packed"),
    ("sorted", "sorted pools + padding", "padded"),
    ("packing", "dyntile packing", "varlen"),
)
LLAMA_METHODS = tuple(m for m, _, _ in _METHODS)
_LABELS = {m: label for m, label, _ in _METHODS}
_ROUTES = {m: route for m, _, route in _METHODS}
#: the compiler the table uses unless ``--backend`` names another
DEFAULT_BACKEND = "inductor"


def _require_transformers():
    try:
        import transformers
    except ImportError:
        raise CLIError(
            "--model llama needs transformers: pip install -c <(echo torch==$(python -c "
            "'import torch; print(torch.__version__)')) transformers"
        ) from None
    return transformers


class _CausalLMStep(torch.nn.Module):
    """``(input_ids, position_ids, segment_ids) -> loss`` for a Hugging Face causal LM:
    labels are the tokens, -100 on padding and on each sample's first token (a model
    shifting labels never learns one sample's start from another's end)."""

    def __init__(self, model, route: str):
        super().__init__()
        self.model, self.route = model, route

    def forward(self, input_ids, position_ids, segment_ids):
        labels = _labels(input_ids, segment_ids)
        inputs = dict(input_ids=input_ids, position_ids=position_ids, labels=labels, use_cache=False)
        if self.route == "padded":
            inputs["attention_mask"] = segment_ids != 0
        elif self.route == "varlen":
            inputs["segment_ids"] = segment_ids
        return self.model(**inputs).loss


def _labels(input_ids, segment_ids):
    """The tokens as labels, -100 on padding and on each sample's first token."""
    first = torch.ones_like(segment_ids, dtype=torch.bool)
    first[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    return input_ids.masked_fill(first | (segment_ids == 0), -100)


def _loss_tokens(segment_ids) -> int:
    """Tokens a causal LM's loss averages over (labels shifted by one, -100 left out)."""
    return int((_labels(segment_ids, segment_ids)[:, 1:] != -100).sum())


class _GroupByLength(torch.utils.data.Sampler):
    """Batches of ``batch_size`` in the order of transformers' ``LengthGroupedSampler``
    (as ``Trainer(group_by_length=True)``), or of a random permutation."""

    def __init__(self, lengths, batch_size: int, seed: int, grouped: bool):
        from transformers.trainer_pt_utils import LengthGroupedSampler

        g = torch.Generator().manual_seed(seed)
        if grouped:
            order = list(LengthGroupedSampler(batch_size, lengths=[int(n) for n in lengths], generator=g))
        else:
            order = torch.randperm(len(lengths), generator=g).tolist()
        self.batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def _flattening_collate():
    from transformers import DataCollatorWithFlattening

    flatten = DataCollatorWithFlattening(return_tensors="pt")

    def collate(samples):
        out = flatten([{"input_ids": s["input_ids"].tolist()} for s in samples])
        pos = out["position_ids"]
        starts = torch.ones_like(pos, dtype=torch.bool)
        starts[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
        return {"input_ids": out["input_ids"], "position_ids": pos, "segment_ids": starts.cumsum(-1)}

    return collate


def _batching(name, corpus, plan, args, batch_size):
    """``(batch_sampler, collate, dynamic)`` of one method over ``corpus``; ``dynamic`` as
    :class:`~dyntile.cli.methods.Batching`'s (``None``, torch's default, for Hugging Face's
    own ways)."""
    from dyntile.cli.baselines import pad_sequence_collate
    from dyntile.cli.methods import build_batching

    if name in ("group_by_length", "flattening"):
        grouped = name == "group_by_length"
        sampler = _GroupByLength(corpus.lengths, batch_size, args.seed, grouped)
        return sampler, pad_sequence_collate if grouped else _flattening_collate(), None
    batching = build_batching(
        name,
        corpus,
        plan,
        max_tokens=args.batch_tokens,
        pack_len=args.pack_len,
        seed=args.seed,
        pack_overflow=args.pack_overflow,
        attention="dense" if name == "sorted" else "varlen",
        d_model=args.d_model,
    )
    return batching.batch_sampler, batching.collate_fn, batching.dynamic


def draw_samples(lengths, tokens: int, seed: int) -> np.ndarray:
    """Sorted indices int64 ``(n,)`` of a seeded random draw of samples holding at least
    ``tokens`` real tokens (the whole corpus if it holds fewer).

    >>> draw_samples(np.array([5, 3, 6, 2]), 8, seed=0).tolist()
    [0, 2]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(lengths.size)
    # the first sample at which the running total reaches ``tokens`` is drawn too
    n = int(np.searchsorted(np.cumsum(lengths[order]), tokens)) + 1
    return np.sort(order[:n])


def subset_corpus(corpus, ids):
    """The samples ``ids`` of ``corpus`` as a corpus of their own (same vocabulary, same ids)."""
    import dataclasses

    ids = np.asarray(ids, dtype=np.int64)
    sequences = [corpus.sequence(int(i)) for i in ids]
    return dataclasses.replace(corpus, lengths=corpus.lengths[ids], sequences=sequences)


def epoch_batches(name, subset, plan, args, batch_size):
    """``(batches, dynamic, ids)``: one epoch of method ``name`` over ``subset``, every sample
    once; ``ids[k]``: the subset's sample indices of ``batches[k]``."""
    from dyntile.cli.methods import TokenDataset

    sampler, collate, dynamic = _batching(name, subset, plan, args, batch_size)
    dataset = TokenDataset(subset)
    ids = [[int(i) for i in b] for b in sampler]
    return [collate([dataset[i] for i in b]) for b in ids], dynamic, ids


def group_size(lengths, batch_tokens: int) -> int:
    """Samples a batch for ``group_by_length`` and ``flattening``: the token budget over the
    mean length, as a Hugging Face user sets ``per_device_train_batch_size`` from it."""
    return max(1, round(batch_tokens / float(np.mean(lengths))))


def _train_step(run, batch, step: bool) -> torch.Tensor:
    loss = run["fn"](batch["input_ids"], batch["position_ids"], batch["segment_ids"])
    loss.backward()
    if step:
        run["opt"].step()
    run["opt"].zero_grad(set_to_none=True)
    return loss.detach()


def _warm_up(run, stats) -> None:
    """One forward and backward on each distinct batch shape of the run's steps, in
    order, no optimizer step: compiles every graph the steps need, fills eager kernels'
    per-shape caches, and leaves the weights as they are."""
    graphs, seen = stats["unique_graphs"], set()
    t0 = time.perf_counter()
    for batch in run["batches"]:
        shape = tuple(batch["input_ids"].shape)
        if shape not in seen:
            seen.add(shape)
            _train_step(run, batch, step=False)
    run.update(warm_s=time.perf_counter() - t0, warm_graphs=stats["unique_graphs"] - graphs, shapes=len(seen))


def run_llama_demo(args, corpus, plan, out, methods=LLAMA_METHODS) -> int:
    """Train each of ``methods`` (names of :data:`LLAMA_METHODS`), eager and compiled, on the
    same steps; print the table and the registered attention's overhead."""
    transformers = _require_transformers()
    from loaders.integrations.huggingface import register_attention

    name = register_attention()
    lengths = corpus.lengths
    cfg = transformers.LlamaConfig(
        vocab_size=corpus.vocab_size,
        hidden_size=args.d_model,
        intermediate_size=4 * args.d_model,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=int(lengths.max()) + 8,
    )
    torch.manual_seed(args.seed)
    base = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    backend = getattr(args, "backend", None) or DEFAULT_BACKEND
    modes = ["eager"] if args.no_compile else ["eager", "compiled"]
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(
        torch._dynamo.config.accumulated_recompile_limit, 1024
    )
    ids = draw_samples(corpus.lengths, args.steps * args.batch_tokens, args.seed)
    subset = subset_corpus(corpus, ids)
    batch_size = group_size(subset.lengths, args.batch_tokens)
    steps = {}
    for method in methods:
        batches, dynamic, _ = epoch_batches(method, subset, plan, args, batch_size)
        real = sum(int((b["segment_ids"] != 0).sum()) for b in batches)
        if real != int(subset.lengths.sum()):  # the table compares like work only
            raise RuntimeError(
                f"{_LABELS[method]} covers {real} real tokens of the {int(subset.lengths.sum())} "
                f"of its samples: a sample lost or repeated"
            )
        steps[method] = (batches, dynamic)
    runs = []
    for mode in modes:
        for method in methods:
            batches, dynamic = steps[method]
            model = copy.deepcopy(base)
            if _ROUTES[method] == "varlen":
                model.set_attn_implementation(name)
            step = _CausalLMStep(model, _ROUTES[method]).train()
            fn = step if mode == "eager" else torch.compile(step, backend=backend, dynamic=dynamic)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            runs.append(dict(method=method, mode=mode, fn=fn, opt=opt, batches=batches))
            runs[-1].update(steps=0, real=0, slots=0, seconds=0.0, graphs=0, loss_sum=0.0, loss_tokens=0)
    stats = torch._dynamo.utils.counters["stats"]
    for r in runs:
        _warm_up(r, stats)
    for i in range(max(len(b) for b, _ in steps.values())):  # interleaved: one step of each run in turn
        for r in runs:
            if i >= len(r["batches"]):
                continue
            batch = r["batches"][i]
            graphs = stats["unique_graphs"]
            t0 = time.perf_counter()
            loss = _train_step(r, batch, step=True)
            r["seconds"] += time.perf_counter() - t0
            r["graphs"] += stats["unique_graphs"] - graphs
            r["steps"] += 1
            r["real"] += int((batch["segment_ids"] != 0).sum())
            r["slots"] += batch["input_ids"].numel()
            # the model's loss is a mean over the batch's loss tokens; weighted back by their count,
            # the epoch's mean weighs each loss token once, whatever the batch it fell in
            n = _loss_tokens(batch["segment_ids"])
            r["loss_sum"] += float(loss) * n
            r["loss_tokens"] += n
    _print_table(runs, out)
    ratio = attention_overhead(lengths, args, name)
    print(
        f"\nregistered attention (dyntile_varlen through transformers' AttentionInterface) over "
        f"dyntile.varlen_attention called directly on the same tensors, forward + backward: "
        f"{ratio:.3f}x",
        file=out,
    )
    compiled = "" if args.no_compile else f"; compiled with torch.compile(backend={backend!r})"
    print(
        f"model: LlamaForCausalLM, hidden {args.d_model}, {args.layers} layers, {args.heads} heads; "
        f"{args.batch_tokens} tokens a batch ({batch_size} samples a batch for group_by_length and "
        f"flattening){compiled}; {torch.get_num_threads()} threads",
        file=out,
    )
    print(
        f"samples: {len(subset)} of the corpus's {len(corpus)} (a seeded draw of {int(subset.lengths.sum())} "
        f"real tokens, about --steps x --batch-tokens), the same for every method: each runs one epoch "
        f"of its sampler over them, every sample once.",
        file=out,
    )
    print(
        "steps, tokens, tok/s: every step of the method's epoch, the same batches eager and compiled, "
        "timed after a warm-up pass (one forward + backward per distinct batch shape; warm-up s: its "
        "time, the compile time under torch.compile); graphs: built in the warm-up + during the timed "
        "steps; tok/s counts real tokens only; loss: next-token loss over the epoch, each loss token "
        "weighted once.",
        file=out,
    )
    return 0


def _print_table(runs, out) -> None:
    base = {r["mode"]: _tokens_per_s(r) for r in runs if r["method"] == "group_by_length"}
    rows = []
    for r in runs:
        compiled = r["mode"] != "eager"
        rows.append(
            [
                _LABELS[r["method"]],
                "dyntile_varlen" if _ROUTES[r["method"]] == "varlen" else "sdpa",
                r["mode"],
                r["steps"],
                r["real"],
                r["shapes"],
                f"{r['warm_graphs']} + {r['graphs']}" if compiled else "-",
                f"{r['warm_s']:.1f}",
                f"{100 * (1 - r['real'] / r['slots']):.1f}" if r["slots"] else "-",
                f"{_tokens_per_s(r):.0f}",
                f"{_tokens_per_s(r) / base[r['mode']]:.2f}" if base.get(r["mode"]) else "-",
                f"{r['loss_sum'] / r['loss_tokens']:.3f}" if r["loss_tokens"] else "-",
            ]
        )
    headers = [
        "method",
        "attention",
        "mode",
        "steps",
        "tokens",
        "shapes",
        "graphs",
        "warm-up s",
        "padded %",
        "tok/s",
        "x gbl",
        "loss",
    ]
    print(format_table(headers, rows), file=out)


def _tokens_per_s(r) -> float:
    return r["real"] / r["seconds"] if r["seconds"] else 0.0


def attention_overhead(lengths, args, name: str, reps: int = 15) -> float:
    """Median time of the registered attention over the direct call (fwd + bwd), on a
    packed row of the corpus's first samples."""
    import types

    from dyntile import varlen_attention
    from loaders.integrations.hf_attention import dyntile_attention_forward

    T = args.batch_tokens
    take = np.cumsum(lengths) <= T
    segs = np.zeros(T, np.int32)
    ends = np.cumsum(lengths[take])
    starts = ends - lengths[take]
    for i, (s, e) in enumerate(zip(starts, ends)):
        segs[s:e] = i + 1
    segment_ids = torch.from_numpy(segs)[None]
    H, D = args.heads, args.d_model // args.heads
    g = torch.Generator().manual_seed(0)
    qt, kt, vt = (torch.randn(1, T, H, D, generator=g, requires_grad=True) for _ in range(3))
    module = types.SimpleNamespace(is_causal=True)
    # as Hugging Face's attention modules hand them over: proj(h).view(B, T, H, D).transpose(1, 2)
    q, k, v = (x.transpose(1, 2) for x in (qt, kt, vt))

    def registered():
        out, _ = dyntile_attention_forward(module, q, k, v, None, scaling=D**-0.5, segment_ids=segment_ids)
        out.sum().backward()

    def direct():
        varlen_attention(qt, kt, vt, segment_ids=segment_ids, causal=True, scale=D**-0.5).sum().backward()

    times = {registered: [], direct: []}
    for _ in range(reps):
        for fn in times:
            t0 = time.perf_counter()
            fn()
            times[fn].append(time.perf_counter() - t0)
    return float(np.median(times[registered]) / np.median(times[direct]))
