"""A small causal transformer that trains on padded and on packed batches alike.

Every batch is ``input_ids``, ``position_ids`` and ``segment_ids``, all int64
``[B, T]``; ``segment_ids`` is 0 on padding and ``k >= 1`` on the k-th sequence of a
row (a padded batch has one segment per row, a packed batch several). A token
attends to earlier tokens of its own segment only, and the next-token loss never
crosses a segment boundary, so packing is not cheating. Two attentions compute that:

* ``"dense"``: SDPA over the whole row with a ``[B, 1, T, T]`` block-diagonal causal
  mask (what a model without a varlen kernel does: every score of the row is computed,
  the masked ones too);
* ``"varlen"``: :func:`dyntile.varlen_attention` on the segments (only the scores
  inside segments are computed).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TinyTransformer", "attention_mask", "next_token_labels", "ATTENTIONS"]

ATTENTIONS = ("dense", "varlen")


def attention_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """Boolean ``[B, 1, T, T]``: query t sees key s iff same segment and ``s <= t``.

    Padding (segment 0) attends to padding only, which keeps every row non-empty.

    >>> attention_mask(torch.tensor([[1, 1, 2, 0]]))[0, 0].int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    """
    T = segment_ids.shape[-1]
    same = segment_ids[:, None, :, None] == segment_ids[:, None, None, :]
    causal = torch.ones(T, T, dtype=torch.bool, device=segment_ids.device).tril()
    return same & causal


def next_token_labels(
    input_ids: torch.Tensor, segment_ids: torch.Tensor, ignore_index: int = -100
) -> torch.Tensor:
    """``[B, T]`` targets: the next token of the same segment, else ``ignore_index``.

    >>> next_token_labels(torch.tensor([[5, 6, 7, 0]]), torch.tensor([[1, 1, 2, 0]])).tolist()
    [[6, -100, -100, -100]]
    """
    labels = torch.full_like(input_ids, ignore_index)
    same = (segment_ids[:, 1:] == segment_ids[:, :-1]) & (segment_ids[:, 1:] != 0)
    labels[:, :-1] = torch.where(same, input_ids[:, 1:], ignore_index)
    return labels


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, attention: str):
        super().__init__()
        self.n_heads, self.attention = n_heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, segment_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        B, T, D = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, T, 3, self.n_heads, D // self.n_heads)
        if self.attention == "varlen":
            import dyntile

            att = dyntile.varlen_attention(*qkv.unbind(2), segment_ids=segment_ids)  # [B, T, H, Dh]
        else:
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)
        x = x + self.proj(att.reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """Token + position embeddings, ``n_layers`` pre-LN blocks, tied LM head.

    ``attention``: ``"dense"`` or ``"varlen"`` (see the module docstring).
    ``forward(input_ids, position_ids, segment_ids)`` (int64 ``[B, T]`` each) returns
    the mean next-token cross-entropy over real tokens (a 0-d tensor).

    >>> m = TinyTransformer(vocab_size=50, max_positions=16, d_model=32, n_heads=2)
    >>> ids = torch.tensor([[2, 7, 9, 3], [2, 8, 3, 0]])
    >>> pos = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 0]])
    >>> seg = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    >>> m(ids, pos, seg).shape
    torch.Size([])
    """

    def __init__(
        self,
        vocab_size: int,
        max_positions: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        attention: str = "dense",
    ):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(
                f"d_model should be a multiple of n_heads, but got d_model={d_model}, n_heads={n_heads}"
            )
        if attention not in ATTENTIONS:
            raise ValueError(f"attention should be one of {ATTENTIONS}, but got {attention!r}")
        self.attention = attention
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, attention) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, segment_ids: torch.Tensor
    ) -> torch.Tensor:
        mask = attention_mask(segment_ids) if self.attention == "dense" else None
        x = self.tok(input_ids) + self.pos(position_ids)
        for block in self.blocks:
            x = block(x, segment_ids, mask)
        logits = self.ln(x) @ self.tok.weight.T
        labels = next_token_labels(input_ids, segment_ids)
        total = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        return total / (labels != -100).sum().clamp(min=1)
