"""The GPU check script runs end to end on the simulator (``--tiny``), and its torch
sections (which need a CUDA torch) run on CPU tensors with host stand-ins for the
kernels, so a slip in them shows here rather than on a lent GPU."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "asv_benches" / "gpu_check.py"


def test_gpu_check_tiny_on_the_simulator():
    pytest.importorskip("numba")
    if not SCRIPT.exists():
        pytest.skip(f"{SCRIPT} is not in this checkout")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny"], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAIL" not in r.stdout
    assert "all checks passed" in r.stdout
    for part in (
        "matmul float64",
        "pad device 2-D",
        "tile/untile",
        "GEMM float32",
        "device-to-device copy",
        "attention float32 D=16 causal",
        "attention float64 D=5 full",
        "dyntile CUDA kernels",
    ):
        assert part in r.stdout, part


def test_gpu_check_refuses_full_sizes_on_the_simulator():
    pytest.importorskip("numba")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "--tiny" in r.stdout


def _script():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cpu_stand_ins(monkeypatch, cuda_device):
    """gpu_check with its torch sections on CPU tensors: the attention kernels replaced by
    the script's own NumPy reference, ``dyntile.varlen_attention`` by a per-segment SDPA,
    CUDA-event timing by one call."""
    torch = pytest.importorskip("torch")
    import dyntile
    import dyntile.cuda.attention as attention

    gc = _script()

    def forward(q, k, v, starts, lengths, *, causal, scale, out=None, lse=None):
        ref = gc._attention_reference(
            q.numpy(), k.numpy(), v.numpy(), np.zeros(q.shape), starts, lengths, causal, scale
        )
        o, lse_ref = (torch.as_tensor(x, dtype=q.dtype) for x in ref[:2])
        return (o if out is None else out.copy_(o)), (lse_ref if lse is None else lse.copy_(lse_ref))

    def backward(dout, q, k, v, out, lse, starts, lengths, *, causal, scale, dq=None, dk=None, dv=None):
        ref = gc._attention_reference(
            q.numpy(), k.numpy(), v.numpy(), dout.numpy(), starts, lengths, causal, scale
        )
        grads = [torch.as_tensor(x, dtype=q.dtype) for x in ref[2:]]
        return tuple(g if given is None else given.copy_(g) for g, given in zip(grads, (dq, dk, dv)))

    def varlen_attention(q, k, v, *, segment_ids=None, cu_seqlens=None, causal=True, scale=None):
        assert segment_ids is None and q.dim() == 3
        cu = cu_seqlens.tolist()
        parts = [
            torch.nn.functional.scaled_dot_product_attention(
                *(x[a:b].transpose(0, 1)[None] for x in (q, k, v)), is_causal=causal, scale=scale
            )[0].transpose(0, 1)
            for a, b in zip(cu[:-1], cu[1:])
        ]
        return torch.cat(parts)

    monkeypatch.setattr(attention, "varlen_attention_forward", forward)
    monkeypatch.setattr(attention, "varlen_attention_backward", backward)
    monkeypatch.setattr(dyntile, "varlen_attention", varlen_attention, raising=False)
    monkeypatch.setattr(gc, "DEVICE", "cpu")
    monkeypatch.setattr(gc, "_torch_cuda", lambda: torch)
    monkeypatch.setattr(gc, "_torch_ms", lambda torch_, fn, repeats: (fn(), 1.0)[1])
    return gc, torch


def test_torch_attention_check_runs_on_cpu_stand_ins(cpu_stand_ins, capsys):
    gc, _ = cpu_stand_ins
    checks = gc.Checks(None, np.random.default_rng(5), tiny=False)
    checks.attention_torch()
    out = capsys.readouterr().out
    assert checks.failures == 0, out
    assert "PASS  attention kernels on CUDA torch tensors" in out
    assert "PASS  dyntile.varlen_attention CUDA float32 causal" in out


def test_torch_attention_timing_runs_on_cpu_stand_ins(cpu_stand_ins, cuda_device, capsys):
    gc, torch = cpu_stand_ins
    starts, lengths = gc._packed_rows(np.random.default_rng(1), 2, 48, 6)
    assert lengths.sum() == 96 and (np.diff(starts) == lengths[:-1]).all()
    results = gc._time_attention_torch(torch, starts, lengths, 2, 48, 2, 8, 0.35, 1)
    assert [name for name, *_ in results] == [
        "dyntile CUDA kernels",
        "dyntile.varlen_attention (autograd)",
        "torch SDPA, dense block-diagonal mask",
        "torch SDPA, per-segment loop",
    ]
    gc.time_attention(cuda_device, np.random.default_rng(2), tiny=True, repeats=1)
    table = capsys.readouterr().out
    assert "dyntile.varlen_attention (autograd)" in table
    assert "dyntile CUDA kernels   1.00x faster than torch SDPA, dense block-diagonal mask" in table
    assert "dyntile.varlen_attention (autograd)   1.00x faster than torch SDPA, per-segment loop" in table
