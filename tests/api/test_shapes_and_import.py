"""Shape math and the import contract (no torch, no numba on `import dyntile`)."""

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dyntile as dt
from dyntile import shapes


@given(n=st.integers(0, 10**6), m=st.integers(1, 512))
def test_round_up_is_smallest_multiple(n, m):
    r = dt.round_up(n, m)
    assert r % m == 0 and r >= n and r - n < m


def test_shape_helpers():
    assert dt.padded_shape([(3, 5), (7, 2)], multiple=4) == (8, 8)
    assert dt.padded_shape([(3, 80), (7, 80)], multiple=8, axes=[0]) == (8, 80)
    assert dt.tile_grid((5, 33, 130), (8, 128)) == (5, 2)
    assert dt.tiled_shape((5, 33, 130), (8, 128)) == (5, 5, 2, 8, 128)
    with pytest.raises(ValueError, match="sample 1 has shape"):
        dt.padded_shape([(3, 80), (7, 81)], axes=[0])
    with pytest.raises(ValueError, match="n should be non-negative"):
        dt.round_up(-1, 8)
    with pytest.raises(TypeError, match="should be an integer"):
        dt.round_up(1.5, 8)
    with pytest.raises(ValueError, match="empty list"):
        shapes.padded_shape([])


def test_import_loads_neither_torch_nor_numba():
    code = (
        "import sys, dyntile, numpy as np; dyntile.pad_batch([np.ones(3)]);"
        " dyntile.tile(np.ones((2, 2)), (2, 2));"
        "print(sorted(m for m in ('torch', 'numba') if m in sys.modules))"
    )
    assert _printed(code) == "[]"


def _printed(code: str) -> str:
    """What ``code`` prints, run in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = dt.nope


def test_exports_stay_functions_after_every_submodule_is_imported():
    """A public name must not share its name with a submodule: importing the
    submodule would replace the function on the package (dyntile.matmul once did).
    The native tensor reader is skipped: a torch extension, it loads after torch only."""
    code = (
        "import importlib, pkgutil, dyntile, dyntile.cuda, dyntile.planning\n"
        "for m in pkgutil.walk_packages(dyntile.__path__, 'dyntile.'):\n"
        "    if not m.name.startswith(('dyntile.cli', 'dyntile.__main__', 'dyntile.cpu._torch_tensors')):\n"
        "        importlib.import_module(m.name)\n"
        "import types\n"
        "bad = [f'{p.__name__}.{n}' for p in (dyntile, dyntile.cuda, dyntile.planning)\n"
        "       for n in p.__all__ if isinstance(getattr(p, n), types.ModuleType)]\n"
        "print(bad)"
    )
    assert _printed(code) == "[]"


def test_shape_helpers_validate_their_shapes():
    """They passed negative and fractional sizes through ((2, -1, 2, 2, 4), (2.0, 3))."""
    with pytest.raises(ValueError, match="sizes >= 0"):
        dt.tiled_shape((2, -3, 5), (2, 4))
    with pytest.raises(TypeError, match=r"shape\[0\] should be an integer, but got 2.5"):
        dt.tile_grid((2.5, 5), (2, 2))
    with pytest.raises(TypeError, match=r"shapes\[0\]\[1\] should be an integer"):
        dt.padded_shape([(3, 2.5), (4, 2.5)], 4, axes=[0])
    with pytest.raises(ValueError, match="sizes >= 0"):
        dt.padded_shape([(3, -2), (4, -2)], 4, axes=[0])
    assert dt.padded_shape([(3, 2), (4, 2)], 4, axes=0) == (4, 2)
