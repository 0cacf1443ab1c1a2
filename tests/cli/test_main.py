"""The ``dyntile`` command end to end: demo, plan, bench, and its errors."""

import json
import subprocess
import sys

import numpy as np
import pytest

import dyntile
from dyntile.cli.errors import CLIError
from dyntile.cli.main import main
from shared_data import shared_data_path

SMALL = "--limit 300 --steps 3 --no-progress --d-model 16 --heads 2 --layers 1".split()
LABELS = ["random + pad_sequence", "sorted pools + pad_sequence", "dyntile buckets", "dyntile packing"]


def _demo(capsys, *args):
    rc = main(["demo", *SMALL, *args])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


def test_demo_eager_end_to_end_with_plot(capsys, table, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "demo.png"
    out = _demo(capsys, "--no-compile", "--plot", str(png))
    rows = table(out)
    assert list(rows) == LABELS
    assert png.stat().st_size > 1000 and "plot written to" in out
    assert "300 docstrings of the Python" in out
    buckets, packing, rand = rows["dyntile buckets"], rows["dyntile packing"], rows["random + pad_sequence"]
    assert int(buckets["shapes"]) <= 8 and int(packing["shapes"]) <= 2
    assert float(packing["padded %"]) < float(buckets["padded %"]) < float(rand["padded %"])
    planned = float(out.split("planned padding ")[1].split("%")[0])
    inside = float(out.split("dyntile buckets: ")[1].split("%")[0])
    assert inside == planned and float(buckets["padded %"]) >= planned
    for r in rows.values():
        assert r["graphs"] == "-" and int(r["steps"]) == 3 and float(r["tok/s"]) > 0


def test_demo_figures_follow_the_data(capsys, table, tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("\n".join(["16"] * 200))  # one length: nothing to pad for anyone
    rows = table(_demo(capsys, "--no-compile", "--data", str(f), "--methods", "random,buckets"))
    assert rows["random + pad_sequence"]["padded %"] == "0.0"
    assert rows["dyntile buckets"]["shapes"] == "1"  # 128 + 72 samples: 56 empty rows
    assert rows["dyntile buckets"]["padded %"] == f"{100 * 56 / 256:.1f}"
    g = tmp_path / "skewed.txt"
    g.write_text("\n".join(str(n) for n in [8] * 150 + [200] * 50))
    out2 = _demo(capsys, "--no-compile", "--data", str(g), "--methods", "random,buckets")
    rows2 = table(out2)
    assert "dyntile buckets: 0.0% padding inside samples' rows (planned 0.0%)" in out2
    assert float(rows2["random + pad_sequence"]["padded %"]) > 10
    assert rows2["random + pad_sequence"]["batches"] != rows["random + pad_sequence"]["batches"]


def test_demo_reads_the_shared_real_lengths(capsys, table):
    path = shared_data_path("lengths_cpython_docstrings.npy")
    out = _demo(capsys, "--no-compile", "--data", str(path), "--methods", "packing", "--limit", "8604")
    assert "lengths_cpython_docstrings.npy (lengths only" in out
    packing = table(out)["dyntile packing"]
    assert float(packing["padded %"]) < 2.0 and int(packing["shapes"]) <= 2


def test_demo_compiled_counts_graphs(capsys, table):
    # no --backend: the tiny model's default, aot_eager
    out = _demo(capsys, "--methods", "random,packing", "--limit", "200")
    rows = table(out)
    rand, packing = rows["random + pad_sequence"], rows["dyntile packing"]
    assert 1 <= int(packing["graphs"]) <= int(packing["shapes"]) <= 2  # one static graph per packed shape
    assert int(rand["graphs"]) >= 2  # 3 random shapes -> recompiles
    assert float(rand["compile s"]) > 0 and "backend='aot_eager'" in out
    assert (rand["attention"], packing["attention"]) == ("dense", "varlen")
    assert "the least training cost for varlen attention" in out


def _fails(capsys, argv, message):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err
    return err


def test_bad_input_exits_nonzero_with_a_clear_message(capsys, tmp_path):
    _fails(capsys, ["demo", "--data", str(tmp_path / "nope.txt")], "no such file")
    (tmp_path / "x.csv").write_text("1\n")
    _fails(capsys, ["demo", "--data", str(tmp_path / "x.csv")], "unknown extension '.csv'")
    (tmp_path / "l.txt").write_text("4\nten\n")
    _fails(capsys, ["plan", str(tmp_path / "l.txt")], "line 2 is not an integer length")
    (tmp_path / "d.jsonl").write_text(json.dumps({"ids": [1, 2]}) + "\n" + json.dumps({"x": 1}) + "\n")
    _fails(
        capsys, ["demo", "--data", str(tmp_path / "d.jsonl"), "--field", "ids"], "line 2 has no field 'ids'"
    )
    _fails(capsys, ["demo", "--steps", "0"], "--steps should be a positive integer")
    _fails(capsys, ["demo", "--methods", "random,magic"], "--methods should list")
    _fails(capsys, ["demo", "--limit", "50", "--batch-tokens", "8", "--no-compile"], "raise --batch-tokens")
    _fails(capsys, ["demo", "--d-model", "30", "--heads", "4"], "multiple of --heads")
    _fails(capsys, ["demo", "--methods", "packing,packing"], "each once")
    _fails(capsys, ["bench", "--seed", "-1"], "--seed should be a non-negative integer")
    np.save(tmp_path / "u64.npy", np.array([2**63, 5], np.uint64))
    _fails(capsys, ["plan", str(tmp_path / "u64.npy")], "u64.npy: lengths should be below 2**63")
    np.save(tmp_path / "ok.npy", np.array([40, 50, 60]))
    _fails(capsys, ["plan", str(tmp_path / "ok.npy"), "--batch-tokens", "10"], "--batch-tokens 10: ")
    _fails(
        capsys, ["plan", str(tmp_path / "ok.npy"), "--out", str(tmp_path / "no" / "p.json")], "does not exist"
    )
    assert main(["demo", "--no-such-flag"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def _npz_bytes(tmp_path, **arrays) -> bytes:
    np.savez(tmp_path / "src.npz", **arrays)
    return (tmp_path / "src.npz").read_bytes()


# the inputs: (file name, its bytes from tmp_path, the command, what the one line must say)
BAD_INPUTS = {
    "empty .npz": ("empty.npz", lambda t: b"", ["plan"], "not a NumPy .npz file (an empty file"),
    "half an .npz": (
        "half.npz",
        lambda t: _npz_bytes(t, ids=np.arange(100), offsets=np.array([0, 50, 100]))[:300],
        ["plan"],
        "a damaged .npz file, cut short or corrupt",
    ),
    "a zip header only": (
        "z.npz",
        lambda t: b"PK\x03\x04x",
        ["demo", "--no-compile", "--data"],
        "a damaged .npz file",
    ),
    "garbage": (
        "g.npz",
        lambda t: b"hello, no zip at all" * 5,
        ["plan"],
        "not a NumPy .npz file (no zip archive",
    ),
    "objects in an .npz": (
        "o.npz",
        lambda t: _npz_bytes(t, lengths=np.array([[1], [2, 3]], object)),
        ["plan"],
        "array 'lengths' holds Python objects; .npz files are read without unpickling",
    ),
    "uint64 ids of 2**64-1": (
        "u.npz",
        lambda t: _npz_bytes(t, ids=np.array([1, 2, 2**64 - 1], np.uint64), offsets=np.array([0, 1, 3])),
        ["demo", "--no-compile", "--data"],
        "token ids should be below 1048576 (2**20: a model has one embedding row per id), but "
        "the largest is 18446744073709551615 (sequence 1); renumber the ids densely",
    ),
    "ids near 10**11": (
        "b.npz",
        lambda t: _npz_bytes(t, ids=np.array([1, 10**11, 2]), offsets=np.array([0, 2, 3])),
        ["demo", "--no-compile", "--data"],
        "the largest is 100000000000 (sequence 0)",
    ),
    "ids near 10**8": (
        "m.npz",
        lambda t: _npz_bytes(t, ids=np.array([10**8 + 3]), offsets=np.array([0, 1])),
        ["plan"],
        "the largest is 100000003 (sequence 0); renumber",
    ),
    "a deeply nested .jsonl line": (
        "n.jsonl",
        lambda t: b'{"ids": [1]}\n{"ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
        ["plan", "--field", "ids"],
        "line 2 is nested too deeply to read; token ids should be a flat list",
    ),
    "a 5,000-digit id": (
        "d.jsonl",
        lambda t: b'{"ids": [1]}\n{"ids": [' + b"7" * 5000 + b"]}\n",
        ["demo", "--no-compile", "--field", "ids", "--data"],
        "line 2 holds a number of more than 4300 digits",
    ),
    "an empty id list": (
        "e.jsonl",
        lambda t: b'{"ids": [1]}\n\n{"ids": []}\n',
        ["plan", "--field", "ids"],
        "line 3 holds no token ids",
    ),
    "float offsets": (
        "f.npz",
        lambda t: _npz_bytes(t, ids=np.arange(10), offsets=np.array([0, 5.5, 10])),
        ["plan"],
        "'offsets' should be integers (positions in 'ids'), but got dtype float64",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_files_exit_2_with_one_line_naming_the_file(case, capsys, tmp_path):
    name, make, command, message = BAD_INPUTS[case]
    (tmp_path / name).write_bytes(make(tmp_path))
    rc = main([command[0], "--no-progress", *command[1:], str(tmp_path / name)])  # stderr: the error alone
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith(f"dyntile: error: {name}: ") and message in err, err


@pytest.mark.parametrize("command", ["plan", "demo"])
def test_batch_tokens_out_of_range_are_named(command, capsys):
    for budget in ("99999999999999999999", str(2**20 + 1), "0"):
        rc = main([command, "--batch-tokens", budget, "--limit", "20"])
        err = capsys.readouterr().err
        assert rc == 2 and err == (
            f"dyntile: error: --batch-tokens should be a positive number of tokens up to "
            f"1048576 (2**20), but got {budget}\n"
        ), err


@pytest.mark.parametrize("command", ["plan", "demo", "bench"])
def test_seed_out_of_range_is_named_with_the_range(command, capsys):
    for seed in ("99999999999999999999", str(2**64), "-1"):
        rc = main([command, "--seed", seed, "--limit", "20"][: 3 if command == "bench" else 5])
        err = capsys.readouterr().err
        assert rc == 2 and err == (
            "dyntile: error: --seed should be a non-negative integer up to 18446744073709551615 "
            f"(2**64 - 1, the seeds torch takes), but got {seed}\n"
        ), err


def test_the_largest_seed_runs(capsys, table):
    rows = table(
        _demo(capsys, "--no-compile", "--seed", str(2**64 - 1), "--limit", "40", "--methods", "packing")
    )
    assert int(rows["dyntile packing"]["steps"]) >= 1


def test_plan_prints_and_saves_a_loadable_plan(capsys, tmp_path):
    lengths = np.random.default_rng(0).integers(1, 300, 500)
    src = tmp_path / "l.npy"
    np.save(src, lengths)
    dst = tmp_path / "plan.json"
    assert main(["plan", str(src), "--buckets", "3", "--out", str(dst)]) == 0
    out = capsys.readouterr().out
    loaded = dyntile.BucketPlan.load(dst)
    expected = dyntile.plan_buckets(lengths, max_buckets=3, multiple=8)
    assert loaded.boundaries == expected.boundaries
    ratio = float(out.split("expected padding: ")[1].split("%")[0])
    assert abs(ratio - 100 * expected.padding_ratio(lengths)) < 0.05
    for b in expected.boundaries:
        assert f"  {b}  " in out


def test_bench_quick(capsys):
    assert main(["bench", "--quick", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "matmul float32 511x257x383" in out and "pad_batch" in out and "asv_benches/" in out


def test_no_subcommand_prints_help(capsys):
    assert main([]) == 0
    assert "dyntile demo" in capsys.readouterr().out


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_and_parser_do_not_import_torch():
    r = _python("import sys, dyntile, dyntile.cli.main as m; m.build_parser(); print('torch' in sys.modules)")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_missing_torch_is_reported_with_the_install_command():
    r = _python(
        "import sys; sys.modules['torch'] = None\n"
        "from dyntile.cli.main import main; raise SystemExit(main(['demo', '--limit', '5']))"
    )
    assert r.returncode == 2 and "pip install torch==2.13.0" in r.stderr, r.stderr


def test_python_dash_m_version():
    r = subprocess.run(
        [sys.executable, "-m", "dyntile", "--version"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout.strip() == f"dyntile {dyntile.__version__}"


def test_packing_note_says_what_the_shapes_mean():
    from dyntile.cli.demo import _packing_note

    one = _packing_note([(1, 1496)], 1496, 0, "extend")
    assert "shape 1x1496" in one and "hold every sample whole" in one and "second shape" not in one
    two = _packing_note([(256, 8), (2, 784)], 8, 5, "extend")
    assert "2x784" in two and "256x8" in two and "the 5 samples longer than T=8" in two
    only_long = _packing_note([(2, 784)], 8, 200, "extend")
    assert "kept whole in its rows, and the shorter ones share those rows" in only_long
    assert "split into chunks" in _packing_note([(4, 64)], 64, 3, "split")


def test_attention_option_picks_each_methods_attention():
    from dyntile.cli.demo import _parse_attention

    methods = ["random", "sorted", "buckets", "packing"]
    assert _parse_attention("auto", methods) == {
        "random": "dense",
        "sorted": "dense",
        "buckets": "varlen",
        "packing": "varlen",
    }
    assert set(_parse_attention("dense", methods).values()) == {"dense"}
    assert _parse_attention("packing=dense,random=varlen", methods)["packing"] == "dense"
    assert _parse_attention("packing=dense,random=varlen", methods)["random"] == "varlen"
    with pytest.raises(CLIError, match="--attention should be auto"):
        _parse_attention("packing=flash", methods)
