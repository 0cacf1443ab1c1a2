"""``dyntile demo --model llama``: a tiny LlamaForCausalLM, four ways to batch, one table."""

import pytest

pytest.importorskip("transformers")

from dyntile.cli.main import main  # noqa: E402


def test_llama_demo_trains_every_method(capsys):
    small = ["--limit", "60", "--steps", "2", "--d-model", "16", "--layers", "1", "--batch-tokens", "512"]
    rc = main(["demo", "--model", "llama", *small, "--no-compile", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    labels = ("group_by_length + padding", "DataCollatorWithFlattening", "sorted pools", "dyntile packing")
    assert all(label in out for label in labels)
    assert "dyntile_varlen" in out and "registered attention" in out
    packing = next(line for line in out.splitlines() if line.startswith("dyntile packing"))
    loss = float(packing.split()[-1])
    assert 0 < loss < 20  # a finite next-token loss
