"""Every code block of README.md runs as written: each Python block pasted into a file of its own and run
with ``python file.py`` in a fresh process, and the command-line block in bash.

The blocks run as a reader runs them: in an empty folder, with ``$VCOLLECT_DATASETS_PATH`` and
``$MINARI_DATASETS_PATH`` set to folders of their own, the quick start first (the dataset and Minari
blocks read its dataset). The other blocks and the command-line block then run at once, in parallel
processes, each on its own copy of the quick start's datasets root.
"""

from __future__ import annotations

import re
import shutil
import sys
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
    start,
    start_python_block,
)
from vcollect.store import list_datasets, load_dataset

# every test reads the runs of all README blocks (each run twice), about 80 s of CPU together: on a loaded
# machine more than the suite's 300 s default per test, all of it in the one module fixture
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

README = (REPO / "README.md").read_text(encoding="utf-8")
PYTHON = blocks(README, "python")
NAMES = [f"{i}-{re.sub(r'[^a-z]+', '-', heading.lower()).strip('-')}" for i, (heading, _) in enumerate(PYTHON)]
CODE = {name: code for name, (_, code) in zip(NAMES, PYTHON)}
QUICK_START = NAMES[[heading for heading, _ in PYTHON].index("Quick start")]
(CLI_BLOCK,) = [code for heading, code in blocks(README, "bash") if heading == "Command line"]


def needs_missing_module(code: str) -> str | None:
    """The optional module a block needs that is not installed here, if any (ray for the distributed one)."""
    return missing_module(code)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every README block, run: the quick start first (beside the CLI block), then the other Python blocks."""
    base = tmp_path_factory.mktemp("readme")
    results: dict[str, Run] = {}
    cli = Run(base / "cli")
    cli.folder.mkdir()
    cli_process = start(["bash", "-e", "-c", CLI_BLOCK], cli.folder)
    quick = Run(base / QUICK_START)
    quick.folder.mkdir()
    results[QUICK_START] = finish(start_python_block(QUICK_START, CODE[QUICK_START], quick.folder), quick)
    processes = {}
    for name, code in CODE.items():
        if name == QUICK_START or needs_missing_module(code):
            continue
        run = Run(base / name)
        shutil.copytree(quick.folder, run.folder)  # the quick start's datasets root, a copy for each block
        processes[name] = (start_python_block(name, code, run.folder), run)
    for name, (process, run) in processes.items():
        results[name] = finish(process, run)
    # then each block again, in the folder of its first run: a reader re-runs a block after editing it
    again = {name: (start_python_block(name, CODE[name], run.folder), Run(run.folder)) for name, run in results.items()}
    for name, (process, run) in again.items():
        results[f"{name} again"] = finish(process, run)
    results["cli"] = finish(cli_process, cli)
    return results


def test_quick_start_runs_and_does_what_it_says(runs: dict[str, Run]) -> None:
    run = runs[QUICK_START]
    assert run.returncode == 0, run.stderr
    dataset = load_dataset("demo/cartpole-v0", root=run.datasets)
    assert dataset.total_episodes == 100
    assert " 100 episodes in " in run.stdout  # print(stats)
    assert f"Dataset('demo/cartpole-v0', episodes=100, steps={dataset.total_steps}) (256, 4)" in run.stdout


@pytest.mark.parametrize("name, code", [(n, c) for n, (_, c) in zip(NAMES, PYTHON) if n != QUICK_START],
                         ids=[n for n in NAMES if n != QUICK_START])
def test_python_block_runs_alone(name: str, code: str, runs: dict[str, Run]) -> None:
    missing = needs_missing_module(code)
    if missing:
        pytest.skip(f"block {name} needs {missing}, which is not installed here")
    run = runs[name]
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("name", NAMES)
def test_python_block_runs_again_where_it_ran(name: str, runs: dict[str, Run]) -> None:
    """A block re-run in the same folder still works: it overwrites or cleans up what it made."""
    if f"{name} again" not in runs:
        pytest.skip(f"block {name} needs {needs_missing_module(CODE[name])}, which is not installed here")
    run = runs[f"{name} again"]
    assert run.returncode == 0, run.stderr


def test_blocks_say_the_extra_they_need_in_their_first_lines() -> None:
    for name, code in CODE.items():
        for extra in imported_extras(code):
            assert declared_extra(code) in (extra, "tianshou" if extra == "torch" else extra), (name, extra)
    assert declared_extra(CODE[NAMES[[h for h, _ in PYTHON].index("Coming from Minari")]]) == "minari"  # parquet


@pytest.mark.parametrize("name", [name for name, code in CODE.items() if declared_extra(code)])
def test_block_without_its_extra_fails_in_one_line_naming_it(name: str, tmp_path: Path) -> None:
    extra = declared_extra(CODE[name])
    assert extra is not None
    run = run_hiding_extra(name, "python", CODE[name], tmp_path, extra)
    assert one_line_naming(run, extra), (run.returncode, run.stdout, run.stderr)


def test_blocks_that_use_the_subprocess_backend_have_the_main_guard() -> None:
    for name, (_, code) in zip(NAMES, PYTHON):
        if '"subproc"' in code:
            assert 'if __name__ == "__main__":' in code, name
    assert "starts its workers with forkserver, which re-imports the main module" in " ".join(README.split())


def test_every_block_imports_what_it_uses() -> None:
    """No block leans on an earlier one's imports (running each alone checks this too, where it runs)."""
    for name, (_, code) in zip(NAMES, PYTHON):
        for module, alias in (("vcollect", "vcollect"), ("gymnasium", "gym"), ("numpy", "np")):
            if re.search(rf"\b{alias}\.", code):
                assert re.search(rf"^import {module}\b", code, re.M), (name, module)


def test_blocks_that_read_the_quick_start_dataset_say_so() -> None:
    for name, (heading, code) in zip(NAMES, PYTHON):
        if name != QUICK_START and '"demo/cartpole-v0"' in code:
            assert heading in ("The dataset API", "Slices for sequence models", "Minari interop"), name
            assert f'"{heading}"' in README  # the sentence after the quick start names the section


def test_dataset_and_minari_blocks_made_their_datasets(runs: dict[str, Run]) -> None:
    by_heading = {heading: runs[name] for name, (heading, _) in zip(NAMES, PYTHON) if name in runs}
    assert sorted(list_datasets(by_heading["The dataset API"].datasets)) == ["demo/cartpole-v0"]  # deleted its own
    minari = by_heading["Minari interop"]
    assert sorted(list_datasets(minari.datasets)) == [
        "demo/cartpole-from-minari-v0", "demo/cartpole-recorded-v0", "demo/cartpole-v0"
    ]
    assert (minari.folder / "minari" / "vcollect" / "cartpole-random-v0" / "data" / "main_data.hdf5").is_file()


def test_cli_block_runs(runs: dict[str, Run]) -> None:
    run = runs["cli"]
    if not (Path(sys.executable).parent / "vcollect").exists():
        pytest.skip(f"no vcollect console script beside {sys.executable} (vcollect not pip-installed here)")
    assert run.returncode == 0, run.stderr
    datasets = list_datasets(run.datasets)
    assert sorted(datasets) == ["cartpole/random-v0", "cartpole/test-v0", "cartpole/train-v0"]
    assert datasets["cartpole/random-v0"]["total_episodes"] == 200
    assert (datasets["cartpole/train-v0"]["total_episodes"], datasets["cartpole/test-v0"]["total_episodes"]) == (160, 40)
    assert (run.folder / "cartpole.png").stat().st_size > 0
    assert (run.folder / "minari" / "vcollect" / "cartpole-cli-v0" / "data" / "main_data.hdf5").is_file()
    assert "Collector (subproc)" in run.stdout and "raw" in run.stdout
