"""A progress bar on stderr: tqdm when installed, else one rewritten status line."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["progress"]

T = TypeVar("T")


def progress(items: Iterable[T], total: int | None, desc: str, enabled: bool = True) -> Iterator[T]:
    """Yield ``items`` while showing ``desc`` and a count on stderr (nothing if not ``enabled``).

    >>> list(progress(range(3), 3, "demo", enabled=False))
    [0, 1, 2]
    """
    if not enabled:
        yield from items
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield from _plain(items, total, desc)
        return
    yield from tqdm(items, total=total, desc=desc, leave=False, file=sys.stderr, dynamic_ncols=True)


def _plain(items: Iterable[T], total: int | None, desc: str) -> Iterator[T]:
    of = f"/{total}" if total else ""
    n = 0
    for n, item in enumerate(items, 1):
        if n == 1 or n % 10 == 0 or n == total:
            print(f"\r{desc}: {n}{of}", end="", file=sys.stderr, flush=True)
        yield item
    print(f"\r{desc}: {n}{of} done", file=sys.stderr, flush=True)
