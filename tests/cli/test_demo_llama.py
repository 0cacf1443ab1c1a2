"""``dyntile demo --model llama``: a tiny LlamaForCausalLM, four ways to batch, one table."""

import pytest

pytest.importorskip("transformers")

from dyntile.cli.main import main  # noqa: E402

LABELS = (
    "group_by_length + padding",
    "DataCollatorWithFlattening",
    "sorted pools + padding",
    "dyntile packing",
)
SMALL = ["--limit", "60", "--d-model", "16", "--layers", "1", "--batch-tokens", "512", "--no-progress"]


def _rows(out: str) -> dict:
    """``{(method, mode): {column: cell}}`` of the table, cut at the columns of its rule line."""
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("-----"))
    spans, at = [], 0
    for dashes in lines[rule].split("  "):
        spans.append((at, at + len(dashes)))
        at += len(dashes) + 2
    columns = [lines[rule - 1][a:b].strip() for a, b in spans]
    rows = {}
    for line in lines[rule + 1 : rule + 9]:
        cells = dict(zip(columns, (line[a:b].strip() for a, b in spans)))
        if cells["method"] in LABELS:
            rows[cells["method"], cells["mode"]] = cells
    return rows


def test_llama_demo_trains_every_method(capsys):
    rc = main(["demo", "--model", "llama", *SMALL, "--steps", "2", "--no-compile"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "dyntile_varlen" in out and "registered attention" in out
    rows = _rows(out)
    assert sorted(label for label, _ in rows) == sorted(LABELS)
    loss = float(rows["dyntile packing", "eager"]["loss"])
    assert 0 < loss < 20  # a finite next-token loss


def test_llama_demo_times_the_same_steps_eager_and_compiled(capsys):
    """Eager and compiled count the same steps and real tokens for every method (no step
    left out for having compiled), and every graph is built in the warm-up."""
    rc = main(["demo", "--model", "llama", *SMALL, "--steps", "4", "--backend", "aot_eager"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = _rows(out)
    assert len(rows) == 8, out
    for label in LABELS:
        eager, compiled = rows[label, "eager"], rows[label, "compiled"]
        assert (eager["steps"], eager["tokens"]) == (compiled["steps"], compiled["tokens"]), label
        assert eager["steps"] == "4"
        warm, timed = compiled["graphs"].split(" + ")
        assert int(warm) >= 1 and timed == "0", (label, compiled["graphs"])
    # dyntile compiles one static graph a packed shape, whatever the segments inside
    packing = rows["dyntile packing", "compiled"]
    assert packing["graphs"] == f"{packing['shapes']} + 0" and int(packing["shapes"]) <= 2
    assert "backend='aot_eager'" in out
