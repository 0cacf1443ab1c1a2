"""Progress on stderr: a tqdm bar on a terminal, a few whole lines in a file or pipe, none when disabled."""

import fcntl
import io
import itertools
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from dyntile.cli.main import main
from dyntile.cli.progress import FIRST_LINE_S, progress

ROOT = Path(__file__).resolve().parents[2]
# the demo's progress path at its smallest: two methods, a few batches, eager training
DEMO = "-m dyntile demo --limit 60 --steps 2 --d-model 16 --heads 2 --layers 1 --no-compile".split()
DEMO += ["--methods", "random,packing"]
PHASES = ("reading stdlib files", "random: loader", "random: train", "packing: loader", "packing: train")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    return {**env, **extra}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _assert_clean_lines(err: str) -> list[str]:
    """Whole lines only: no carriage return, none over 200 characters, the last one ended."""
    assert "\r" not in err and err.endswith("\n"), repr(err[-300:])
    lines = err.splitlines()
    assert max(len(line) for line in lines) <= 200, max(lines, key=len)
    return lines


@pytest.mark.parametrize("to", ["file", "pipe"])
def test_demo_progress_to_a_file_or_pipe_is_a_few_whole_lines(to, tmp_path):
    if to == "file":
        with open(tmp_path / "err.txt", "w") as err_file:
            r = subprocess.run(
                [sys.executable, *DEMO], stdout=subprocess.PIPE, stderr=err_file, text=True, cwd=ROOT,
                env=_env(), timeout=300,
            )  # fmt: skip
        err = (tmp_path / "err.txt").read_text()
    else:
        r = subprocess.run(
            [sys.executable, *DEMO], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300
        )
        err = r.stderr
    assert r.returncode == 0, err
    lines = _assert_clean_lines(err)
    for phase in PHASES:  # each phase ends with one line of its count; a short phase writes nothing else
        assert sum(line.startswith(f"{phase}: ") for line in lines) == 1, lines
    assert any(line.startswith("random: train: 2/2 done in ") for line in lines), lines
    assert "dyntile packing" in r.stdout


def _run_in_pty(args: list[str], env: dict) -> tuple[int, str]:
    """Run python ``args`` with stderr on a pseudo terminal of 100 columns; its return code and stderr."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a pty starts 0 wide
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.DEVNULL, stderr=follower, cwd=ROOT, env=env
    )
    os.close(follower)
    out = b""
    try:
        while select.select([leader], [], [], 300)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal (Linux raises EIO)
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
        rc = proc.wait(timeout=300)
    return rc, out.decode("utf-8", "replace")


def test_demo_progress_on_a_terminal_draws_a_bar():
    rc, err = _run_in_pty(DEMO, _env())
    assert rc == 0, err
    assert "\r" in err and "random: loader:" in err and "%|" in err and "it/s" in err, repr(err[:500])
    assert " done in " not in err  # the bar, not the lines written to files


def test_demo_no_progress_on_a_terminal_draws_none(capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main([*DEMO[2:], "--no-progress"]) == 0
    assert terminal.getvalue() == "" and "dyntile packing" in capsys.readouterr().out


def test_no_progress_and_tqdm_disable_print_nothing(capsys, monkeypatch, tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"ids": [5, 6, 7]}\n{"ids": [8]}\n')
    assert main(["plan", str(f), "--field", "ids", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert main(["plan", str(f), "--field", "ids"]) == 0
    assert capsys.readouterr().err == ""
    terminal = _Terminal()
    assert list(progress(range(4), 4, "x", file=terminal)) == [0, 1, 2, 3] and terminal.getvalue() == ""


def test_plan_counts_the_lines_it_reads(capsys, tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"ids": [5, 6, 7]}\n\n{"ids": [8]}\n')
    assert main(["plan", str(f), "--field", "ids"]) == 0
    lines = _assert_clean_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("reading d.jsonl: 3 done in "), lines


def test_bench_counts_its_cases(capsys):
    assert main(["bench", "--quick", "--repeat", "1"]) == 0
    lines = _assert_clean_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("bench: 6/6 done in "), lines


def test_a_terminal_gets_a_tqdm_bar(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    terminal = _Terminal()
    assert list(progress(range(5), 5, "phase", file=terminal)) == list(range(5))
    assert "\r" in terminal.getvalue() and "phase:" in terminal.getvalue()


def test_long_phases_write_lines_at_doubling_intervals(monkeypatch):
    """Lines at 10 s, 20 s, 40 s, ... and one at the end: a phase of an hour writes ten."""
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    out = io.StringIO()
    ticks = itertools.count(0.0, 1.0)  # one item a second
    items = list(progress(range(3600), 3600, "train", file=out, clock=lambda: next(ticks)))
    assert items == list(range(3600))
    lines = _assert_clean_lines(out.getvalue())
    assert lines[0] == f"train: {int(FIRST_LINE_S)}/3600 (0%) after 10 s", lines
    assert lines[1].startswith("train: 20/3600 (1%) after 20 s") and lines[-1].startswith(
        "train: 3600/3600 done"
    )
    assert len(lines) == 10, lines  # 10, 20, 40, ..., 2560 s and the end
    out = io.StringIO()  # an unknown total: a count only
    ticks = itertools.count(0.0, 1.0)
    list(progress(iter(range(30)), None, "reading x", file=out, clock=lambda: next(ticks)))
    assert out.getvalue().splitlines() == [
        "reading x: 10 after 10 s",
        "reading x: 20 after 20 s",
        "reading x: 30 done in 31.0 s",
    ]


def test_a_loop_that_stops_early_still_ends_its_line(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    out = io.StringIO()
    for i in progress(range(10), 4, "loader", file=out):  # a --max-batches cap of 4
        if i == 3:
            break
    assert out.getvalue().startswith("loader: 4/4 done in ")
    out = io.StringIO()
    for i in progress(range(10), 10, "loader", file=out):
        if i == 3:
            break
    assert out.getvalue().startswith("loader: 4/10 in ")


def test_import_dyntile_and_the_parser_do_not_import_tqdm():
    code = (
        "import sys, dyntile, dyntile.cli.main as m, dyntile.cli.progress as p; m.build_parser();"
        "list(p.progress(range(3), 3, 'x')); print('tqdm' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
