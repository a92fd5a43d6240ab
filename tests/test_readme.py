"""Every code snippet of README.md runs: the quick start, the other Python blocks, and the CLI block."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
# Modules a snippet may need that are optional extras (the snippet is skipped, saying so, without them).
OPTIONAL = ("vcollect.async_collector", "vcollect.distributed", "minari", "ray")


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
QUICK_START = next(code for heading, code in PYTHON if heading == "Quick start")


def run_snippet(code: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Execute a README block as a reader would after the quick start (vcollect imported), in ``root``."""
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(root / "datasets"))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root / "minari"))
    monkeypatch.chdir(root)
    namespace: dict = {"__name__": "readme_snippet"}
    exec(compile("import vcollect\n" + code, "README.md", "exec"), namespace)
    return namespace


def test_quick_start_runs_and_does_what_it_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace = run_snippet(QUICK_START, tmp_path, monkeypatch)
    stats, dataset, batch = namespace["stats"], namespace["dataset"], namespace["batch"]
    assert stats.n_collected_episodes == 100
    assert dataset.total_episodes == 100 and dataset.total_steps == stats.n_collected_steps
    assert (tmp_path / "datasets" / "demo" / "cartpole-v0" / "dataset.json").is_file()
    assert batch["observations"].shape == (256, 4) and batch["actions"].shape == (256,)


@pytest.fixture(scope="module")
def after_quick_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose datasets root holds what the quick start made (later sections use it)."""
    root = tmp_path_factory.mktemp("readme")
    with pytest.MonkeyPatch.context() as monkeypatch:
        run_snippet(QUICK_START, root, monkeypatch)
    return root


@pytest.mark.parametrize(
    "heading, code", [block for block in PYTHON if block[1] != QUICK_START],
    ids=[f"{heading}-{i}" for i, (heading, code) in enumerate(PYTHON) if code != QUICK_START],
)
def test_python_snippet_runs(
    heading: str, code: str, after_quick_start: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    for module in OPTIONAL:
        if re.search(rf"\b(import|from) {re.escape(module)}\b", code) and importlib.util.find_spec(module) is None:
            pytest.skip(f"the {heading!r} snippet needs {module}, which is not installed here")
    if "vcollect.distributed" in code:
        request.getfixturevalue("ray_local")  # the session's local Ray (the snippet would start one)
    run_snippet(code, after_quick_start, monkeypatch)


def test_cli_block_runs(tmp_path: Path) -> None:
    (cli_block,) = [code for heading, code in blocks("bash") if heading == "Command line"]
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "vcollect").exists():
        pytest.skip(f"no vcollect console script in {bin_dir} (vcollect not pip-installed here)")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VCOLLECT_DATASETS_PATH": str(tmp_path / "datasets"),
        "MINARI_DATASETS_PATH": str(tmp_path / "minari"),
    }
    result = subprocess.run(["bash", "-e", "-c", cli_block], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    from vcollect.store import list_datasets

    datasets = list_datasets(tmp_path / "datasets")
    assert sorted(datasets) == ["cartpole/random-v0", "cartpole/test-v0", "cartpole/train-v0"]
    assert datasets["cartpole/random-v0"]["total_episodes"] == 200
    assert (datasets["cartpole/train-v0"]["total_episodes"], datasets["cartpole/test-v0"]["total_episodes"]) == (160, 40)
    assert (tmp_path / "cartpole.png").stat().st_size > 0
    assert (tmp_path / "minari" / "vcollect" / "cartpole-cli-v0" / "data" / "main_data.hdf5").is_file()
    assert "Collector (subproc)" in result.stdout and "raw" in result.stdout
