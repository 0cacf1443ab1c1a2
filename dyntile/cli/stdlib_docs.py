"""The embedded default data: docstrings of the Python standard library.

Every machine with Python has it, it is real text nobody wrote for this demo, and its
lengths are as skewed as real training data (median ~24 tokens, a long tail past 1000).
"""

from __future__ import annotations

import ast
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

__all__ = ["stdlib_root", "stdlib_files", "stdlib_docstrings"]

# directories never walked: test suites and third-party packages
_SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"})
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def stdlib_root() -> Path:
    """Directory of the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> Iterator[Path]:
    """``.py`` files under ``root`` in sorted (deterministic) order, tests excluded."""
    root = stdlib_root() if root is None else Path(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("test_"):
                yield Path(dirpath) / name


def _docstrings_of(tree: ast.AST) -> Iterator[str]:
    """Module, class and function docstrings of ``tree`` in source order (depth first)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, _DOC_NODES):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield doc
        children = [c for c in ast.iter_child_nodes(node) if isinstance(c, _DOC_NODES) or hasattr(c, "body")]
        stack.extend(reversed(children))


def stdlib_docstrings(
    limit: int | None = None, root: Path | None = None, show_progress: bool = False
) -> list[str]:
    """Non-empty docstrings of the standard library, in file then source order.

    ``limit`` stops after that many docstrings (the walk stops early too). Files that
    do not parse (a few templates) are skipped. Nothing is cached. ``show_progress``: count
    the files read on stderr (:func:`~dyntile.cli.progress.progress`).

    >>> docs = stdlib_docstrings(limit=5)
    >>> len(docs), all(isinstance(d, str) and d for d in docs)
    (5, True)
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit should be a positive number of docstrings, but got {limit}")
    from dyntile.cli.progress import progress

    files = list(stdlib_files(root))
    docs: list[str] = []
    # with a limit the walk stops early, at a file not known in advance
    for path in progress(files, None if limit else len(files), "reading stdlib files", show_progress):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, UnicodeDecodeError, OSError):
            continue
        for doc in _docstrings_of(tree):
            docs.append(doc)
            if limit is not None and len(docs) >= limit:
                return docs
    return docs
