"""Lazy module attributes: a package lists ``name -> module`` and loads each on first use.

Keeps ``import dyntile`` cheap (NumPy only) and keeps numba and torch out of it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a public name to the
    module defining it; a loaded name is cached in ``namespace`` (the package globals)."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
