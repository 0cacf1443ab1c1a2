import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_data import shared_data_path  # noqa: E402

# CI runs the property tests on a fixed set of examples (HYPOTHESIS_PROFILE=ci in
# .ci/run): a landing never hangs on a draw no earlier run made; local runs keep
# drawing new examples, which is where a failing one should turn up.
settings.register_profile("ci", derandomize=True)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


@pytest.fixture
def docstring_tokens():
    """The 2000 real docstring token sequences of ``tokens_cpython_docstrings_sample.npz``
    (int32 arrays); skips when the file is absent, fails in CI."""
    z = np.load(shared_data_path("tokens_cpython_docstrings_sample.npz"))
    ids, offsets = z["ids"], z["offsets"]
    return [ids[offsets[j] : offsets[j + 1]] for j in range(len(offsets) - 1)]


@pytest.fixture
def scenario_ranks(tmp_path, monkeypatch):
    """``run(script, world)``: each rank's recorded events of a framework script's
    scenarios (``tests/framework_runs.py``), run in this process from ``tmp_path``
    (``world=1``) or over ``world`` ``torchrun`` processes, which must all exit 0."""
    from framework_runs import run_in_process, torchrun

    def run(script, world: int) -> list[list[dict]]:
        if world == 1:
            monkeypatch.chdir(tmp_path)
            return [run_in_process(script)]
        done, ranks = torchrun(script, tmp_path, nproc=world)
        assert done.returncode == 0, done.stdout[-6000:]
        return ranks

    return run
