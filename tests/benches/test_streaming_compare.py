"""The streaming side-by-side script runs end to end on a small corpus and prints its three
tables, so that a change to the streaming loaders that breaks it shows here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "asv_benches" / "streaming_compare.py"


def test_streaming_compare_prints_its_tables(capsys):
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("streaming_compare", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(
        ["--samples", "3000", "--buffer", "512", "--max-tokens", "4096", "--repeats", "2", "--cores", "0"]
    )
    out = capsys.readouterr().out
    assert "planning alone" in out and "padded fraction of the slots" in out
    ratios = re.findall(r"stream / map(?:, gc off)?: ([0-9.]+)x", out)
    assert len(ratios) == 2 and all(float(r) > 0 for r in ratios), out
    stream_pad = re.search(r"stream packer \(window 512\)\s+([0-9.]+) %", out)
    offline_pad = re.search(r"PackingBatchSampler pool_size=512\s+([0-9.]+) %", out)
    assert stream_pad and offline_pad, out
    # the bar on padding, which the script reports: within a point of the offline packer
    assert float(stream_pad.group(1)) <= float(offline_pad.group(1)) + 1.0
