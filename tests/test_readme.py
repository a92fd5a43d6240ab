"""Every code block of README.md runs as written: each Python block pasted into a file of its own and run
with ``python file.py`` in a fresh process, and the command-line block in bash.

The blocks run as a reader runs them: in an empty folder, with ``$VCOLLECT_DATASETS_PATH`` and
``$MINARI_DATASETS_PATH`` set to folders of their own, the quick start first (the dataset and Minari
blocks read its dataset). The other blocks and the command-line block then run at once, in parallel
processes, each on its own copy of the quick start's datasets root.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from vcollect.store import list_datasets, load_dataset

pytestmark = pytest.mark.slow  # every test reads the runs of all README blocks, about 70 s of CPU together

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
TIMEOUT = 240  # seconds per block; all of them together take about 15 s on 2 cores
# Read by Ray when a block starts it: a local instance of the block's own (not one this test session or
# anything else on the machine runs), no usage-stats prompt or upload, no import warning.
RAY_ENV = {"RAY_ADDRESS": "local", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_DISABLE_IMPORT_WARNING": "1"}


def blocks(language: str) -> list[tuple[str, str]]:
    """(section heading, code) of every fenced block in ``language``, in README order."""
    found: list[tuple[str, str]] = []
    heading = ""
    for match in re.finditer(r"^## (?P<heading>[^\n]+)$|^```(?P<lang>\w+)\n(?P<code>.*?)^```$", README, re.M | re.S):
        if match.group("heading"):
            heading = match.group("heading").strip()
        elif match.group("lang") == language:
            found.append((heading, match.group("code")))
    return found


PYTHON = blocks("python")
NAMES = [f"{i}-{re.sub(r'[^a-z]+', '-', heading.lower()).strip('-')}" for i, (heading, _) in enumerate(PYTHON)]
CODE = {name: code for name, (_, code) in zip(NAMES, PYTHON)}
QUICK_START = NAMES[[heading for heading, _ in PYTHON].index("Quick start")]
(CLI_BLOCK,) = [code for heading, code in blocks("bash") if heading == "Command line"]


def needs_missing_module(code: str) -> str | None:
    """The optional module a block imports that is not installed here, if any (ray for the distributed one)."""
    for module, package in (("vcollect.distributed", "ray"), ("minari", "minari"), ("ray", "ray")):
        if re.search(rf"^\s*(import|from) {re.escape(module)}\b", code, re.M) and importlib.util.find_spec(package) is None:
            return package
    return None


@dataclass
class Run:
    """One block run: where it ran and how it ended."""

    folder: Path
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""

    @property
    def datasets(self) -> Path:
        return self.folder / "datasets"


def environment(folder: Path) -> dict[str, str]:
    """A reader's environment for a block run in ``folder``: this checkout's vcollect, roots of its own."""
    bin_dir = str(Path(sys.executable).parent)  # the `vcollect` command of this environment, for the CLI block
    return {
        **os.environ,
        **RAY_ENV,
        "PYTHONPATH": str(REPO),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VCOLLECT_DATASETS_PATH": str(folder / "datasets"),
        "MINARI_DATASETS_PATH": str(folder / "minari"),
    }


def start(command: list[str], folder: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(command, cwd=folder, env=environment(folder), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def finish(process: subprocess.Popen[str], run: Run) -> Run:
    try:
        run.stdout, run.stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        run.stdout, run.stderr = process.communicate()
    run.returncode = process.returncode
    return run


def start_python_block(name: str, code: str, folder: Path) -> subprocess.Popen[str]:
    """Write the block to ``folder/<name>.py`` and run it as ``python <name>.py`` in ``folder``."""
    script = folder / f"{name}.py"
    script.write_text(code, encoding="utf-8")
    return start([sys.executable, script.name], folder)


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
