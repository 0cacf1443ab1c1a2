"""The rule of the tests that read ../shared/data: skip with the reason locally, fail in CI."""

import numpy as np
import pytest

import shared_data


@pytest.mark.parametrize(
    "ci, outcome, says",
    [
        ("", pytest.skip.Exception, "absent: the real data lives beside the repository"),
        ("0", pytest.skip.Exception, "set DYNTILE_SHARED_DATA to where it is"),
        ("false", pytest.skip.Exception, "absent"),
        ("true", pytest.fail.Exception, "CI must have it"),
        ("1", pytest.fail.Exception, "CI must have it"),
    ],
)
def test_absent_data_skips_with_its_reason_and_fails_in_ci(monkeypatch, tmp_path, ci, outcome, says):
    monkeypatch.setattr(shared_data, "SHARED_DATA", tmp_path / "nowhere")
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=says):
        shared_data.load_shared("lengths_cpython_docstrings.npy")
    with pytest.raises(outcome, match=says):
        shared_data.shared_data_path()


def test_present_data_is_read(monkeypatch, tmp_path):
    np.save(tmp_path / "x.npy", np.arange(5))
    monkeypatch.setattr(shared_data, "SHARED_DATA", tmp_path)
    monkeypatch.setenv("CI", "true")
    assert shared_data.load_shared("x.npy").tolist() == [0, 1, 2, 3, 4]
