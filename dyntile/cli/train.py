"""A short training run under ``torch.compile`` that counts what the compiler does.

Compilations are read from Dynamo's own counters
(``torch._dynamo.utils.counters["stats"]``): ``unique_graphs`` is the number of
graphs built (the first compile and every recompilation: a new shape, a dim turned
dynamic, a 0/1 specialisation); a step during which Dynamo traced anything
(``calls_captured`` grew) is a *compile step*. The backend is passed to
``torch.compile`` by name: wrapping it in a Python callable makes Inductor skip parts
of its setup and run several times slower on the CPU. Tokens/s is given over all
steps and over the others ("steady"); only real (non-padding) tokens are counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import torch

__all__ = ["TrainResult", "train", "warm_up_compiler", "BACKENDS"]

BACKENDS = ("inductor", "aot_eager", "eager")


@dataclass(frozen=True)
class TrainResult:
    """Figures of one training run; ``graphs`` is ``None`` when not compiled.

    >>> r = TrainResult(steps=20, real_tokens=4000, slots=5000, seconds=2.0, compile_steps=1,
    ...                 compile_seconds=1.5, graphs=1, first_loss=8.3, last_loss=6.1)
    >>> r.tokens_per_s
    2000.0
    """

    steps: int
    real_tokens: int
    slots: int
    seconds: float
    compile_steps: int
    compile_seconds: float
    graphs: int | None
    first_loss: float
    last_loss: float
    steady_tokens: int = 0
    steady_seconds: float = 0.0

    @property
    def steady_tokens_per_s(self) -> float:
        """Real tokens per second over the steps that compiled nothing (all steps if none did)."""
        return self.steady_tokens / self.steady_seconds if self.steady_seconds else self.tokens_per_s

    @property
    def tokens_per_s(self) -> float:
        """Real tokens per second over the whole run, compile steps included."""
        return self.real_tokens / self.seconds if self.seconds else 0.0


def _check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend should be one of {BACKENDS}, but got {backend!r}")
    return backend


def _traced() -> int:
    return torch._dynamo.utils.counters["stats"]["calls_captured"]


def warm_up_compiler(backend: str) -> float:
    """Compile and run a tiny training step once, so that the compiler's one-time start-up
    cost (imports, toolchain checks) is not charged to whichever method runs first.

    Returns the seconds it took.
    """
    t0 = time.perf_counter()
    torch._dynamo.reset()
    lin = torch.nn.Linear(4, 4)
    step = torch.compile(lambda x: lin(x).relu().sum(), backend=_check_backend(backend))
    step(torch.ones(2, 4)).backward()
    torch._dynamo.reset()
    return time.perf_counter() - t0


def train(
    model: torch.nn.Module,
    batches: Iterable[dict],
    *,
    steps: int,
    backend: str | None = "inductor",
    dynamic: bool | None = None,
    recompile_limit: int = 8,
    lr: float = 1e-3,
    on_step=None,
) -> TrainResult:
    """Run at most ``steps`` optimizer steps over ``batches`` and time each one.

    ``batches`` yields dicts of int64 ``[B, T]`` ``input_ids``, ``position_ids``,
    ``segment_ids`` (0 = padding). ``backend=None`` trains eagerly. ``dynamic`` goes to
    ``torch.compile``: ``None`` (its default: static first, dynamic after a shape
    change), ``True`` (one dynamic graph up front) or ``False`` (one static graph per
    shape). ``on_step`` is called after every step.
    """
    step_fn = model
    stats = torch._dynamo.utils.counters["stats"]
    if backend is not None:
        torch._dynamo.reset()
        graphs0 = stats["unique_graphs"]
        # room for one graph per planned shape (Dynamo falls back to eager past the limit)
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, recompile_limit)
        step_fn = torch.compile(model, backend=_check_backend(backend), dynamic=dynamic)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    n = real = slots = compile_steps = 0
    seconds = compile_seconds = 0.0
    steady_tokens, steady_seconds = 0, 0.0
    first = last = float("nan")
    for batch in batches:
        if n >= steps:
            break
        before = _traced()
        t0 = time.perf_counter()
        loss = step_fn(batch["input_ids"], batch["position_ids"], batch["segment_ids"])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        tokens = int((batch["segment_ids"] != 0).sum())
        n, real, slots, seconds = n + 1, real + tokens, slots + batch["input_ids"].numel(), seconds + dt
        last = float(loss.detach())
        first = last if n == 1 else first
        if backend is not None and _traced() > before:
            compile_steps, compile_seconds = compile_steps + 1, compile_seconds + dt
        else:
            steady_tokens, steady_seconds = steady_tokens + tokens, steady_seconds + dt
        if on_step is not None:
            on_step()
    return TrainResult(
        n,
        real,
        slots,
        seconds,
        compile_steps,
        compile_seconds,
        None if backend is None else stats["unique_graphs"] - graphs0,
        first,
        last,
        steady_tokens,
        steady_seconds,
    )
