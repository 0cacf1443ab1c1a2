"""Record what a training run drew and trained on, and check it against what the samplers promise.

A run is recorded from three places that every framework goes through: a dyntile
sampler starting a pass (its epoch and ranks), the ``DataLoader``'s fetch of one batch
(the indices it fetched, after any wrapper around the sampler, and the shape the
collate made) and ``Tensor.backward`` (the loss). :func:`check_run` then asserts, for
each epoch, that the ranks fetched every sample once (plus the documented repeats),
took the same number of steps with one shape per step, computed a finite loss at every
step, and that epochs differ in order.

In-process: ``with recording() as events: ...``. Under ``torchrun``, a script runs as
``torchrun ... framework_runs.py OUT SCRIPT [ARGS]`` (each rank writes ``OUT/rank<R>.json``);
:func:`torchrun` launches that with a free port on 127.0.0.1 and a deadline. A script
that runs several scenarios separates them with :func:`mark` (:func:`scenarios` cuts
the events there).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
_active: list[list[dict]] = []  # the events lists of the recordings in progress


def mark(name: str, **info) -> None:
    """Start scenario ``name`` in the recording in progress (a no-op outside one)."""
    if _active:
        _active[-1].append({"mark": name, **info})


def note(**info) -> None:
    """Add ``info`` (e.g. ``error=...``) to the scenario in progress."""
    if _active:
        _active[-1].append({"note": info})


def scenarios(events: list[dict]) -> dict[str, list[dict]]:
    """A rank's events by scenario: ``{name: [its mark, then its events]}``."""
    out: dict[str, list[dict]] = {}
    current = out.setdefault("", [])
    for e in events:
        if "mark" in e:
            current = out.setdefault(e["mark"], [])
        current.append(e)
    return out


@contextlib.contextmanager
def recording():
    """Record passes, fetched batches and losses of this process into the yielded list."""
    import torch
    from torch.utils.data._utils import fetch

    from loaders.epoch_sampler import EpochBatchSampler

    events: list[dict] = []
    orig_pass, orig_fetch, orig_backward = (
        EpochBatchSampler._pass,
        fetch._MapDatasetFetcher.fetch,
        torch.Tensor.backward,
    )

    def _pass(self):
        groups = len(getattr(self, "batch_sizes", None) or getattr(self, "shapes", ()))
        R, rank = self.replicas()
        events.append(
            {"pass": self.epoch, "replicas": R, "rank": rank, "groups": groups, "n": self.num_samples}
        )
        yield from orig_pass(self)

    def _fetch(self, index):
        out = orig_fetch(self, index)
        events.append({"batch": [int(i) for i in index], "shape": _shape(out)})
        return out

    def _backward(self, *args, **kwargs):
        if self.numel() == 1:
            events.append({"loss": float(self.detach())})
        return orig_backward(self, *args, **kwargs)

    EpochBatchSampler._pass, fetch._MapDatasetFetcher.fetch, torch.Tensor.backward = _pass, _fetch, _backward
    _active.append(events)
    try:
        yield events
    finally:
        _active.remove(events)
        EpochBatchSampler._pass, fetch._MapDatasetFetcher.fetch, torch.Tensor.backward = (
            orig_pass,
            orig_fetch,
            orig_backward,
        )


def _shape(out):
    import torch

    if isinstance(out, dict):
        out = out.get("input_ids", next((v for v in out.values() if isinstance(v, torch.Tensor)), None))
    return list(out.shape) if isinstance(out, torch.Tensor) else None


def epochs_of(events: list[dict]) -> list[dict]:
    """A rank's events cut at each pass: ``[{"pass": epoch, ..., "batches": [...], "shapes": [...],
    "losses": [...]}]`` (losses counted with the pass they follow)."""
    out: list[dict] = []
    for e in events:
        if "pass" in e:
            out.append({**e, "batches": [], "shapes": [], "losses": []})
        elif out and "batch" in e:
            out[-1]["batches"].append(e["batch"])
            out[-1]["shapes"].append(e["shape"])
        elif out and "loss" in e:
            out[-1]["losses"].append(e["loss"])
    return out


def check_run(ranks: list[list[dict]], *, epochs: int = 2) -> list[list[dict]]:
    """Assert that the recorded ranks of one run kept the samplers' promises; returns the
    epochs of each rank (see :func:`epochs_of`)."""
    R = len(ranks)
    per_rank = [epochs_of(events) for events in ranks]
    for r, passes in enumerate(per_rank):
        assert [p["pass"] for p in passes] == list(range(epochs)), (
            f"rank {r} ran epochs {[p['pass'] for p in passes]}"
        )
        assert all((p["replicas"], p["rank"]) == (R, r) for p in passes), f"rank {r} split as {passes[0]}"
    n = per_rank[0][0]["n"]
    orders = []
    for e in range(epochs):
        steps = [len(passes[e]["batches"]) for passes in per_rank]
        assert steps[0] > 0 and len(set(steps)) == 1, f"epoch {e}: steps per rank {steps}"
        for k in range(steps[0]):
            shapes = [passes[e]["shapes"][k] for passes in per_rank]
            assert shapes[0] is not None and all(s == shapes[0] for s in shapes), (
                f"epoch {e} step {k}: {shapes}"
            )
        seen = Counter(i for passes in per_rank for b in passes[e]["batches"] for i in b)
        assert set(seen) == set(range(n)), (
            f"epoch {e}: {n - len(set(seen) & set(range(n)))} samples never seen"
        )
        repeats = sum(seen.values()) - n
        assert repeats <= (R - 1) * per_rank[0][e]["groups"], f"epoch {e}: {repeats} repeats over {R} ranks"
        for r, passes in enumerate(per_rank):
            losses = passes[e]["losses"]
            assert len(losses) == steps[0] and all(map(math.isfinite, losses)), (
                f"epoch {e} rank {r}: {losses}"
            )
        orders.append([i for b in per_rank[0][e]["batches"] for i in b])
    assert all(a != b for a, b in zip(orders, orders[1:])), "an epoch repeated the order of the one before"
    return per_rank


def check_scenarios(ranks: list[list[dict]], expected: dict[str, str | None]) -> None:
    """Assert each scenario of a recorded run: ``None``, it kept the samplers' promises
    (:func:`check_run`); a regular expression, every rank was refused with an error
    matching it (and trained nothing)."""
    per_rank = [scenarios(events) for events in ranks]
    for name, refusal in expected.items():
        runs = [found.get(name) for found in per_rank]
        assert all(runs), f"scenario {name} did not run on every rank"
        errors = [[e["note"]["error"] for e in run if "note" in e] for run in runs]
        if refusal is None:
            assert not any(errors), f"scenario {name} failed: {errors}"
            check_run(runs)
        else:
            assert all(len(found) == 1 and re.search(refusal, found[0]) for found in errors), (
                f"scenario {name}: expected an error matching {refusal!r}, got {errors}"
            )
            assert not any("loss" in e for run in runs for e in run), (
                f"scenario {name} trained before its error"
            )


@contextlib.contextmanager
def one_thread():
    """torch on one thread for the block (as torchrun's workers run): a tiny model's
    ops are slower split over threads, all the more on a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_in_process(script: Path | str, *args: str) -> list[dict]:
    """Run ``script`` as ``python script args`` in this process, recorded; its events."""
    argv = sys.argv
    sys.argv = [str(script), *args]
    try:
        with recording() as events, one_thread():
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = argv
    return events


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(
    script: Path | str, out: Path, *args: str, nproc: int = 2, timeout: float = 240.0, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, list[list[dict]]]:
    """Run ``script`` under ``torchrun`` on ``nproc`` local processes (gloo, 127.0.0.1, a free
    port), recorded; fail the test if it has not finished within ``timeout`` seconds.
    Returns the finished process (output captured) and each rank's events."""
    import pytest

    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--nnodes=1",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        "--max-restarts=0",
        str(Path(__file__).resolve()),
        str(out),
        str(script),
        *args,
    ]
    path = os.pathsep.join(p for p in (str(ROOT), str(HERE), os.environ.get("PYTHONPATH")) if p)
    full_env = {
        **os.environ,
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONWARNINGS": "ignore",
        **(env or {}),
    }
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        cwd=out,
        start_new_session=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers: one session
        stdout, _ = proc.communicate()
        pytest.fail(f"torchrun {Path(script).name} hung past {timeout:.0f} s; its output:\n{stdout[-6000:]}")
    done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, "")
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    return done, ranks


def _main(out: str, script: str, *args: str) -> None:
    """One rank under torchrun: run ``script`` recorded, write the events even if it fails."""
    rank = os.environ.get("RANK", "0")
    sys.argv = [script, *args]
    with recording() as events:
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            Path(out, f"rank{rank}.json").write_text(json.dumps(events))


if __name__ == "__main__":
    import framework_runs  # the recording lives in the importable module, where mark() finds it

    framework_runs._main(*sys.argv[1:])


def run_scenarios(*functions) -> None:
    """A scenario script's main: run the scenarios named on the command line (all of
    ``functions`` by default), each after its :func:`mark`; a ``TypeError`` or
    ``RuntimeError`` is the scenario's refusal, noted (anything else fails the run)."""
    by_name = {f.__name__: f for f in functions}
    for name in sys.argv[1:] or by_name:
        mark(name)
        try:
            by_name[name]()
        except (TypeError, RuntimeError) as e:
            note(error=f"{type(e).__name__}: {e}")
