"""Varlen attention benchmarks: dyntile.varlen_attention, forward + backward, on packed
2048-token rows of real lengths (``real_data.docstring_lengths``), against torch's SDPA
with the dense block-diagonal mask (what a model without a varlen kernel runs) and a
per-segment SDPA loop. fp32, H = 4; torch's and dyntile's threads as the process has.

Useful flops of one pass (forward + backward), the formula the GFLOP/s figures use:
``12 * D * H * sum(L * (L + 1) / 2)`` over the segments: the causal query-key pairs,
times 2 flops for each of the 2 forward and 4 backward products (QK^T, PV; dV, dP,
dQ, dK), each with D terms.
"""

from __future__ import annotations

import numpy as np

from .real_data import docstring_lengths

T, HEADS, ROWS = 2048, 4, 2


def packed_rows(n_rows: int = ROWS, T: int = T, seed: int = 0) -> list[list[int]]:
    """``n_rows`` rows of sample lengths drawn at random from the corpus, packed whole
    (a sample longer than T is cut to T) until the next one does not fit."""
    L = docstring_lengths()
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n_rows):
        row, used = [], 0
        for n in rng.choice(L, 4 * T):
            n = int(min(n, T))
            if used + n > T:
                break
            row.append(n)
            used += n
        rows.append(row)
    return rows


def useful_flops(rows, dim: int, heads: int = HEADS) -> float:
    pairs = sum(n * (n + 1) // 2 for row in rows for n in row)
    return 12.0 * dim * heads * pairs


class Case:
    """One batch of packed rows and the three ways to run its attention."""

    def __init__(self, dim: int, rows=None):
        import torch

        self.torch = torch
        self.rows = packed_rows() if rows is None else rows
        B = len(self.rows)
        seg = torch.zeros(B, T, dtype=torch.int64)
        for b, row in enumerate(self.rows):
            pos = 0
            for i, n in enumerate(row):
                seg[b, pos : pos + n] = i + 1
                pos += n
        self.seg = seg
        self.q, self.k, self.v = (torch.randn(B, T, HEADS, dim, requires_grad=True) for _ in range(3))
        same = (seg[:, :, None] == seg[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
        self.mask = same[:, None]
        self.flops = useful_flops(self.rows, dim)

    def dyntile(self):
        import dyntile

        out = dyntile.varlen_attention(self.q, self.k, self.v, segment_ids=self.seg)
        out.sum().backward()

    def sdpa_dense(self):
        F = self.torch.nn.functional
        q, k, v = (x.transpose(1, 2) for x in (self.q, self.k, self.v))
        F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask).sum().backward()

    def sdpa_loop(self):
        F = self.torch.nn.functional
        total = 0
        for b, row in enumerate(self.rows):
            pos = 0
            for n in row:
                q, k, v = (x[b : b + 1, pos : pos + n].transpose(1, 2) for x in (self.q, self.k, self.v))
                total = total + F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()
                pos += n
        total.backward()


class VarlenAttention:
    """Forward + backward of one batch of packed rows; ``track_*`` are speed-ups."""

    params = ([16, 32, 64],)
    param_names = ["head_dim"]
    timeout = 240

    def setup(self, dim):
        try:
            import torch  # noqa: F401
        except ImportError:
            raise NotImplementedError("torch is not installed") from None
        self.case = Case(dim)
        self.case.dyntile()

    def time_dyntile(self, dim):
        self.case.dyntile()

    def time_sdpa_dense_mask(self, dim):
        self.case.sdpa_dense()

    def time_sdpa_segment_loop(self, dim):
        self.case.sdpa_loop()

    def track_speedup_over_dense_mask(self, dim):
        return _ratio(self.case.sdpa_dense, self.case.dyntile)

    def track_speedup_over_segment_loop(self, dim):
        return _ratio(self.case.sdpa_loop, self.case.dyntile)

    def track_useful_gflops(self, dim):
        return self.case.flops / float(np.median([_seconds(self.case.dyntile) for _ in range(3)])) / 1e9

    track_speedup_over_dense_mask.unit = "x"
    track_speedup_over_segment_loop.unit = "x"
    track_useful_gflops.unit = "GFLOP/s"


def _seconds(fn) -> float:
    """Wall time of one call of ``fn``."""
    import time

    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _ratio(reference, ours, repeat: int = 3) -> float:
    """Median time of ``reference`` over ``ours``, the two interleaved in one process."""
    ref, mine = [], []
    for _ in range(repeat):
        ref.append(_seconds(reference))
        mine.append(_seconds(ours))
    return float(np.median(ref) / np.median(mine))
