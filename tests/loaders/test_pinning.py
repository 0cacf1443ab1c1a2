"""pin_memory=True without CUDA: one warning per process, whichever collate asks, and
batches in ordinary memory. Each case runs in a fresh process: the warning's
once-per-process state is the behaviour under test, so no test resets it."""

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose loaders runs
SCRIPT = """
import warnings
from loaders import DynTileCollate, PackedCollate

with warnings.catch_warnings(record=True) as first:
    warnings.simplefilter("always")
    dyn = DynTileCollate(pin_memory=True)
with warnings.catch_warnings(record=True) as later:
    warnings.simplefilter("always")
    DynTileCollate(pin_memory=True)
    packed = PackedCollate([(2, 8)], pin_memory=True)
out = dyn([{"ids": [1, 2]}, {"ids": [3]}])
print(len(first), "pinned memory needs CUDA" in str(first[0].message), first[0].category.__name__)
print(len(later))
print(out["ids"].tolist(), out["ids"].is_pinned())
print(packed([[1, 2]])["input_ids"].is_pinned())
"""


def test_without_cuda_one_warning_per_process_and_ordinary_memory():
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "1 True RuntimeWarning",
        "0",
        "[[1, 2, 0, 0, 0, 0, 0, 0], [3, 0, 0, 0, 0, 0, 0, 0]] False",
        "False",
    ]
