"""The real data of ``../shared/data`` (beside the repository, see its README.md).

The files are real, variable-size data that nobody on the project wrote; they are not
in the repository, so a checkout without the folder beside it (a fork, a git worktree,
an sdist) runs the synthetic tests only and skips these, saying what is absent and why.
CI has the folder: there (``CI`` set to anything but ``0``/``false``) a missing file
fails the test, so the real-data checks can never pass by being skipped.
``DYNTILE_SHARED_DATA`` points at the folder when it lives elsewhere.
"""

import os
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(
    os.environ.get("DYNTILE_SHARED_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
)


def in_ci() -> bool:
    """True where the CI runs (``CI=true``), which has the shared data."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def shared_data_path(name: str = "") -> Path:
    """The path of ``name`` in the shared data folder (the folder itself for ``""``); skips the
    test when it is absent, and fails it in CI."""
    path = SHARED_DATA / name if name else SHARED_DATA
    if not path.exists():
        reason = (
            f"{path} is absent: the real data lives beside the repository in ../shared/data, not in it "
            f"(set DYNTILE_SHARED_DATA to where it is)"
        )
        if in_ci():
            pytest.fail(f"{reason}; CI must have it (CI={os.environ.get('CI')!r})", pytrace=False)
        pytest.skip(reason)
    return path


def load_shared(name: str) -> np.ndarray:
    """``np.load`` of a ``.npy`` file of the shared data folder (see :func:`shared_data_path`)."""
    return np.load(shared_data_path(name))
