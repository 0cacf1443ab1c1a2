"""MkDocs hook: the API reference of a lazily exporting package, from its own export table.

``dyntile`` and ``dyntile.planning`` load their public names on first use through
``lazy_exports(__name__, {module: (names, ...)}, ...)``, which static analysis cannot follow. A page
line ``<!-- exports: dyntile dyntile.planning -->`` (one package or several) becomes one
``::: module.name`` block per exported name, read from those dicts and grouped under a
heading per defining module, so the reference follows the code when a name moves.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- exports: ([\w. ]+) -->$", flags=re.M)


def exports(package: str) -> dict[str, str]:
    """Name -> module from the ``lazy_exports`` table of ``package``'s ``__init__.py`` (parsed)."""
    source = ROOT.joinpath(*package.split("."), "__init__.py")
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
            table = ast.literal_eval(node.args[1])
            return {name: module for module, names in table.items() for name in names}
    return {}


def defining_module(name: str, module: str) -> str:
    """The module that defines ``name``, following a package that itself exports it lazily."""
    while ROOT.joinpath(*module.split("."), "__init__.py").exists():
        inner = exports(module).get(name)
        if inner is None or inner == module:
            break
        module = inner
    return module


def on_page_markdown(markdown: str, **kwargs) -> str:
    def blocks(match: re.Match) -> str:
        groups: dict[str, list[str]] = {}  # defining module -> its names, in the tables' order
        for package in match.group(1).split():
            check(package)
            for name, module in exports(package).items():
                names = groups.setdefault(defining_module(name, module), [])
                if name not in names:
                    names.append(name)
        return "\n\n".join(
            f"## `{module}`\n\n"
            + "\n\n".join(f"::: {module}.{name}\n    options:\n      heading_level: 3" for name in names)
            for module, names in groups.items()
        )

    return MARKER.sub(blocks, markdown)


def check(package: str) -> None:
    if not exports(package):
        raise ValueError(f"{package}/__init__.py calls no lazy_exports: a page's exports marker names it")
