"""The demo's model: masks and labels against loops, and packing == padding, token for token."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dyntile.cli.model import TinyTransformer, attention_mask, next_token_labels

segments = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=9), min_size=1, max_size=3).map(
    lambda rows: [r + [0] * (9 - len(r)) for r in rows]
)


@settings(max_examples=40, deadline=None)
@given(segments)
def test_mask_and_labels_against_loops(rows):
    seg = torch.tensor(rows)
    ids = torch.arange(seg.numel()).view_as(seg) + 10
    mask, labels = attention_mask(seg), next_token_labels(ids, seg)
    B, T = seg.shape
    assert mask.shape == (B, 1, T, T) and labels.shape == (B, T)
    for b in range(B):
        for q in range(T):
            for k in range(T):
                assert bool(mask[b, 0, q, k]) == (seg[b, q] == seg[b, k] and k <= q)
            nxt = q + 1 < T and seg[b, q + 1] == seg[b, q] and seg[b, q] != 0
            assert labels[b, q] == (ids[b, q + 1] if nxt else -100)


def test_packed_batch_gives_the_same_loss_as_the_padded_one():
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=40, max_positions=16, d_model=32, n_heads=4).eval()
    a, b = torch.randint(4, 40, (5,)), torch.randint(4, 40, (7,))
    padded_ids = torch.zeros(2, 8, dtype=torch.long)
    padded_ids[0, :5], padded_ids[1, :7] = a, b
    padded_seg = (torch.arange(8) < torch.tensor([[5], [7]])).long()
    padded_pos = torch.arange(8).expand(2, 8)
    packed_ids = torch.cat([a, b, torch.zeros(4, dtype=torch.long)])[None]
    packed_seg = torch.tensor([[1] * 5 + [2] * 7 + [0] * 4])
    packed_pos = torch.tensor([list(range(5)) + list(range(7)) + [0] * 4])
    with torch.no_grad():
        padded = model(padded_ids, padded_pos, padded_seg)
        packed = model(packed_ids, packed_pos, packed_seg)
        broken = model(packed_ids, torch.arange(16)[None], torch.ones(1, 16, dtype=torch.long))
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(broken, padded, rtol=1e-3)  # without the mask it would differ


def test_loss_is_finite_when_no_token_has_a_label():
    model = TinyTransformer(vocab_size=10, max_positions=4, d_model=8, n_heads=2)
    loss = model(torch.tensor([[5, 0]]), torch.tensor([[0, 0]]), torch.tensor([[1, 0]]))
    assert torch.isfinite(loss) and loss.item() == 0.0
    loss.backward()


def test_varlen_attention_gives_the_dense_model_loss_and_gradients():
    """The same weights under the two attentions: one loss, one gradient (padding included)."""
    torch.manual_seed(1)
    dense = TinyTransformer(
        vocab_size=40, max_positions=24, d_model=32, n_heads=4, attention="dense"
    ).double()
    varlen = TinyTransformer(
        vocab_size=40, max_positions=24, d_model=32, n_heads=4, attention="varlen"
    ).double()
    varlen.load_state_dict(dense.state_dict())
    ids = torch.randint(1, 40, (2, 24))
    seg = torch.tensor([[1] * 5 + [2] * 12 + [3] * 3 + [0] * 4, [1] * 24])
    pos = torch.cat([torch.arange(5), torch.arange(12), torch.arange(3), torch.zeros(4, dtype=torch.long)])
    pos = torch.stack([pos, torch.arange(24)])
    losses = [m(ids, pos, seg) for m in (dense, varlen)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-10, atol=1e-10)
    for loss in losses:
        loss.backward()
    for (name, a), b in zip(dense.named_parameters(), varlen.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-8, atol=1e-10, msg=name)
