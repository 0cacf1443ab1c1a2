"""The rule of the tests that read ../shared/data: skip with the reason locally, fail in CI."""

import pytest

import shared_data


@pytest.mark.parametrize("ci", ["", "0", "false"])
def test_absent_data_skips_and_says_why(monkeypatch, tmp_path, ci):
    monkeypatch.setattr(shared_data, "SHARED_DATA", tmp_path / "nowhere")
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="absent: the real data lives beside the repository"):
        shared_data.shared_data_path("lengths_cpython_docstrings.npy")


@pytest.mark.parametrize("ci", ["true", "1", "True"])
def test_absent_data_fails_in_ci(monkeypatch, tmp_path, ci):
    monkeypatch.setattr(shared_data, "SHARED_DATA", tmp_path / "nowhere")
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="CI must have it"):
        shared_data.load_shared("lengths_cpython_docstrings.npy")


def test_present_data_is_read(monkeypatch, tmp_path):
    import numpy as np

    np.save(tmp_path / "x.npy", np.arange(5))
    monkeypatch.setattr(shared_data, "SHARED_DATA", tmp_path)
    monkeypatch.setenv("CI", "true")
    assert shared_data.load_shared("x.npy").tolist() == [0, 1, 2, 3, 4]
