"""The training loop: token accounting and compile counting."""

import subprocess
import sys

import pytest
import torch

from dyntile.cli.model import TinyTransformer
from dyntile.cli.train import train


def _batch(B, T, real):
    seg = (torch.arange(T) < torch.tensor(real)[:, None]).long()
    return {
        "input_ids": torch.randint(4, 50, (B, T)),
        "position_ids": torch.arange(T).expand(B, T).contiguous(),
        "segment_ids": seg,
    }


def _model():
    torch.manual_seed(0)
    return TinyTransformer(vocab_size=50, max_positions=32, d_model=16, n_heads=2, n_layers=1)


def test_eager_run_counts_real_tokens_and_stops_at_steps():
    batches = [_batch(2, 8, [8, 3]), _batch(3, 16, [1, 16, 5]), _batch(1, 8, [8])]
    r = train(_model(), batches, steps=2, backend=None)
    assert r.steps == 2 and r.real_tokens == 11 + 22 and r.slots == 16 + 48
    assert r.graphs is None and r.compile_steps == 0 and r.steady_tokens == r.real_tokens
    assert r.tokens_per_s > 0 and r.last_loss == r.last_loss  # not NaN


@pytest.mark.parametrize("dynamic, expected", [(False, 2), (True, 1)])
def test_compiled_run_counts_graphs_per_distinct_shape(dynamic, expected):
    shapes = [(2, 8), (2, 8), (4, 16), (2, 8), (4, 16)]
    batches = [_batch(B, T, [T] * B) for B, T in shapes]
    r = train(_model(), batches, steps=5, backend="aot_eager", dynamic=dynamic)
    assert r.graphs == expected and r.compile_steps == expected
    assert r.steady_tokens == sum(B * T for B, T in shapes) - (16 + (64 if expected == 2 else 0))


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        train(_model(), [_batch(1, 8, [8])], steps=1, backend="tvm")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_freed_memory_stops_page_faults_on_large_blocks():
    """A 32 MiB block freed and allocated again reuses its pages once the heap keeps them
    (without it, each of the 10 fresh mmaps faults its pages in again: thousands here)."""
    code = (
        "import resource, numpy as np\n"
        "from dyntile.cli.allocator import keep_freed_memory\n"
        "assert keep_freed_memory()\n"
        "for _ in range(3): np.ones(8 << 20, np.float32)\n"
        "r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(10): np.ones(8 << 20, np.float32)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)"
    )
    faults = int(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    assert faults < 1000
