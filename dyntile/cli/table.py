"""Plain-text tables: right-aligned numbers, left-aligned first column."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table", "count"]


def count(n: int, noun: str) -> str:
    """``"1 bucket"``, ``"8 buckets"``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Align ``rows`` under ``headers``; cells are shown with ``str``.

    >>> print(format_table(["method", "shapes"], [["random", 212], ["packing", 2]]))
    method   shapes
    -------  ------
    random      212
    packing       2
    """
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])
