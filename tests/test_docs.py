"""Every command output the README and docs/ show is what the command prints (``doc_outputs``), so
the documents cannot drift from the code; and the README stays a README."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_outputs import ROOT, Shown, documents, normalised, run, shown_outputs

SHOWN = [shown for page in documents() for shown in shown_outputs(page)]
README_MAX_LINES = 300


def _name(shown: Shown) -> str:
    return f"{shown.page.name}: {shown.command[:60]}"


def test_the_documents_show_outputs() -> None:
    assert len({shown.page for shown in SHOWN}) >= 2 and len(SHOWN) >= 4


@pytest.mark.parametrize("shown", SHOWN, ids=_name)
def test_a_shown_output_is_what_its_command_prints(shown: Shown) -> None:
    assert normalised(run(shown.command)) == normalised(shown.shown)


def test_a_changed_output_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- output: echo 'in 2.5 ms' && echo two -->\n```\nin 9 s\nthree\n```\n")
    (shown,) = shown_outputs(page)
    assert normalised(run(shown.command)) != normalised(shown.shown)
    assert normalised(run(shown.command)) == normalised("in 9 s\ntwo\n")


def test_the_readme_is_short_and_links_its_pages() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, f"the README does not link docs/{page.name}"


@pytest.mark.parametrize("page", documents(), ids=lambda page: page.name)
def test_relative_links_resolve(page: Path) -> None:
    import re

    for target in re.findall(r"\]\((?!https?:|#)([^)#\s]+)", page.read_text()):
        assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"
