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


def test_readme_gives_the_two_setup_commands():
    text = README.read_text()
    assert "pip install torch==2.13.0 && pip install . && dyntile demo" in text
    assert 'pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest' in text
