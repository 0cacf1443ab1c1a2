"""``dyntile.varlen_attention`` as a Hugging Face attention implementation.

:func:`register_attention` adds ``"dyntile_varlen"`` to transformers'
``AttentionInterface`` (the attention call of every model written against it: Llama,
Qwen2, GPT-2, BERT, ...) and to its ``AttentionMaskInterface``, whose entry passes
the 2-D padding mask through as it is, so no dense ``[B, 1, T, T]`` mask is built.
The attention then reads where the samples of each row lie from what the batch
carries, in this order:

1. ``segment_ids`` ``[B, T]`` (:class:`~loaders.PackedCollate`'s; 0 = padding);
2. ``cu_seq_lens_q`` / ``cu_seq_lens_k`` over the flattened ``[B * T]`` stream
   (``PackedCollate(flash_attention_kwargs=True)``, Hugging Face's
   ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``);
3. ``position_ids`` ``[B, T]``: a new sample wherever the count does not go up by one
   (``DataCollatorWithFlattening``'s default output), with the 2-D padding mask,
   if any, marking padding; or the padding mask alone, or nothing (one sequence
   per row).

Each token attends only inside its sample (and, where the module is causal, to no
later token), at the cost of the samples (sum of L^2), not of the row. Grouped-query
attention reads each key/value head in place for its group of query heads (the kernels
index the group; no copy of K and V per query head).
"""

from __future__ import annotations

import torch

__all__ = ["register_attention", "dyntile_attention_forward", "dyntile_attention_mask", "ATTENTION_NAME"]

#: the name :func:`register_attention` registers by default
ATTENTION_NAME = "dyntile_varlen"


def register_attention(name: str = ATTENTION_NAME) -> str:
    """Register dyntile's varlen attention with transformers under ``name``; returns ``name``.

    Then ``AutoModelForCausalLM.from_config(cfg, attn_implementation=name)`` or
    ``model.set_attn_implementation(name)`` trains on packed batches (see the module
    docstring for what the batch carries). Registering twice is harmless.

    >>> from transformers import AttentionInterface
    >>> register_attention() in AttentionInterface()
    True
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if not isinstance(name, str) or not name:
        raise TypeError(f"name should be a non-empty string, but got {name!r}")
    AttentionInterface.register(name, dyntile_attention_forward)
    AttentionMaskInterface.register(name, dyntile_attention_mask)
    return name


def dyntile_attention_mask(
    batch_size: int, q_length: int, kv_length: int, *args, attention_mask=None, **kwargs
) -> torch.Tensor | None:
    """The mask-interface entry: the 2-D ``[B, kv_length]`` padding mask as it came
    (``None`` without one); the attention builds segments from it, never a dense mask.

    >>> dyntile_attention_mask(1, 3, 3, attention_mask=torch.tensor([[True, True, False]])).tolist()
    [[True, True, False]]
    """
    if attention_mask is not None and attention_mask.dim() == 2:
        return attention_mask[:, -kv_length:]
    return attention_mask


def dyntile_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """A Hugging Face attention function: ``query`` ``[B, H, T, D]``, ``key``/``value``
    ``[B, Hkv, T, D]`` (``H`` a multiple of ``Hkv``) -> ``([B, T, H, D], None)``.

    >>> import types
    >>> m = types.SimpleNamespace(is_causal=True, training=False)
    >>> q = torch.randn(1, 2, 5, 4)
    >>> seg = torch.tensor([[1, 1, 1, 2, 2]])
    >>> out, _ = dyntile_attention_forward(m, q, q, q, None, segment_ids=seg)
    >>> out.shape, torch.allclose(out[0, 3], q[0, :, 3])   # a segment's first token sees itself
    (torch.Size([1, 5, 2, 4]), True)
    """
    from dyntile import varlen_attention

    _refuse_unsupported(module, dropout, sliding_window, softcap, kwargs)
    B, H, T, D = query.shape
    if key.shape[2] != T:
        raise ValueError(
            f"dyntile_varlen attends inside one batch of queries and keys of one length, but got "
            f"{T} queries and {key.shape[2]} keys (a KV cache past the prompt): generate with "
            f"attn_implementation='sdpa', or call the model with use_cache=False"
        )
    is_causal = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # [B, T, heads, D]
    cu = _cu_seqlens(kwargs)
    if cu is not None and kwargs.get("segment_ids") is None:
        q, k, v = (x.reshape(B * T, x.shape[2], D) for x in (q, k, v))
        out = varlen_attention(q, k, v, cu_seqlens=cu, causal=causal, scale=scaling)
        return out.view(B, T, H, D), None
    segments = _segment_ids(
        kwargs.get("segment_ids"), kwargs.get("position_ids"), attention_mask, (B, T), query.device
    )
    return varlen_attention(q, k, v, segment_ids=segments, causal=causal, scale=scaling), None


def _refuse_unsupported(module, dropout, sliding_window, softcap, kwargs) -> None:
    """A clear error for what the kernel does not compute, naming the model's option."""
    if kwargs.get("output_attentions"):
        raise ValueError(
            "dyntile_varlen computes no attention weights: call the model with output_attentions=False, "
            "or set attn_implementation='eager' to get them"
        )
    if dropout:
        raise ValueError(
            f"dyntile_varlen has no attention dropout, but {type(module).__name__} asks for p={dropout} "
            f"in training: set the config's attention dropout to 0 (attention_dropout, "
            f"attention_probs_dropout_prob or attn_pdrop, by model) or train with attn_implementation='sdpa'"
        )
    if sliding_window is not None:
        raise ValueError(
            f"dyntile_varlen attends over whole samples, but the model asks for sliding_window="
            f"{sliding_window}: set the config's use_sliding_window=False (or sliding_window=None), "
            f"or use attn_implementation='sdpa'"
        )
    if softcap is not None:
        raise ValueError(
            f"dyntile_varlen has no logit softcapping, but the model asks for softcap={softcap}: set the "
            f"config's attn_logit_softcapping=None, or use attn_implementation='eager'"
        )
    if kwargs.get("s_aux") is not None:
        raise ValueError("dyntile_varlen has no attention sinks (s_aux): use attn_implementation='eager'")


def _cu_seqlens(kwargs) -> torch.Tensor | None:
    """``cu_seq_lens_q``, checked against ``cu_seq_lens_k`` (one set of segments for both)."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None and cu_k is None:
        return None
    if cu_q is None or cu_k is None:
        raise ValueError("dyntile_varlen needs both cu_seq_lens_q and cu_seq_lens_k, or neither")
    if cu_k is not cu_q and not torch.compiler.is_compiling():
        if cu_q.shape != cu_k.shape or not torch.equal(cu_q, cu_k):
            raise ValueError(
                "dyntile_varlen attends inside each sample, so cu_seq_lens_q and cu_seq_lens_k should be "
                f"equal, but got {cu_q.tolist()} and {cu_k.tolist()}"
            )
    return cu_q


def _segment_ids(segment_ids, position_ids, attention_mask, shape: tuple, device) -> torch.Tensor:
    """``[B, T]`` segment ids (0 = padding) from what the batch carries (module docstring)."""
    if segment_ids is not None:
        if tuple(segment_ids.shape) != shape:
            raise ValueError(
                f"segment_ids should have shape [B, T] = {shape} (the batch's), but got "
                f"{tuple(segment_ids.shape)}"
            )
        return segment_ids
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            f"dyntile_varlen takes a 2-D padding mask, but got a {attention_mask.dim()}-D attention_mask "
            f"of shape {tuple(attention_mask.shape)}: leave the packed mask out (PackedCollate's default, "
            f"attention_mask=None) and pass segment_ids or position_ids"
        )
    if position_ids is not None:
        pos = position_ids.reshape(-1, position_ids.shape[-1]).expand(shape[0], -1)
        starts = torch.ones_like(pos, dtype=torch.bool)
        starts[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
        segments = starts.cumsum(-1, dtype=torch.int32)
    else:
        segments = torch.ones(shape, dtype=torch.int32, device=device)
    if attention_mask is not None:
        segments = segments * attention_mask.to(torch.bool)
    return segments
