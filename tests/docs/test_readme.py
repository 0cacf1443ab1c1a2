"""The README's Python examples run as they are written.

A block that starts ``# NAME.py: python NAME.py, or torchrun --nproc-per-node=N NAME.py``
is a training recipe: it also runs under ``torchrun`` on N processes, and each run is
recorded and checked (every sample once per epoch plus the documented repeats, equal
steps and one shape per step on all ranks, a loss per step, epochs in new orders).
"""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
RECIPE = re.compile(r"# (\w+\.py): python \1, or torchrun --nproc-per-node=(\d+) \1\n")
RECIPES = {i: RECIPE.match(block) for i, block in enumerate(BLOCKS) if RECIPE.match(block)}


def needs(block: str) -> None:
    """Skip when a package the block imports is absent (torch, the frameworks)."""
    for module in sorted(set(re.findall(r"^(?:from|import) (\w+)", block, flags=re.M))):
        pytest.importorskip(module)


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_example_runs(i, tmp_path, monkeypatch):
    needs(BLOCKS[i])
    monkeypatch.chdir(tmp_path)  # what a recipe writes (a trainer's output dir)
    code = compile(BLOCKS[i], f"README.md[python block {i}]", "exec")
    if i not in RECIPES:
        exec(code, {"__name__": "readme"})
        return
    from framework_runs import check_run, one_thread, recording

    with recording() as events, one_thread():
        exec(code, {"__name__": "readme"})
    check_run([events])


@pytest.mark.slow
@pytest.mark.parametrize("i", sorted(RECIPES))
def test_readme_recipe_runs_under_torchrun(i, tmp_path):
    needs(BLOCKS[i])
    from framework_runs import check_run, torchrun

    name, nproc = RECIPES[i].group(1), int(RECIPES[i].group(2))
    script = tmp_path / name
    script.write_text(BLOCKS[i])
    done, ranks = torchrun(script, tmp_path / "run", nproc=nproc)
    assert done.returncode == 0, done.stdout[-6000:]
    assert len(ranks) == nproc
    check_run(ranks)


def test_readme_has_the_framework_recipes():
    assert sorted(m.group(1) for m in RECIPES.values()) == [
        "train_ddp.py",
        "train_hf.py",
        "train_lightning.py",
    ]
    assert any("StatefulDataLoader" in block and "load_state_dict" in block for block in BLOCKS)


TOOLS = 'pip install torch==2.13.0 "setuptools>=70" wheel "Cython>=3.0" "numpy>=2.0"'


def test_readme_gives_the_two_setup_commands():
    text = README.read_text()
    assert f"{TOOLS} && pip install --no-build-isolation . && dyntile demo" in text
    assert f'{TOOLS} && pip install --no-build-isolation -e ".[test]" && python -m pytest' in text


def test_ci_installs_as_the_readme_says():
    """.ci/run builds with the README's tools and flag (so CI tests the native reader)."""
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -q "setuptools>=70" wheel "Cython>=3.0" "numpy>=2.0"' in ci
    assert "pip install -q --no-build-isolation -e" in ci
