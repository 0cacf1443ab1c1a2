"""Griffe extension: the ``>>>`` examples of a docstring render as Python console code.

dyntile's docstrings put their doctest next to the text they illustrate (not always in an
``Examples`` section), where Markdown would read ``>>>`` as a quote and ``x[0][1]`` as a
link. Each run of ``>>>``/``...`` lines and the output lines after it becomes a fenced
``pycon`` block; the docstrings themselves stay plain doctests.
"""

from __future__ import annotations

import re

import griffe

PROMPT = re.compile(r"^(\s*)(>>>|\.\.\.)( |$)")


def fence_doctests(text: str) -> str:
    """``text`` with each doctest run (prompts plus output, up to a blank line) fenced."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = PROMPT.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent = match.group(1)
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
