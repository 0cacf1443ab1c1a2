import re

import pytest

torch = pytest.importorskip("torch")


def parse_table(text: str) -> dict[str, dict[str, str]]:
    """The demo's table as {method label: {column: cell}}."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    headers = re.split(r"\s{2,}", lines[rule - 1].strip())
    rows = {}
    for line in lines[rule + 1 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = dict(zip(headers, cells))
    return rows


@pytest.fixture
def table():
    return parse_table
