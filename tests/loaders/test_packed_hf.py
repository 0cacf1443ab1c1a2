"""PackedCollate's outputs for Hugging Face models: masks and flash-attention keywords
that keep packed samples apart, checked on tiny models built from configs (no download)."""

import inspect

import numpy as np
import pytest
import torch

from loaders import PackedCollate

transformers = pytest.importorskip("transformers")

LENGTHS = [5, 11, 3, 1, 7, 9, 2, 6]
READS_PACKED_POSITIONS = (
    "position_ids" in inspect.signature(transformers.masking_utils.create_bidirectional_mask).parameters
)


def token_rows(seed=0, vocab=64):
    rng = np.random.default_rng(seed)
    return [torch.as_tensor(rng.integers(5, vocab, n)) for n in LENGTHS]


def tiny_model(kind, impl):
    """A 2-layer model of ``kind`` ("Bert" or "Llama") with random weights, from a config."""
    shape = dict(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        attn_implementation=impl,
    )
    if kind == "Llama":
        shape["num_key_value_heads"] = 2
    cfg = getattr(transformers, f"{kind}Config")(**shape)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM if kind == "Bert" else transformers.LlamaForCausalLM
    return model(cfg).eval()


def worst_gap(model, seqs, out, **inputs):
    """Largest difference between each sample's logits in the packed batch and alone."""
    with torch.no_grad():
        packed = model(input_ids=out["input_ids"], **inputs).logits
        p = out["packing"]
        return max(
            float((packed[r, o : o + n] - model(input_ids=seqs[i][None]).logits[0]).abs().max())
            for i, r, o, n in zip(p.indices, p.rows, p.offsets, p.sizes)
        )


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_bert_gives_each_packed_sample_its_logits_alone(impl):
    model, seqs = tiny_model("Bert", impl), token_rows()
    out = PackedCollate([(4, 16)], attention_mask="additive")([{"input_ids": s} for s in seqs])
    assert out["attention_mask"].shape == (4, 1, 16, 16) and out["attention_mask"].dtype == torch.float32
    inputs = dict(position_ids=out["position_ids"], token_type_ids=torch.zeros_like(out["input_ids"]))
    assert worst_gap(model, seqs, out, attention_mask=out["attention_mask"], **inputs) < 1e-5
    # position ids alone keep BERT's packed samples apart from transformers 5.25 on (its
    # bidirectional mask builder reads restarting positions), not before
    alone = worst_gap(model, seqs, out, **inputs)
    assert alone < 1e-5 if READS_PACKED_POSITIONS else alone > 1e-3


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_a_decoder_isolates_packed_samples_by_mask_or_by_restarting_positions(impl):
    model, seqs = tiny_model("Llama", impl), token_rows(1)
    samples = [{"input_ids": s} for s in seqs]
    out = PackedCollate([(4, 16)], attention_mask="additive", causal=True)(samples)
    assert (
        worst_gap(
            model,
            seqs,
            out,
            attention_mask=out["attention_mask"],
            position_ids=out["position_ids"],
            use_cache=False,
        )
        < 1e-5
    )
    out = PackedCollate([(4, 16)])(samples)
    assert worst_gap(model, seqs, out, position_ids=out["position_ids"], use_cache=False) < 1e-5
    # the causal flag matters: a bidirectional block mask lets a decoder see later tokens
    out = PackedCollate([(4, 16)], attention_mask="additive")(samples)
    assert (
        worst_gap(
            model,
            seqs,
            out,
            attention_mask=out["attention_mask"],
            position_ids=out["position_ids"],
            use_cache=False,
        )
        > 1e-3
    )


def test_flash_attention_keywords_follow_hugging_face_names():
    seqs = token_rows()
    hf_like = [{"input_ids": s, "attention_mask": torch.ones_like(s)} for s in seqs]
    out = PackedCollate([(4, 16)], flash_attention_kwargs=True)(hf_like)
    assert "attention_mask" not in out  # Hugging Face would unpad by it instead of the segments
    for q in ("cu_seq_lens_q", "cu_seq_lens_k"):
        assert out[q].dtype == torch.int32 and torch.equal(out[q], out["cu_seqlens"])
    assert out["max_length_q"] == out["max_length_k"] == out["max_seqlen"]
    assert out["cu_seq_lens_q"][-1] == out["input_ids"].numel()
    # a mask asked for alongside them is kept (the user chose it)
    both = PackedCollate([(4, 16)], flash_attention_kwargs=True, attention_mask="block")(hf_like)
    assert both["attention_mask"].shape == (4, 16, 16)


def test_additive_mask_takes_the_models_dtype():
    out = PackedCollate([(2, 8)], attention_mask="additive", mask_dtype=torch.bfloat16)([[1, 2, 3], [4, 5]])
    m = out["attention_mask"]
    assert m.dtype == torch.bfloat16 and m.shape == (2, 1, 8, 8)
    assert m[0, 0, 0, :3].tolist() == [0, 0, 0] and m[0, 0, 0, 3] == torch.finfo(torch.bfloat16).min
    with pytest.raises(TypeError, match="needs a floating mask_dtype"):
        PackedCollate([(2, 8)], attention_mask="additive", mask_dtype=torch.int64)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_a_decoder_with_its_defaults_keeps_packed_samples_apart(impl):
    """The model's own defaults (a KV cache, train mode), samples with a tokenizer's
    all-ones mask, the whole batch passed as keywords: no sample sees another."""
    model, seqs = tiny_model("Llama", impl), token_rows(2)
    assert model.config.use_cache  # the default under test: a cache makes HF ignore restarting positions
    model.train()
    samples = [{"input_ids": s, "attention_mask": torch.ones_like(s)} for s in seqs]
    out = PackedCollate([(4, 16)])(samples)
    assert "attention_mask" not in out and out["use_cache"] is False
    batch = {k: v for k, v in out.items() if k != "packing"}
    assert worst_gap(model, seqs, out, **{k: v for k, v in batch.items() if k != "input_ids"}) < 1e-5
    # the old default output (the samples' mask packed, the model's cache) joins the samples
    old = PackedCollate([(4, 16)], use_cache=None)(samples)
    assert "use_cache" not in old
    mask = torch.ones_like(old["input_ids"])
    assert worst_gap(model, seqs, old, attention_mask=mask, position_ids=old["position_ids"]) > 1e-3
