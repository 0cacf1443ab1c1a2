"""The README's Python examples run as they are written."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_example_runs(i, capsys):
    if "torch" in BLOCKS[i]:
        pytest.importorskip("torch")
    exec(compile(BLOCKS[i], f"README.md[python block {i}]", "exec"), {"__name__": "readme"})


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
