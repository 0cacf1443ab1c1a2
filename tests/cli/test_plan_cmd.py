"""``dyntile plan``'s packing table: the shapes choose_seq_len picks and the cost that picked them."""

import numpy as np

from dyntile.cli.main import main
from dyntile.planning import choose_seq_len


def packing_table(out: str) -> dict[str, list[str]]:
    lines = out[out.index("packing for") :].splitlines()[2:]
    rows = {}
    for line in lines:
        if not line.strip():
            break
        label, rest = line[:22].strip(), line[22:].split("  ")
        rows[label] = [c.strip() for c in rest if c.strip()]
    return rows


def test_plan_prints_the_packing_shapes_and_their_cost(capsys, tmp_path):
    lengths = np.random.default_rng(1).lognormal(3.5, 1.0, 3000).astype(np.int64) + 1
    src = tmp_path / "l.npy"
    np.save(src, lengths)
    assert main(["plan", str(src), "--batch-tokens", "4096", "--d-model", "128"]) == 0
    out = capsys.readouterr().out
    assert "cost = slots + attention scores / 768 (d_model 128) + 256 slots per step" in out
    rows = packing_table(out)
    assert list(rows) == [
        "varlen attention",
        "dense attention",
        "longest sample, varlen",
        "longest sample, dense",
    ]
    for attention in ("varlen", "dense"):
        c = choose_seq_len(lengths, max_tokens=4096, attention=attention, d_model=128)
        shapes = " + ".join(f"{b}x{t}" for b, t in c.shapes)
        assert rows[f"{attention} attention"][:3] == [
            shapes,
            str(c.chosen.batches),
            f"{100 * c.chosen.padded_fraction:.1f}",
        ]
        assert rows[f"{attention} attention"][3] == f"{round(c.cost):,}"
        assert rows[f"longest sample, {attention}"][3] == f"{round(c.longest.cost):,}"
        assert c.seq_len < lengths.max()


def test_plan_packing_errors(capsys, tmp_path):
    src = tmp_path / "l.npy"
    np.save(src, np.array([40, 50, 60]))
    assert main(["plan", str(src), "--d-model", "0"]) == 2
    assert "--d-model should be a positive integer, but got 0" in capsys.readouterr().err
