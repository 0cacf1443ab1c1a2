"""What every ``python -m pytest`` run shares: tests/ and the ``>>>`` examples of the
dyntile and loaders modules (``--doctest-modules``, set in pyproject.toml).

CUDA code runs on Numba's CUDA simulator unless ``NUMBA_ENABLE_CUDASIM`` is set to 0.
The variable is set here because numba reads it once, when it is first imported, and
this file loads before any test or module does: the CUDA examples and tests/cuda then
run on any machine with numba-cuda, with or without a GPU.

A module that cannot be imported because an optional dependency is not installed has
its examples skipped, and so has an example that imports one; ``-ra`` lists each with
the missing package. Any other error fails the run, as it does without this file.
"""

from __future__ import annotations

import doctest
import importlib
import os
from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

ROOT = Path(__file__).resolve().parent
PACKAGES = ("dyntile", "loaders")
# the packages behind pyproject.toml's optional extras that the modules import
OPTIONAL = frozenset(
    "torch numba numba_cuda transformers accelerate lightning torchdata matplotlib tqdm".split()
)


def _module_name(path: Path) -> str | None:
    """``dyntile.cuda.tile`` for ROOT/dyntile/cuda/tile.py; None outside the packages."""
    try:
        parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    except ValueError:
        return None
    if not parts or parts[0] not in PACKAGES:
        return None
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _missing_optional(exc: BaseException) -> str | None:
    """The optional package whose absence caused ``exc`` (itself or a cause), or None."""
    while exc is not None:
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.split(".")[0] in OPTIONAL:
            return exc.name.split(".")[0]
        exc = exc.__cause__ or exc.__context__
    return None


class MissingDependency(pytest.File):
    """Stands in for a module's doctests when the module needs a package not installed."""

    def __init__(self, *, reason: str, **kwargs):
        super().__init__(**kwargs)
        self.reason = reason

    def collect(self):
        pytest.skip(self.reason)


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent):
    collectors = yield
    if file_path.suffix != ".py" or not parent.config.getoption("doctestmodules"):
        return collectors
    name = _module_name(file_path)
    if name is None:  # examples are collected from the packages only, not from tests/
        return [c for c in collectors if not isinstance(c, DoctestModule)]
    if file_path.name == "__main__.py":  # pytest does not run these, and importing one may run it
        return collectors
    try:
        importlib.import_module(name)
    except ImportError as exc:
        package = _missing_optional(exc)
        if package is None:
            return collectors  # the doctest collector reports the error
        reason = f"examples not run: {name} needs {package}, which is not installed"
        return [MissingDependency.from_parent(parent, path=file_path, reason=reason)]
    return collectors


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except doctest.UnexpectedException as failure:
        package = _missing_optional(failure.exc_info[1])
        if package is None:
            raise
        pytest.skip(f"example not run: {item.name} needs {package}, which is not installed")
