"""The package's layers: ``loaders`` builds on ``dyntile``, never the other way round.

* ``import dyntile`` (and the ``dyntile`` command's parser, and ``dyntile plan``)
  imports neither torch nor ``loaders``;
* in ``dyntile``, only the demo's training modules (``dyntile/cli/methods.py``, the
  batching methods, and ``dyntile/cli/demo_llama.py``, the Hugging Face table: torch-facing
  commands that train through both layers) import ``loaders``, inside the functions that
  use it, by the public names of a ``loaders`` module (its ``__all__``);
* ``loaders`` and the CLI import from a ``dyntile`` module only the names it shares
  (its ``__all__``; a compiled kernel module, which has none, by names without a
  leading underscore), never a private helper;
* the native bridge to torch (``dyntile.cpu._torch_tensors``) is imported by
  ``dyntile/tensor_reader.py`` alone, which loads it under its torch version only.
"""

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def _imports(path: Path):
    """``(node, module, names, at_top)`` for every ``import``/``from ... import`` of a file
    (``at_top``: run when the module is imported, not inside a function)."""
    tree = ast.parse(path.read_text(), str(path))
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(n) for n in ast.walk(fn) if n is not fn)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, node.module, [a.name for a in node.names], id(node) not in inside
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name, [], id(node) not in inside


def _files(package: str):
    return sorted((ROOT / package).rglob("*.py"))


def test_import_dyntile_imports_neither_torch_nor_loaders():
    code = (
        "import sys, dyntile, dyntile.planning.packing, dyntile.planning.packing_cost, dyntile.cli.main\n"
        "dyntile.cli.main.build_parser()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'loaders'}))"
    )
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr


def test_dyntile_plan_runs_without_torch_and_loaders(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("\n".join(str(n) for n in [5, 17, 3, 40, 9, 22] * 20))
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['loaders'] = None\n"
        "from dyntile.cli.main import main\n"
        f"raise SystemExit(main(['plan', {str(lengths)!r}, '--buckets', '2', '--batch-tokens', '256']))"
    )
    r = _run(code)
    assert r.returncode == 0 and "packing:" in r.stdout, r.stderr


DEMO_TRAINING = {ROOT / "dyntile" / "cli" / "methods.py", ROOT / "dyntile" / "cli" / "demo_llama.py"}


def test_only_the_demo_training_imports_loaders_lazily_by_public_names():
    found = []
    for path in _files("dyntile"):
        for node, module, names, at_top in _imports(path):
            if module.split(".")[0] != "loaders":
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            found.append(where)
            assert path in DEMO_TRAINING, f"{where} imports loaders"
            assert not at_top, f"{where} imports loaders when the module is imported"
            assert not any(part.startswith("_") for part in module.split(".")), f"{where}: private {module}"
            public = set(importlib.import_module(module).__all__)
            assert set(names) <= public, f"{where}: {module} {names}"
    assert found, "the demo's training no longer imports loaders: update this test"


def _shared_names(module: types.ModuleType) -> set[str] | None:
    return set(module.__all__) if hasattr(module, "__all__") else None


@pytest.mark.parametrize("package", ["loaders", "dyntile/cli"])
def test_loaders_and_the_cli_reach_dyntile_by_shared_names(package):
    pytest.importorskip("torch")  # loaders' modules import it
    bad = []
    for path in _files(package):
        for node, module, names, _ in _imports(path):
            top = module.split(".")
            if top[0] != "dyntile" or module.startswith("dyntile.cli"):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if any(part.startswith("_") for part in top):
                bad.append(f"{where}: private module {module}")
                continue
            mod = importlib.import_module(module)
            shared = _shared_names(mod)
            for name in names:
                if isinstance(getattr(mod, name, None), types.ModuleType) and not name.startswith("_"):
                    continue  # a submodule: its own names are checked where they are used
                if name.startswith("__") and name.endswith("__"):
                    continue  # __version__ and the like
                if name.startswith("_") or (shared is not None and name not in shared):
                    bad.append(f"{where}: {module}.{name} is not in {module}.__all__")
    assert not bad, "\n".join(bad)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_of_dyntile_planning_imports_one_that_imports_it_back():
    """The planning modules form no import circle (``packing`` and ``packing_cost`` share
    their helpers through ``packing_checks`` and ``packed_shapes``), at any depth and
    whether the import runs at load time or inside a function."""
    graph = {}
    for path in _files("dyntile/planning"):
        name = _module_name(path)
        graph[name] = {module for _, module, _, _ in _imports(path) if module.startswith("dyntile.planning.")}
    assert "dyntile.planning.packing_cost" in graph["dyntile.planning.packing"]  # the check sees edges

    def reaches(start: str, goal: str, seen: set) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    circles = sorted(name for name in graph if reaches(name, name, set()))
    assert circles == [], f"these planning modules import themselves back: {circles}"


BRIDGE = "dyntile.cpu._torch_tensors"


def test_the_native_bridge_is_imported_by_the_tensor_reader_alone():
    parent, name = BRIDGE.rsplit(".", 1)
    importers = set()
    for package in ("dyntile", "loaders", "asv_benches"):
        for path in _files(package):
            for _, module, names, _ in _imports(path):
                if module == BRIDGE or (module == parent and name in names):
                    importers.add(path.relative_to(ROOT).as_posix())
    assert importers == {"dyntile/tensor_reader.py"}
