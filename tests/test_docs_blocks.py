"""Every code block of the documentation (README.md's Python blocks, every block of every page under docs/)
runs as written, twice.

Each Python block is pasted into a file of its own and run as ``python file.py`` runs it, in a process of its
own (forked from a server that has imported vcollect), each shell block with ``bash -e`` (tests/doc_blocks.py
runs both), as a reader runs them: a page's blocks in
order, in one empty folder with datasets roots of its own, as a reader goes down the page; then the page's
blocks again in the same folder, since a reader re-runs a block after changing it (a block whose page
folder holds the same files before its second run as before its first, none of them written or removed
in between, would run again on exactly what it ran on first: its first run stands for its second, so the
Tianshou page's blocks, which write nothing, run once). README's quick start
runs first; a page that says its blocks read the quick start's dataset starts from a copy of the quick
start's folder (its datasets root), as a reader who ran the quick start first. The pages then run side by
side, each page's blocks one at a time. The README sections a page includes (``--8<-- "README.md:..."``:
the intro, install and quick start) are README's blocks, run here once as README's.
A block that needs an extra says so in its first lines and, with the extra hidden, fails in one line naming it.
"""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

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
from vcollect.store import list_datasets, load_dataset

# the fixture runs every block twice (about two minutes of CPU together, Ray's and Tianshou's blocks the most): on a
# loaded machine more than the suite's 300 s default per test, all of it in the one module fixture
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DOCS = REPO / "docs"
README = "README.md"
# README's shell blocks are the install commands (a virtual environment, pip): shown, not run
LANGUAGES = {README: ("python",)}
DEFAULT_LANGUAGES = ("python", "bash")
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
SOURCES = {README: REPO / README, **{page: DOCS / page for page in PAGES}}
TEXT = {page: path.read_text(encoding="utf-8") for page, path in SOURCES.items()}
# How a page says that its blocks read the quick start's dataset (and that a reader runs the quick start first)
READS_QUICK_START = re.compile(r"reads?\s+the\s+quick\s+start's\s+dataset\s+`demo/cartpole-v0`:\s+run\s+the\s+\[quick\s+start\]")
QUICK_START_DATASET = '"demo/cartpole-v0"'


class Block(NamedTuple):
    """One runnable block: its test name, the ``## `` heading above it, its language and its code."""

    name: str
    heading: str
    lang: str
    code: str


def page_blocks(page: str) -> list[Block]:
    """Every block of ``page`` that runs, in page order."""
    languages = LANGUAGES.get(page, DEFAULT_LANGUAGES)
    found = []
    heading = ""
    pattern = r"^## (?P<heading>[^\n]+)$|^```(?P<lang>\w+)\n(?P<code>.*?)^```$"
    for match in re.finditer(pattern, TEXT[page], re.M | re.S):
        if match.group("heading"):
            heading = match.group("heading").strip()
        elif match.group("lang") in languages:
            found.append((heading, match.group("lang"), match.group("code")))
    stem = re.sub(r"[^a-z]+", "-", page.removesuffix(".md").lower()).strip("-")
    return [Block(f"{stem}-{i}", heading, lang, code) for i, (heading, lang, code) in enumerate(found)]


def reads_quick_start(page: str) -> bool:
    """Whether ``page`` says its blocks read the quick start's dataset (README is where that dataset is made)."""
    return page != README and bool(READS_QUICK_START.search(TEXT[page]))


RUNNABLE = {page: page_blocks(page) for page in SOURCES if page_blocks(page)}
BLOCKS = [(page, block) for page, found in RUNNABLE.items() for block in found]
IDS = [block.name for _, block in BLOCKS]
PYTHON = [(page, block) for page, block in BLOCKS if block.lang == "python"]
(QUICK_START,) = [block for block in RUNNABLE[README] if block.heading == "Quick start"]


def the_block(page: str, heading: str, lang: str = "python") -> Block:
    """The first block of ``page`` under ``## heading`` in ``lang``."""
    return [b for b in RUNNABLE[page] if b.heading == heading and b.lang == lang][0]


def test_the_pages_have_blocks_and_the_parser_finds_them() -> None:
    assert {"getting-started.md", "stories/online-to-offline.md", "stories/rollout-and-evaluation.md",
            "stories/real-workloads.md", "cli.md"} <= set(PAGES)
    assert len(BLOCKS) >= 15
    assert {README, "cli.md", "stories/online-to-offline.md", "stories/datasets-and-minari.md",
            "stories/coming-from-tianshou.md", "stories/distributed-collection.md"} <= set(RUNNABLE)
    assert blocks("## A\n```python\nx = 1\n```\n", "python") == [("A", "x = 1\n")]  # the shared reader agrees
    assert [b.lang for b in RUNNABLE[README]] == ["python"]  # the install commands are not run


# A block's file in its page's folder, by language (tests/doc_blocks.py writes it there)
SUFFIX = {"python": ".py", "bash": ".sh"}
# What a page's folder holds: each file's path in it, size and modification time (ns)
FolderState = frozenset[tuple[str, int, int]]


def folder_state(folder: Path, scripts: set[str]) -> FolderState:
    """Every file under ``folder`` but the page's own block files, with its size and modification time."""
    files = (path for path in folder.rglob("*") if path.relative_to(folder).as_posix() not in scripts)
    return frozenset((path.relative_to(folder).as_posix(), stat.st_size, stat.st_mtime_ns)
                     for path in files if not path.is_dir() for stat in (path.stat(),))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every block run: README's quick start first, then every page's blocks in order and again, pages side
    by side (README's quick start again among them)."""
    base = tmp_path_factory.mktemp("docs")
    results: dict[str, Run] = {}
    folders = {page: base / re.sub(r"[^a-z]+", "-", page.lower()) for page in RUNNABLE}
    runnable = {page: [b for b in found if not missing_module(b.code)] for page, found in RUNNABLE.items()}
    scripts = {page: {f"{block.name}{SUFFIX[block.lang]}" for block in found} for page, found in runnable.items()}
    before: dict[str, FolderState] = {}  # each block's folder before its first run
    folders[README].mkdir()
    for block in runnable[README]:
        before[block.name] = folder_state(folders[README], scripts[README])
        results[block.name] = finish(start_block(block.name, block.lang, block.code, folders[README]),
                                     Run(folders[README]))
    for page, folder in folders.items():
        if reads_quick_start(page):
            shutil.copytree(folders[README], folder)  # the quick start's datasets root, a copy for each page
        else:
            folder.mkdir(exist_ok=True)

    def run_page(page: str) -> None:
        """The page's blocks in order, one at a time, then again (README's only again: they ran first); a
        block whose folder is as it was before its first run runs once (see the module's docstring)."""
        for attempt in ((" again",) if page == README else ("", " again")):
            for block in runnable[page]:
                state = folder_state(folders[page], scripts[page])
                if not attempt:
                    before[block.name] = state
                elif before[block.name] == state:  # nothing to run on that its first run did not
                    results[f"{block.name}{attempt}"] = results[block.name]
                    continue
                process = start_block(block.name, block.lang, block.code, folders[page])
                results[f"{block.name}{attempt}"] = finish(process, Run(folders[page]))

    with ThreadPoolExecutor(max_workers=len(RUNNABLE)) as pool:
        list(pool.map(run_page, RUNNABLE))
    return results


@pytest.mark.parametrize("page, block", BLOCKS, ids=IDS)
def test_block_runs_and_runs_again(page: str, block: Block, runs: dict[str, Run]) -> None:
    missing = missing_module(block.code)
    if missing:
        pytest.skip(f"{page}'s block {block.name} needs {missing}, which is not installed here")
    for key in (block.name, f"{block.name} again"):
        assert runs[key].returncode == 0, (key, runs[key].stderr)


@pytest.mark.parametrize("page, block", BLOCKS, ids=IDS)
def test_block_says_the_extra_it_needs(page: str, block: Block) -> None:
    for extra in imported_extras(block.code):  # the tianshou extra installs torch
        assert declared_extra(block.code) in (extra, "tianshou" if extra == "torch" else extra), (page, extra)


def test_the_coming_from_minari_block_says_it_needs_minari_for_parquet() -> None:
    assert declared_extra(the_block("stories/datasets-and-minari.md", "Coming from Minari").code) == "minari"


EXTRA_BLOCKS = [(page, block) for page, block in BLOCKS if declared_extra(block.code)]


@pytest.mark.parametrize("page, block", EXTRA_BLOCKS, ids=[block.name for _, block in EXTRA_BLOCKS])
def test_block_without_its_extra_fails_in_one_line_naming_it(page: str, block: Block, tmp_path: Path) -> None:
    extra = declared_extra(block.code)
    assert extra is not None
    run = run_hiding_extra(block.name, block.lang, block.code, tmp_path, extra)
    assert one_line_naming(run, extra), (run.returncode, run.stdout, run.stderr)


def test_blocks_that_use_the_subprocess_backend_have_the_main_guard() -> None:
    for page, block in PYTHON:
        if '"subproc"' in block.code:
            assert 'if __name__ == "__main__":' in block.code, (page, block.name)


def test_every_block_imports_what_it_uses() -> None:
    """No block leans on an earlier one's imports (running each alone checks this too, where it runs)."""
    for page, block in PYTHON:
        body = re.sub(r"^\s*(import|from) .*$", "", block.code, flags=re.M)  # `from vcollect.x import` uses none
        for module, alias in (("vcollect", "vcollect"), ("gymnasium", "gym"), ("numpy", "np")):
            if re.search(rf"\b{alias}\.", body):
                assert re.search(rf"^import {module}\b", block.code, re.M), (page, block.name, module)


def test_blocks_that_read_the_quick_start_dataset_say_so() -> None:
    readers = {page for page, block in PYTHON if page != README and QUICK_START_DATASET in block.code}
    assert readers == {"stories/online-to-offline.md", "stories/datasets-and-minari.md"}
    for page in readers:
        assert reads_quick_start(page), page
        said = READS_QUICK_START.search(TEXT[page])
        first_reader = min(TEXT[page].index(block.code) for p, block in PYTHON
                           if p == page and QUICK_START_DATASET in block.code)
        assert said is not None and said.start() < first_reader, page  # said before the first block reading it
        assert "(../getting-started.md#quick-start)" in TEXT[page][said.start():said.end() + 40], page


def test_quick_start_runs_and_does_what_it_says(runs: dict[str, Run]) -> None:
    run = runs[QUICK_START.name]
    assert run.returncode == 0, run.stderr
    assert runs[f"{QUICK_START.name} again"] is not run  # it wrote its dataset: it ran a second time
    dataset = load_dataset("demo/cartpole-v0", root=run.datasets)
    assert dataset.total_episodes == 100
    assert " 100 episodes in " in run.stdout  # print(stats)
    assert f"Dataset('demo/cartpole-v0', episodes=100, steps={dataset.total_steps}) (256, 4)" in run.stdout


def test_dataset_and_minari_blocks_made_their_datasets(runs: dict[str, Run]) -> None:
    dataset_api = runs[the_block("stories/online-to-offline.md", "The dataset API").name]
    assert dataset_api.returncode == 0, dataset_api.stderr
    made = list_datasets(dataset_api.datasets)
    assert "demo/cartpole-v0" in made and "demo/cartpole-shuffled-v0" not in made  # it deleted its own
    minari_block = the_block("stories/datasets-and-minari.md", "Minari interop")
    if missing_module(minari_block.code):
        pytest.skip(f"the Minari interop block needs {missing_module(minari_block.code)}")
    minari = runs[minari_block.name]
    assert minari.returncode == 0, minari.stderr
    assert sorted(list_datasets(minari.datasets)) == [
        "demo/cartpole-from-minari-v0", "demo/cartpole-recorded-v0", "demo/cartpole-v0"
    ]  # the Coming from Minari block beside it deleted its own
    assert (minari.folder / "minari" / "vcollect" / "cartpole-random-v0" / "data" / "main_data.hdf5").is_file()


def test_cli_block_runs(runs: dict[str, Run]) -> None:
    run = runs[the_block("cli.md", "", "bash").name]  # its `vcollect` is python -m vcollect (doc_blocks.py)
    assert run.returncode == 0, run.stderr
    datasets = list_datasets(run.datasets)
    assert sorted(datasets) == ["cartpole/random-v0", "cartpole/test-v0", "cartpole/train-v0"]
    assert datasets["cartpole/random-v0"]["total_episodes"] == 200
    assert (datasets["cartpole/train-v0"]["total_episodes"], datasets["cartpole/test-v0"]["total_episodes"]) == (160, 40)
    assert (run.folder / "cartpole.png").stat().st_size > 0
    assert (run.folder / "minari" / "vcollect" / "cartpole-cli-v0" / "data" / "main_data.hdf5").is_file()
    assert "Collector (subproc)" in run.stdout and "raw" in run.stdout


def test_a_shell_blocks_vcollect_says_what_the_command_says_and_ends_as_it_ends(tmp_path: Path) -> None:
    """The shell blocks' `vcollect` (the command forked from the tests' server) gives the block the command's
    own stdout, stderr and exit status, so a failing command fails its block as the installed one would."""
    code = ("vcollect --version\n"
            "vcollect show no/such-v0 || echo \"exit status $?\"\n"
            "vcollect list | head -1 >/dev/null\n"
            "vcollect show no/such-v0\n"
            "echo never\n")
    run = finish(start_block("shim", "bash", code, tmp_path), Run(tmp_path))
    assert run.returncode == 2, (run.stdout, run.stderr)  # `bash -e` ends with the failing command's status
    lines = run.stdout.splitlines()
    assert lines[0].startswith("vcollect ") and lines[1] == "exit status 2" and "never" not in run.stdout
    assert run.stderr.count("vcollect show: error: no dataset 'no/such-v0'") == 2, run.stderr
