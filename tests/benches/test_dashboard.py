"""The asv dashboard, published from the recorded history, renders in headless Chromium.

Needs ``chromium`` (Debian's package); the pages' jQuery, flot and Bootstrap are the
copies kept in ``asv_benches/dashboard_assets`` instead of their CDNs. Without chromium
the browser tests skip, except in CI (``CI`` set, see ``shared_data.in_ci``), where they
fail: ``.ci/run`` installs it.
``DYNTILE_DASHBOARD_SCREENSHOT`` names where the screenshot of the checked graph goes
(CI keeps it as an artefact).
"""

from __future__ import annotations

import argparse
import doctest
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from shared_data import in_ci

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "asv_benches" / "results"


def load_dashboard():
    spec = importlib.util.spec_from_file_location("dashboard", ROOT / "asv_benches" / "dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dashboard = load_dashboard()


def require_browser() -> str:
    """Chromium's path; skips without it, fails in CI."""
    chromium = dashboard.find_chromium()
    if not chromium:
        message = "the dashboard check needs chromium (apt-get install chromium)"
        if in_ci():
            pytest.fail(f"{message}; CI must have them", pytrace=False)
        pytest.skip(message)
    return chromium


def check_args(tmp_path: Path, results_dir: Path | None = None, screenshot: Path | None = None):
    return argparse.Namespace(
        chromium=None,
        benchmark=None,
        screenshot=str(screenshot or tmp_path / "dashboard.png"),
        results_dir=str(results_dir) if results_dir else None,
        work_dir=str(dashboard.DEFAULT_WORK_DIR),
    )


def recorded_commits() -> set[str]:
    return {p.name.split("-", 1)[0] for p in RESULTS.glob("*/*.json") if p.name != "machine.json"}


def test_doctests():
    assert doctest.testmod(dashboard).failed == 0


def test_history_is_recorded():
    """The committed results cover 20 commits, with a machine description."""
    assert len(recorded_commits()) >= 20
    assert (RESULTS / "benchmarks.json").exists()
    machines = [p.parent for p in RESULTS.glob("*/machine.json")]
    assert machines and all(json.loads((m / "machine.json").read_text())["num_cpu"] for m in machines)


def test_local_assets_replace_every_cdn_url(tmp_path):
    """Every script and style asv's pages load from a CDN has a local copy."""
    import asv

    require_browser()
    www = Path(asv.__file__).parent / "www"
    shutil.copyfile(www / "index.html", tmp_path / "index.html")
    dashboard.localize_assets(tmp_path)
    text = (tmp_path / "index.html").read_text()
    assert "https://cdn" not in text and "code.jquery.com" not in text
    assert sorted(p.name for p in (tmp_path / dashboard.ASSET_DIR).iterdir()) == sorted(dashboard.ASSETS)


def test_dashboard_renders_history(tmp_path):
    """The benchmark list and a graph with points at several commits render."""
    require_browser()
    screenshot = os.environ.get("DYNTILE_DASHBOARD_SCREENSHOT")
    summary = dashboard.check(check_args(tmp_path, screenshot=Path(screenshot) if screenshot else None))
    assert summary["benchmarks_listed"] == summary["published"] > 0
    assert summary["commits"] >= 2 and summary["points"] >= summary["commits"]
    assert Path(summary["screenshot"]).stat().st_size > 10_000  # a drawn page, not a blank one


def test_dashboard_check_fails_without_history(tmp_path):
    """One recorded commit draws no history: the check says so."""
    require_browser()
    one = tmp_path / "results"
    shutil.copytree(RESULTS, one)
    for machine in one.iterdir():
        results = (
            sorted(p for p in machine.glob("*.json") if p.name != "machine.json") if machine.is_dir() else []
        )
        for extra in results[1:]:
            extra.unlink()
    with pytest.raises(AssertionError, match="no history"):
        dashboard.check(check_args(tmp_path, results_dir=one))
