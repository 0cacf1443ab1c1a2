"""``dyntile demo --model llama``: a tiny LlamaForCausalLM, four ways to batch, one table."""

import argparse
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("transformers")

import dyntile  # noqa: E402
from dyntile.cli.corpus import Corpus  # noqa: E402
from dyntile.cli.demo_llama import (  # noqa: E402
    LLAMA_METHODS,
    draw_samples,
    epoch_batches,
    group_size,
    subset_corpus,
)
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


def test_llama_demo_runs_the_methods_asked_for(capsys):
    rc = main(
        ["demo", "--model", "llama", *SMALL, "--steps", "2", "--no-compile", "--methods", "packing,sorted"]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert sorted(label for label, _ in _rows(out)) == ["dyntile packing", "sorted pools + padding"]
    # without group_by_length in the run, there is no base for its ratio column
    assert {row["x gbl"] for row in _rows(out).values()} == {"-"}


@pytest.mark.parametrize("methods", ["buckets", "packing,packing", ""])
def test_llama_demo_refuses_methods_it_does_not_have(methods, capsys):
    rc = main(["demo", "--model", "llama", *SMALL, "--no-compile", "--methods", methods])
    err = capsys.readouterr().err
    assert rc != 0
    assert "group_by_length,flattening,sorted,packing (with --model llama)" in err, err


def test_llama_demo_times_the_same_steps_eager_and_compiled(capsys):
    """Eager and compiled count the same steps and real tokens for every method (no step
    left out for having compiled), and every graph is built in the warm-up."""
    rc = main(["demo", "--model", "llama", *SMALL, "--steps", "4", "--backend", "aot_eager"])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = _rows(out)
    assert len(rows) == 8, out
    # every method trains on the same samples: the same real tokens in every row
    assert len({row["tokens"] for row in rows.values()}) == 1, out
    for label in LABELS:
        eager, compiled = rows[label, "eager"], rows[label, "compiled"]
        assert eager["steps"] == compiled["steps"] and int(eager["steps"]) >= 1, label
        warm, timed = compiled["graphs"].split(" + ")
        assert int(warm) >= 1 and timed == "0", (label, compiled["graphs"])
    # dyntile compiles one static graph a packed shape, whatever the segments inside
    packing = rows["dyntile packing", "compiled"]
    assert packing["graphs"] == f"{packing['shapes']} + 0" and int(packing["shapes"]) <= 2
    assert "backend='aot_eager'" in out


def test_draw_samples_reaches_the_token_count():
    """A prefix of the seeded permutation, the first whose tokens reach the count."""
    lengths = np.random.default_rng(3).integers(1, 97, size=257)
    for tokens in (1, 500, 4099, int(lengths.sum()), 10**9):
        ids = draw_samples(lengths, tokens, seed=11)
        order = np.random.default_rng(11).permutation(lengths.size)
        expected, total = [], 0
        for i in order:
            if total >= tokens:
                break
            expected.append(int(i))
            total += int(lengths[i])
        assert ids.tolist() == sorted(expected), tokens


def test_every_method_covers_the_same_samples():
    """One epoch of each method over the drawn subset: every sample exactly once (the
    multisets of sample ids equal), so the real tokens are equal too."""
    lengths = np.random.default_rng(5).integers(1, 211, size=301)
    corpus = Corpus.from_lengths(lengths, name="odd")
    plan = dyntile.plan_buckets(lengths, max_buckets=4, multiple=8)
    args = argparse.Namespace(
        seed=7, batch_tokens=509, pack_len=None, pack_overflow="extend", d_model=32, steps=6
    )
    ids = draw_samples(lengths, args.steps * args.batch_tokens, args.seed)
    subset = subset_corpus(corpus, ids)
    assert subset.lengths.tolist() == lengths[ids].tolist()
    assert all(np.array_equal(subset.sequence(k), corpus.sequence(i)) for k, i in enumerate(ids))
    batch_size = group_size(subset.lengths, args.batch_tokens)
    covered, steps = {}, {}
    for method in LLAMA_METHODS:
        batches, _, batch_ids = epoch_batches(method, subset, plan, args, batch_size)
        covered[method] = Counter(i for b in batch_ids for i in b)
        steps[method] = len(batches)
        for batch, b in zip(batches, batch_ids, strict=True):
            real = int((batch["segment_ids"] != 0).sum())
            assert real == int(subset.lengths[b].sum()), method
    assert all(c == Counter(range(len(subset))) for c in covered.values()), steps
