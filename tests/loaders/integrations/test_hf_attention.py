"""``register_attention``: dyntile's varlen attention inside Hugging Face models, checked
against each sample run alone through the same weights with ``sdpa`` (logits and
gradients, fp32), on tiny models built from configs with the models' own defaults."""

import copy

import numpy as np
import pytest
import torch

from loaders import PackedCollate

transformers = pytest.importorskip("transformers")

from loaders.integrations.hf_attention import dyntile_attention_forward  # noqa: E402
from loaders.integrations.huggingface import register_attention  # noqa: E402

NAME = register_attention()
LENGTHS = [5, 11, 3, 1, 7, 9, 2, 6, 13]
VOCAB = 61


def tiny(kind: str, impl: str = NAME):
    """A 2-layer ``kind`` model with random weights and no dropout, from a config."""
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=24, n_layer=2, n_head=3, n_positions=64, bos_token_id=1, eos_token_id=2
        )
        cfg.attn_pdrop = cfg.resid_pdrop = cfg.embd_pdrop = 0.0
        return transformers.GPT2LMHeadModel._from_config(cfg, attn_implementation=impl)
    if kind == "bert":
        cfg = config(transformers.BertConfig, attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0)
        return transformers.BertForMaskedLM._from_config(cfg, attn_implementation=impl)
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}[kind]
    cfg = config(cls.config_class, num_key_value_heads=2 if kind == "qwen2" else 4)
    return cls._from_config(cfg, attn_implementation=impl)


def config(cls, **options):
    """A config of class ``cls``: the tiny shape of these tests, with ``options`` over it."""
    shape = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
    )
    return cls(**{**shape, **options})


def samples(seed=0, lengths=LENGTHS):
    rng = np.random.default_rng(seed)
    return [torch.as_tensor(rng.integers(5, VOCAB, n)) for n in lengths]


def loss_and_grads(model, logits_of, weights):
    """``sum(logits * weights)`` and its gradient for every parameter."""
    model.zero_grad(set_to_none=True)
    loss = (logits_of(model) * weights).sum()
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def check_against_each_sample_alone(model, seqs, batch, places, **inputs):
    """Packed logits and gradients of ``model`` equal to each sample alone through an sdpa copy."""
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("sdpa")
    gen = torch.Generator().manual_seed(1)
    w = [torch.randn(len(s), VOCAB, generator=gen) for s in seqs]
    packed_w = torch.zeros(*batch["input_ids"].shape, VOCAB)
    for wi, (r, o) in zip(w, places):
        packed_w[r, o : o + len(wi)] = wi
    logits = model(input_ids=batch["input_ids"], **inputs).logits
    for s, (r, o) in zip(seqs, places):
        alone = reference(input_ids=s[None]).logits[0]
        torch.testing.assert_close(logits[r, o : o + len(s)], alone, atol=1e-5, rtol=1e-5)
    _, got = loss_and_grads(model, lambda m: m(input_ids=batch["input_ids"], **inputs).logits, packed_w)
    grads = [
        loss_and_grads(reference, lambda m, s=s: m(input_ids=s[None]).logits[0], wi)[1]
        for s, wi in zip(seqs, w)
    ]
    for name, g in got.items():
        torch.testing.assert_close(g, sum(gr[name] for gr in grads), atol=1e-5, rtol=1e-5, msg=name)


def packed(seqs, shape=(3, 24), **options):
    out = PackedCollate([shape], **options)([{"input_ids": s} for s in seqs])
    p = out["packing"]
    order = np.argsort(p.indices)
    return out, [(int(p.rows[i]), int(p.offsets[i])) for i in order]


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2", "bert"])
@pytest.mark.parametrize("route", ["segment_ids", "position_ids", "cu_seq_lens"])
def test_packed_logits_and_gradients_equal_each_sample_alone(kind, route):
    model, seqs = tiny(kind).train(), samples(hash(kind) % 7)  # train(): the models' training defaults
    out, places = packed(seqs, flash_attention_kwargs=route == "cu_seq_lens")
    inputs = {"position_ids": out["position_ids"]}
    if route == "segment_ids":
        inputs["segment_ids"] = out["segment_ids"]
    if route == "cu_seq_lens":
        inputs.update({k: out[k] for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")})
    check_against_each_sample_alone(model, seqs, out, places, **inputs)


@pytest.mark.parametrize("flash_kwargs", [False, True])
def test_hugging_faces_own_flattening_collator(flash_kwargs):
    from transformers import DataCollatorWithFlattening

    model, seqs = tiny("qwen2").train(), samples(3)
    collate = DataCollatorWithFlattening(return_flash_attn_kwargs=flash_kwargs, return_tensors="pt")
    out = collate([{"input_ids": s.tolist()} for s in seqs])
    assert out["input_ids"].shape == (1, sum(LENGTHS))
    starts = np.cumsum([0] + LENGTHS[:-1])
    inputs = {k: v for k, v in out.items() if k not in ("input_ids", "labels")}
    check_against_each_sample_alone(model, seqs, out, [(0, int(o)) for o in starts], **inputs)


@pytest.mark.parametrize("kind", ["llama", "bert"])
def test_padded_batch_with_a_padding_mask(kind):
    model, seqs = tiny(kind).train(), samples(5, [7, 3, 12, 1])
    T = 12
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = s, 1
    places = [(i, 0) for i in range(len(seqs))]
    check_against_each_sample_alone(model, seqs, {"input_ids": ids}, places, attention_mask=mask)


def test_set_attn_implementation_switches_an_sdpa_model_to_varlen():
    model, seqs = tiny("llama", "sdpa").train(), samples(2)
    out, places = packed(seqs)
    # sdpa with the model's default cache does not read restarting positions: samples leak
    leaky = model(input_ids=out["input_ids"], position_ids=out["position_ids"]).logits
    model.set_attn_implementation(NAME)
    assert model.config._attn_implementation == NAME
    fixed = model(input_ids=out["input_ids"], position_ids=out["position_ids"]).logits
    assert (leaky - fixed).abs().max() > 1e-3
    check_against_each_sample_alone(model, seqs, out, places, position_ids=out["position_ids"])


def test_unsupported_options_are_refused_by_name():
    q = torch.randn(1, 2, 4, 8)
    module = torch.nn.Module()
    module.is_causal = True
    calls = {
        "attention dropout": dict(dropout=0.1),
        "sliding_window": dict(sliding_window=4),
        "softcap": dict(softcap=30.0),
        "output_attentions": dict(output_attentions=True),
        "s_aux": dict(s_aux=torch.zeros(2)),
    }
    for what, kwargs in calls.items():
        with pytest.raises(ValueError, match=what):
            dyntile_attention_forward(module, q, q, q, None, **kwargs)
    with pytest.raises(ValueError, match="2-D padding mask"):
        dyntile_attention_forward(module, q, q, q, torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="4 queries and 6 keys"):
        dyntile_attention_forward(module, q, torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), None)
    with pytest.raises(ValueError, match="cu_seq_lens_q and cu_seq_lens_k should be equal"):
        cu = torch.tensor([0, 2, 4], dtype=torch.int32)
        dyntile_attention_forward(module, q, q, q, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu.flip(0))


def test_a_model_in_training_with_attention_dropout_is_refused():
    cfg = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    model = transformers.BertForMaskedLM._from_config(cfg, attn_implementation=NAME).train()
    with pytest.raises(ValueError, match="attention_probs_dropout_prob"):
        model(input_ids=torch.tensor([[5, 6, 7]]))
    model.eval()(input_ids=torch.tensor([[5, 6, 7]]))  # no dropout in evaluation


def test_grouped_query_heads_reach_the_kernel_uncopied(monkeypatch):
    """Qwen2's 2 key/value heads go to varlen_attention as views of the model's key and
    value tensors (no copy per query head), and the output matches the repeated-heads call."""
    import dyntile

    seen = []
    real = dyntile.varlen_attention

    def spy(q, k, v, **kw):
        seen.append((q.shape[-2], k.shape[-2], v.shape[-2]))
        return real(q, k, v, **kw)

    monkeypatch.setattr(dyntile, "varlen_attention", spy)
    model = tiny("qwen2").eval()
    out, _ = packed(samples(4))
    with torch.no_grad():
        model(input_ids=out["input_ids"], segment_ids=out["segment_ids"], position_ids=out["position_ids"])
    assert seen and all(heads == (4, 2, 2) for heads in seen), seen
    module = type("M", (), {"is_causal": True, "training": False})()
    q, k, v = torch.randn(2, 4, 9, 3), torch.randn(2, 2, 9, 3), torch.randn(2, 2, 9, 3)
    seg = torch.tensor([[1] * 4 + [2] * 5, [1] * 9])
    got, _ = dyntile_attention_forward(module, q, k, v, None, segment_ids=seg)
    want, _ = dyntile_attention_forward(
        module, q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), None, segment_ids=seg
    )
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_sliding_window_model_is_refused():
    cfg = config(
        transformers.Qwen2Config,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=0,
    )
    model = transformers.Qwen2ForCausalLM._from_config(cfg, attn_implementation=NAME)
    with pytest.raises(ValueError, match="sliding_window=4"):
        model(input_ids=torch.tensor([[5, 6, 7, 8, 9, 10]]))


@pytest.mark.parametrize("route", ["segment_ids", "cu_seq_lens"])
def test_compiled_model_keeps_its_graphs_over_varying_segment_layouts(route):
    torch._dynamo.reset()
    model = tiny("qwen2").train()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="aot_eager")
    rng = np.random.default_rng(7)
    counts = torch._dynamo.utils.counters
    counts.clear()
    for step in range(20):
        lengths = rng.integers(1, 12, rng.integers(3, 8))
        lengths = lengths[np.cumsum(lengths) <= 36]  # fits in (3, 24) whatever the packer does
        seqs = samples(step, lengths.tolist())
        out, _ = packed(seqs, (3, 24), flash_attention_kwargs=True)
        inputs = dict(input_ids=out["input_ids"], position_ids=out["position_ids"])
        if route == "segment_ids":
            inputs["segment_ids"] = out["segment_ids"]
        else:  # a new number of segments each step: one more graph, with a dynamic length
            inputs.update(cu_seq_lens_q=out["cu_seq_lens_q"], cu_seq_lens_k=out["cu_seq_lens_k"])
        got = compiled(**inputs).logits
        want = eager(**inputs).logits
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        got.sum().backward()
        want.sum().backward()
    for (n, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-5, msg=n)
    assert counts["stats"]["unique_graphs"] <= 2, dict(counts["stats"])
    assert not counts["graph_break"], dict(counts["graph_break"])
