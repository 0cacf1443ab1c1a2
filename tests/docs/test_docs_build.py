"""The docs site's strict build fails on a broken reference (CI builds the real site with
``mkdocs build --strict``; here, pages of one line under the real ``mkdocs.yml``)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def build(tmp_path: Path, page: str) -> None:
    """Build one page ``index.md`` holding ``page`` with the project's mkdocs.yml, strictly."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# A page\n\n## A section\n\n{page}\n")
    config = load_config(
        str(ROOT / "mkdocs.yml"), docs_dir=str(docs), site_dir=str(tmp_path / "site"), nav=["index.md"]
    )
    config["strict"] = True
    mkdocs_build(config)


def test_a_page_with_sound_links_builds(tmp_path):
    build(
        tmp_path,
        "[the section](#a-section), [`pad_to`][dyntile.padding.pad_to]\n\n::: dyntile.padding.pad_to",
    )


@pytest.mark.parametrize(
    "broken",
    [
        "[a page](missing.md)",
        "[a section](#no-such-section)",
        "[an API name][dyntile.no_such_function]",
        "::: dyntile.no_such_function",
    ],
)
def test_a_broken_reference_fails_the_build(tmp_path, broken):
    from mkdocs.exceptions import Abort, PluginError

    with pytest.raises((Abort, PluginError)):
        build(tmp_path, broken)
