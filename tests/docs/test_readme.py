"""The Python examples of the README and of the docs pages (``docs/**/*.md``) run as written.

Every ```` ```python ```` block runs as a script (``__name__ == "__main__"``), in a fresh
namespace and a temporary directory; a block that must not run here (a shell command,
output, a script for ``torchrun`` alone) is fenced as ``bash`` or ``text``. A block
repeated word for word on several pages runs once. A block that starts
``# NAME.py: python NAME.py, or torchrun --nproc-per-node=N NAME.py`` is a training
recipe: it also runs under ``torchrun`` on N processes, and each run is recorded and
checked (every sample once per epoch plus the documented repeats, equal steps and one
shape per step on all ranks, a loss per step, epochs in new orders).
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)
RECIPE = re.compile(r"# (\w+\.py): python \1, or torchrun --nproc-per-node=(\d+) \1\n")


def _blocks() -> dict[str, str]:
    """``{"PAGE[python block i]": code}``, each distinct block once (its first place)."""
    blocks: dict[str, str] = {}
    for page in PAGES:
        for i, code in enumerate(FENCE.findall(page.read_text())):
            if code not in blocks.values():
                blocks[f"{page.relative_to(ROOT)}[python block {i}]"] = code
    return blocks


BLOCKS = _blocks()
RECIPES = {name: RECIPE.match(code) for name, code in BLOCKS.items() if RECIPE.match(code)}


def needs(block: str) -> None:
    """Skip when a package the block imports is absent (torch, the frameworks)."""
    for module in sorted(set(re.findall(r"^(?:from|import) (\w+)", block, flags=re.M))):
        pytest.importorskip(module)


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_example_runs(name, tmp_path, monkeypatch):
    needs(BLOCKS[name])
    monkeypatch.chdir(tmp_path)  # what a block writes (a trainer's output dir, shards, a plan)
    code = compile(BLOCKS[name], name, "exec")
    if name not in RECIPES:
        exec(code, {"__name__": "__main__"})
        return
    from framework_runs import check_run, one_thread, recording

    with recording() as events, one_thread():
        exec(code, {"__name__": "__main__"})
    check_run([events])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_runs_under_torchrun(name, tmp_path):
    needs(BLOCKS[name])
    from framework_runs import check_run, torchrun

    script_name, nproc = RECIPES[name].group(1), int(RECIPES[name].group(2))
    script = tmp_path / script_name
    script.write_text(BLOCKS[name])
    done, ranks = torchrun(script, tmp_path / "run", nproc=nproc)
    assert done.returncode == 0, done.stdout[-6000:]
    assert len(ranks) == nproc
    check_run(ranks)


def test_docs_have_the_framework_recipes():
    assert sorted(m.group(1) for m in RECIPES.values()) == [
        "train_ddp.py",
        "train_hf.py",
        "train_lightning.py",
    ]
    assert any("StatefulDataLoader" in block and "load_state_dict" in block for block in BLOCKS.values())


def test_code_is_fenced_as_python_bash_or_text():
    """A block fenced otherwise (a typo: ``pyhton``, ``py``) would silently run nothing."""
    for page in PAGES:
        fences = re.findall(r"^```(\S*)", page.read_text(), flags=re.M)
        odd = sorted({lang for lang in fences[::2] if lang not in ("python", "bash", "text", "")})
        assert not odd, f"{page.relative_to(ROOT)} has blocks fenced as {odd}: use python, bash or text"


def test_readme_examples_cover_the_main_uses():
    readme = "\n".join(FENCE.findall(README.read_text()))
    for name in (
        "pad_batch",
        "DynTileCollate",
        "PackingBatchSampler",
        "PackedCollate",
        "varlen_attention",
        "register_attention",
        "StreamingPacker",
    ):
        assert name in readme, f"the README has no example of {name}"


TOOLS = 'pip install torch==2.13.0 "setuptools>=70" wheel "Cython>=3.0" "numpy>=2.0"'


def test_readme_gives_the_two_setup_commands():
    text = README.read_text()
    assert f"{TOOLS} && pip install --no-build-isolation . && dyntile demo" in text
    assert f'{TOOLS} && pip install --no-build-isolation -e ".[test]" && python -m pytest' in text


def test_ci_installs_as_the_readme_says():
    """.ci/run builds with the README's tools and flag (so CI tests the native reader)."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q "setuptools>=70" wheel "Cython>=3.0" "numpy>=2.0"' in ci
    assert "pip install -q --no-build-isolation -e" in ci
    assert "\npython3 -m pytest\n" in ci  # the README's test command is the one CI runs
    assert "mkdocs build --strict" in ci


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[\s-]+", "-", text)


def test_readme_links_reach_the_docs():
    """The README is read on GitHub and PyPI, outside the strict docs build: its links to
    docs pages and their sections are checked here."""
    for target in re.findall(r"\]\(((?!https?:)[^)\s]+)\)", README.read_text()):
        path, _, anchor = target.partition("#")
        page = ROOT / path
        assert page.is_file(), f"README.md links to {target}, but {path} does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
            assert anchor in {slug(h) for h in headings}, f"README.md links to {target}: no such section"
