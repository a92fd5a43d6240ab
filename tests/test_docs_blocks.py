"""Every code block written on a page of the documentation site (docs/*.md) runs as written, twice.

Each Python block is pasted into a file of its own and run with ``python file.py`` in a fresh process, each
shell block with ``bash -e``, as README.md's blocks are (tests/doc_blocks.py runs both): a page's blocks in
order, in one empty folder with datasets roots of its own, as a reader goes down the page; then the page's
blocks again in the same folder, since a reader re-runs a block after changing it. The README sections a page
includes (``--8<-- "README.md:..."``) are README's blocks, run by tests/test_readme.py, not here.
A block that needs an extra says so in its first lines and, with the extra hidden, fails in one line naming it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.doc_blocks import (
    REPO,
    Run,
    blocks,
    declared_extra,
    finish,
    imported_extras,
    missing_module,
    one_line_naming,
    run_hiding_extra,
    start_block,
)

DOCS = REPO / "docs"
LANGUAGES = ("python", "bash")
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))


def page_blocks(page: str) -> list[tuple[str, str, str]]:
    """(name, language, code) of every block of ``page`` that runs, in page order."""
    text = (DOCS / page).read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```(?P<lang>\w+)\n(?P<code>.*?)^```$", text, re.M | re.S):
        if match.group("lang") in LANGUAGES:
            found.append((match.group("lang"), match.group("code")))
    stem = re.sub(r"[^a-z]+", "-", page.removesuffix(".md").lower()).strip("-")
    return [(f"{stem}-{i}", lang, code) for i, (lang, code) in enumerate(found)]


RUNNABLE = {page: page_blocks(page) for page in PAGES if page_blocks(page)}
BLOCKS = [(page, name, lang, code) for page, found in RUNNABLE.items() for name, lang, code in found]


def test_the_pages_have_blocks_and_the_parser_finds_them() -> None:
    assert {"getting-started.md", "stories/online-to-offline.md", "stories/rollout-and-evaluation.md",
            "stories/real-workloads.md"} <= set(PAGES)
    assert len(BLOCKS) >= 3
    assert blocks("## A\n```python\nx = 1\n```\n", "python") == [("A", "x = 1\n")]  # the README's reader agrees


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every page's blocks, run in order in a folder of the page's own, then again; pages side by side."""
    base = tmp_path_factory.mktemp("docs")
    results: dict[str, Run] = {}
    for attempt in ("", " again"):
        processes = {}
        for page, found in RUNNABLE.items():
            folder = base / re.sub(r"[^a-z]+", "-", page.lower())
            folder.mkdir(exist_ok=True)
            runnable = [(name, lang, code) for name, lang, code in found if not missing_module(code)]
            processes[page] = (folder, runnable)
        for _page, (folder, runnable) in processes.items():  # a page's blocks in order, one at a time
            for name, lang, code in runnable:
                results[f"{name}{attempt}"] = finish(start_block(name, lang, code, folder), Run(folder))
    return results


@pytest.mark.parametrize("page, name, lang, code", BLOCKS, ids=[name for _, name, _, _ in BLOCKS])
def test_block_runs_and_runs_again(page: str, name: str, lang: str, code: str, runs: dict[str, Run]) -> None:
    missing = missing_module(code)
    if missing:
        pytest.skip(f"{page}'s block {name} needs {missing}, which is not installed here")
    for key in (name, f"{name} again"):
        assert runs[key].returncode == 0, (key, runs[key].stderr)


@pytest.mark.parametrize("page, name, lang, code", BLOCKS, ids=[name for _, name, _, _ in BLOCKS])
def test_block_says_the_extra_it_needs(page: str, name: str, lang: str, code: str) -> None:
    for extra in imported_extras(code):
        assert declared_extra(code) == extra, (page, name, extra)


EXTRA_BLOCKS = [(page, name, lang, code) for page, name, lang, code in BLOCKS if declared_extra(code)]


@pytest.mark.parametrize("page, name, lang, code", EXTRA_BLOCKS, ids=[name for _, name, _, _ in EXTRA_BLOCKS])
def test_block_without_its_extra_fails_in_one_line_naming_it(page: str, name: str, lang: str, code: str,
                                                            tmp_path: Path) -> None:
    extra = declared_extra(code)
    assert extra is not None
    run = run_hiding_extra(name, lang, code, tmp_path, extra)
    assert one_line_naming(run, extra), (run.returncode, run.stdout, run.stderr)
