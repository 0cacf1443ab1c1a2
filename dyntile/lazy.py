"""Lazy module attributes: a package lists its modules and the public names of each,
and loads a module on first use of one of its names.

Keeps ``import dyntile`` cheap (NumPy only) and keeps numba and torch out of it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, by_module: Mapping[str, tuple[str, ...]], namespace: dict
) -> tuple[Callable, Callable, list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: ``by_module`` maps each module
    to the public names it defines; a loaded name is cached in ``namespace`` (the package
    globals).

    >>> getattr_, dir_, all_ = lazy_exports("pkg", {"math": ("pi",), "os.path": ("join",)}, {})
    >>> all_, round(getattr_("pi"), 2)
    (['join', 'pi'], 3.14)
    """
    exports = {name: module for module, names in by_module.items() for name in names}

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__, sorted(exports)
