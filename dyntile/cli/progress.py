"""Progress of the command's long phases on stderr: a tqdm bar where one can be drawn, whole lines elsewhere.

* a terminal or a Jupyter notebook: a ``tqdm.auto`` bar, cleared when the phase ends;
* a file or a pipe (CI logs, ``nohup``, job schedulers): no carriage returns, only a few
  whole lines per phase -- one when a phase has run 10 s, 20 s, 40 s, ... (each interval
  twice the last, so a phase of an hour writes nine) and one when it ends;
* ``--no-progress``, or ``TQDM_DISABLE`` set to a non-empty value (as tqdm reads it): nothing.

tqdm is imported only when a bar is drawn: ``import dyntile`` and ``dyntile.cli.main`` do not
import it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

__all__ = ["progress", "add_progress_argument", "FIRST_LINE_S"]

T = TypeVar("T")

#: seconds a phase runs before its first progress line in a file or pipe; the next after twice
#: as long, and so on: quick phases write only their last line, long ones a few
FIRST_LINE_S = 10.0


def add_progress_argument(p) -> None:
    """``--no-progress`` on an ``argparse`` parser (or argument group)."""
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress on stderr (also TQDM_DISABLE=1); a bar on a terminal, a few lines in a file",
    )


def progress(
    items: Iterable[T],
    total: int | None,
    desc: str,
    enabled: bool = True,
    file: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[T]:
    """Yield ``items`` while showing ``desc`` and a count of ``total`` (``None``: unknown) on ``file``
    (default ``sys.stderr``); nothing if not ``enabled``. ``clock``: seconds, for the line timing.

    >>> import io
    >>> out = io.StringIO()  # not a terminal: one whole line at the end
    >>> list(progress(range(3), 3, "demo", file=out))
    [0, 1, 2]
    >>> out.getvalue()  # doctest: +ELLIPSIS
    'demo: 3/3 done in ... s\\n'
    """
    if not enabled or os.environ.get("TQDM_DISABLE"):
        yield from items
        return
    file = sys.stderr if file is None else file
    bar = _bar_class(file)
    if bar is None:
        yield from _lines(items, total, desc, file, clock)
    else:
        # total None means unknown: tqdm would take len(items) of a list cut short by a limit
        shown = iter(items) if total is None else items
        yield from bar(shown, total=total, desc=desc, leave=False, file=file, dynamic_ncols=True)


def _bar_class(file: TextIO):
    """``tqdm.auto.tqdm`` when ``file`` is a terminal or the process is a notebook kernel, else ``None``."""
    try:
        terminal = file.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed file
        terminal = False
    if not terminal and "ipykernel" not in sys.modules:  # a notebook's stderr is no terminal
        return None
    from tqdm.auto import tqdm

    if terminal or any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__):
        return tqdm
    return None  # a kernel without notebook widgets: tqdm would write carriage returns


def _lines(items: Iterable[T], total: int | None, desc: str, file: TextIO, clock) -> Iterator[T]:
    """Whole lines only: at ``FIRST_LINE_S``, twice that, ... after the start, and at the end."""
    of = "" if total is None else f"/{total}"
    start = clock()
    due = FIRST_LINE_S
    n = 0
    ended = False
    try:
        for item in items:
            n += 1  # counted when handed out: a loop that stops after its last item still counts it
            yield item
            elapsed = clock() - start
            if elapsed >= due:
                pct = f" ({100 * n / total:.0f}%)" if total else ""
                print(f"{desc}: {n}{of}{pct} after {elapsed:.0f} s", file=file, flush=True)
                due = 2 * elapsed
        ended = True
    finally:  # also when the loop over it stops early: a --max-batches cap, a --limit, or an error
        how = "done in" if ended or n == total else "in"
        print(f"{desc}: {n}{of} {how} {clock() - start:.1f} s", file=file, flush=True)
