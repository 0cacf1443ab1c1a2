import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

# CI runs the property tests on a fixed set of examples (HYPOTHESIS_PROFILE=ci in
# .ci/run): a landing never hangs on a draw no earlier run made; local runs keep
# drawing new examples, which is where a failing one should turn up.
settings.register_profile("ci", derandomize=True)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])

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
    return [ids[offsets[j] : offsets[j + 1]] for j in range(len(offsets) - 1)]
