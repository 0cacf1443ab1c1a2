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

Every method trains from the same initial weights with the same token budget and
steps; their steps are interleaved (one step of each in turn), so machine noise falls
on all alike. Tokens/s counts real tokens only, over the steps that compiled nothing.
The loss is each sample's next-token loss, averaged per batch. Last, the overhead of
the registered attention over calling :func:`dyntile.varlen_attention` directly on the
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

LLAMA_METHODS = ("group_by_length", "flattening", "sorted", "packing")
_LABELS = {
    "group_by_length": "group_by_length + padding",
    "flattening": "DataCollatorWithFlattening",
    "sorted": "sorted pools + padding",
    "packing": "dyntile packing",
}


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
        first = torch.ones_like(segment_ids, dtype=torch.bool)
        first[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
        labels = input_ids.masked_fill(first | (segment_ids == 0), -100)
        inputs = dict(input_ids=input_ids, position_ids=position_ids, labels=labels, use_cache=False)
        if self.route == "padded":
            inputs["attention_mask"] = segment_ids != 0
        elif self.route == "varlen":
            inputs["segment_ids"] = segment_ids
        return self.model(**inputs).loss


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


def _loaders(name, corpus, plan, dataset, args, batch_size):
    """``(loader, attention route)`` of one method."""
    from dyntile.cli.baselines import pad_sequence_collate
    from dyntile.cli.methods import build_batching

    DataLoader = torch.utils.data.DataLoader
    if name in ("group_by_length", "flattening"):
        grouped = name == "group_by_length"
        sampler = _GroupByLength(corpus.lengths, batch_size, args.seed, grouped)
        collate = pad_sequence_collate if grouped else _flattening_collate()
        loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
        return loader, "padded" if grouped else "packed"
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
    return batching.loader(dataset), "padded" if name == "sorted" else "varlen"


def run_llama_demo(args, corpus, plan, out) -> int:
    """Train every method of :data:`LLAMA_METHODS`, eager and compiled, interleaved;
    print the table and the registered attention's overhead."""
    transformers = _require_transformers()
    from dyntile.cli.methods import TokenDataset
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
    batch_size = max(1, round(args.batch_tokens / float(lengths.mean())))
    dataset = TokenDataset(corpus)
    modes = ["eager"] if args.no_compile else ["eager", "compiled"]
    torch._dynamo.reset()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(
        torch._dynamo.config.accumulated_recompile_limit, 1024
    )
    runs = []
    for mode in modes:
        for method in LLAMA_METHODS:
            loader, route = _loaders(method, corpus, plan, dataset, args, batch_size)
            model = copy.deepcopy(base)
            if route == "varlen":
                model.set_attn_implementation(name)
            step = _CausalLMStep(model, route).train()
            fn = step if mode == "eager" else torch.compile(step, backend=args.backend)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            runs.append(dict(method=method, mode=mode, route=route, fn=fn, opt=opt, batches=iter(loader)))
            runs[-1].update(steps=0, real=0, slots=0, seconds=0.0, steady_real=0, steady_s=0.0, graphs=0)
            runs[-1]["loss"] = []
    stats = torch._dynamo.utils.counters["stats"]
    for _ in range(args.steps):  # interleaved: one step of each run in turn
        for r in runs:
            batch = next(r["batches"], None)
            if batch is None:
                continue
            graphs, traced = stats["unique_graphs"], stats["calls_captured"]
            t0 = time.perf_counter()
            loss = r["fn"](batch["input_ids"], batch["position_ids"], batch["segment_ids"])
            loss.backward()
            r["opt"].step()
            r["opt"].zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            real = int((batch["segment_ids"] != 0).sum())
            r["steps"] += 1
            r["real"] += real
            r["slots"] += batch["input_ids"].numel()
            r["seconds"] += dt
            r["graphs"] += stats["unique_graphs"] - graphs
            r["loss"].append(float(loss.detach()))
            if stats["calls_captured"] == traced:
                r["steady_real"] += real
                r["steady_s"] += dt
    _print_table(runs, out)
    ratio = attention_overhead(lengths, args, name)
    print(
        f"\nregistered attention (dyntile_varlen through transformers' AttentionInterface) over "
        f"dyntile.varlen_attention called directly on the same tensors, forward + backward: "
        f"{ratio:.3f}x",
        file=out,
    )
    print(
        f"model: LlamaForCausalLM, hidden {args.d_model}, {args.layers} layers, {args.heads} heads; "
        f"{args.batch_tokens} tokens a batch ({batch_size} samples a batch for group_by_length and "
        f"flattening); compiled with backend {args.backend}; {torch.get_num_threads()} threads",
        file=out,
    )
    return 0


def _print_table(runs, out) -> None:
    base = {r["mode"]: _steady(r) for r in runs if r["method"] == "group_by_length"}
    rows = []
    for r in runs:
        tail = r["loss"][-5:]
        rows.append(
            [
                _LABELS[r["method"]],
                "dyntile_varlen" if r["route"] == "varlen" else "sdpa",
                r["mode"],
                r["steps"],
                "-" if r["mode"] == "eager" else r["graphs"],
                f"{100 * (1 - r['real'] / r['slots']):.1f}" if r["slots"] else "-",
                f"{_steady(r):.0f}",
                f"{_steady(r) / base[r['mode']]:.2f}" if base.get(r["mode"]) else "-",
                f"{np.mean(tail):.3f}" if tail else "-",
            ]
        )
    headers = ["method", "attention", "mode", "steps", "graphs", "padded %", "steady tok/s", "x gbl", "loss"]
    print(format_table(headers, rows), file=out)


def _steady(r) -> float:
    if r["steady_s"]:
        return r["steady_real"] / r["steady_s"]
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
