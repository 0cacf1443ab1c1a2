"""The registered Hugging Face attention (``dyntile_varlen``) against calling
``dyntile.varlen_attention`` directly on the same tensors, forward + backward, on the
packed rows of ``bench_attention`` (fp32, H = 4). The registered function takes
Hugging Face's ``[B, H, T, D]`` views and ``segment_ids``; the bar is at most 5%
over the direct call (``track_overhead`` <= 1.05)."""

from __future__ import annotations

from .bench_attention import Case, _ratio


class RegisteredAttention:
    param_names = ["dim"]
    params = ([32, 64],)

    def setup(self, dim):
        import types

        self.case = Case(dim)
        self.module = types.SimpleNamespace(is_causal=True)
        # the same tensors as Hugging Face's attention modules hand them over:
        # proj(h).view(B, T, H, D).transpose(1, 2), a [B, H, T, D] view of [B, T, H, D]
        self.hq, self.hk, self.hv = (x.transpose(1, 2) for x in (self.case.q, self.case.k, self.case.v))

    def registered(self):
        from loaders.integrations.hf_attention import dyntile_attention_forward

        q, k, v, seg = self.hq, self.hk, self.hv, self.case.seg
        out, _ = dyntile_attention_forward(self.module, q, k, v, None, segment_ids=seg)
        out.sum().backward()

    def time_registered(self, dim):
        self.registered()

    def time_direct(self, dim):
        self.case.dyntile()

    def track_overhead(self, dim):
        return _ratio(self.registered, self.case.dyntile, repeat=5)
