import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


@pytest.fixture
def shared_data():
    """Path to ../shared/data; skips the test when the folder is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture
def docstring_tokens(shared_data):
    """The 2000 real docstring token sequences of ``tokens_cpython_docstrings_sample.npz``
    (int32 arrays); skips when the file is absent."""
    path = shared_data / "tokens_cpython_docstrings_sample.npz"
    if not path.exists():
        pytest.skip(f"real data not found at {path}")
    z = np.load(path)
    ids, offsets = z["ids"], z["offsets"]
    return [ids[offsets[j]:offsets[j + 1]] for j in range(len(offsets) - 1)]
