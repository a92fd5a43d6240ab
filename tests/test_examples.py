"""Every script in examples/ runs with small sizes and does what its user story says."""

from __future__ import annotations

import importlib.util
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import vcollect
from tests import forked_scripts

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
# The one line an example that needs torch prints, instead of a traceback, where torch is not installed.
NEEDS_TORCH = "needs the torch extra: pip install 'vcollect[torch]'"


def example_main(name: str) -> Any:
    """The ``main`` of examples/<name>.py, loaded under a module name of its own.

    The module is not put in sys.modules, so worker processes receive its classes by value (as they
    do when the script runs as __main__).
    """
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"vcollect_example_{name}")["main"]


def test_every_example_is_tested() -> None:
    tested = {"random_dataset", "torch_rollout", "online_to_offline", "async_slow_envs", "minari_export",
              "dqn_cartpole", "bc_pong", "decision_transformer"}  # dqn_cartpole: tests/test_dqn_example.py
    assert {path.stem for path in EXAMPLES.glob("*.py")} == tested


def default_dataset_ids(name: str) -> list[str]:
    """The vcollect dataset ids examples/<name>.py writes by default (its ``--dataset``-like options)."""
    source = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
    return re.findall(r'add_argument\("--(?:dataset|imported)", default="([^"]+)"', source)


def test_every_example_writes_a_dataset_id_of_its_own() -> None:
    """Running the examples one after the other keeps every dataset: no two write the same id."""
    ids = {path.stem: default_dataset_ids(path.stem) for path in EXAMPLES.glob("*.py")}
    assert all(ids.values()), ids  # each example writes at least one dataset
    every_id = [dataset_id for per_example in ids.values() for dataset_id in per_example]
    assert len(every_id) == len(set(every_id)), ids


def run_without_torch(name: str, stderr_path: Path) -> subprocess.CompletedProcess[str]:
    """``python examples/<name>.py`` in a process of its own where ``import torch`` fails as if it were not
    installed (forked from a server that has imported vcollect but not torch: tests/forked_scripts.py)."""
    script = EXAMPLES / f"{name}.py"
    hide_torch = (
        "import runpy, sys; sys.modules['torch'] = None; "  # `import torch` now raises ImportError
        f"sys.argv = [{str(script)!r}]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    return forked_scripts.run(["-c", hide_torch], {}, str(REPO), str(stderr_path), timeout=120)


@pytest.mark.parametrize("name", ["torch_rollout", "online_to_offline", "dqn_cartpole", "bc_pong",
                                  "decision_transformer"])
def test_torch_example_without_torch_says_which_extra_in_one_line(name: str, tmp_path: Path) -> None:
    result = run_without_torch(name, tmp_path / "stderr.txt")
    assert result.returncode in (1, 2)
    assert result.stderr.splitlines() == [f"examples/{name}.py {NEEDS_TORCH}"], result.stderr
    assert result.stdout == ""


def dataset_ids(root: Path) -> list[str]:
    """The ids of the datasets under ``root``, sorted."""
    return sorted(vcollect.list_datasets(root))


def test_random_dataset(tmp_path: Path) -> None:
    dataset = example_main("random_dataset")(
        ["--episodes", "20", "--num-envs", "3", "--backend", "dummy", "--root", str(tmp_path)]
    )
    assert dataset.total_episodes == 20
    assert dataset.metadata["algorithm_name"] == "random"
    assert dataset_ids(tmp_path) == default_dataset_ids("random_dataset")


def test_torch_rollout(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = example_main("torch_rollout")(["--steps", "600", "--eval-episodes", "5", "--num-envs", "4",
                                            "--root", str(tmp_path)])
    assert result["rollout"].n_collected_steps == 600
    assert result["evaluation"].n_collected_episodes == 5
    assert result["dataset"].total_episodes == result["rollout"].n_collected_episodes > 0
    assert dataset_ids(tmp_path) == default_dataset_ids("torch_rollout")


def test_online_to_offline_clone_learns_the_expert(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = example_main("online_to_offline")(["--episodes", "8", "--updates", "300", "--eval-episodes", "8",
                                                "--root", str(tmp_path)])
    assert result["expert"].n_collected_episodes == 8
    assert result["accuracy"] > 0.85
    clone, random = result["clone"].returns_stat.mean, result["random"].returns_stat.mean
    assert clone > 5 * random, (clone, random)
    assert dataset_ids(tmp_path) == default_dataset_ids("online_to_offline")


def test_async_slow_envs(tmp_path: Path) -> None:
    result = example_main("async_slow_envs")(["--steps", "400", "--num-envs", "4", "--root", str(tmp_path)])
    assert result["sync"].n_collected_steps == result["async"].n_collected_steps == 400
    assert result["dataset"].total_episodes == result["async"].n_collected_episodes
    assert dataset_ids(tmp_path) == default_dataset_ids("async_slow_envs")


def test_minari_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    result = example_main("minari_export")(["--episodes", "12", "--num-envs", "4", "--root", str(tmp_path)])
    assert result["path"] == tmp_path / "minari" / "vcollect" / "examples-cartpole-v0"
    assert result["imported"].total_episodes == result["dataset"].total_episodes == 12
    assert dataset_ids(tmp_path) == sorted(default_dataset_ids("minari_export"))
    if importlib.util.find_spec("minari") is not None:
        assert result["minari"].total_episodes == 12


@pytest.mark.slow
def test_bc_pong_learns_the_teacher_from_dataloader_workers(tmp_path: Path) -> None:
    """Pong frames collected into a dataset, read by 2 DataLoader workers: the clone beats a constant guess."""
    result = example_main("bc_pong")(["--steps", "1600", "--epochs", "2", "--root", str(tmp_path)])
    assert result["steps"] == 1600, "every collected step is stored (unfinished episodes truncated)"
    assert result["accuracy"] > result["constant"] + 0.15, result
    assert dataset_ids(tmp_path) == default_dataset_ids("bc_pong")


def test_bc_pong_without_the_atari_extra_says_so_in_one_line(tmp_path: Path) -> None:
    """With torch installed but ale_py hidden, the Pong example names the atari extra in one line."""
    from tests.doc_blocks import Run, finish, one_line_naming, start

    run = finish(start([sys.executable, str(EXAMPLES / "bc_pong.py")], tmp_path, hidden=["ale_py"]), Run(tmp_path))
    if "torch extra" in run.stderr:
        pytest.skip("torch is not installed here: the example stops at torch first")
    assert one_line_naming(run, "atari"), (run.returncode, run.stdout, run.stderr)


@pytest.mark.slow
def test_decision_transformer_asked_for_a_high_return_beats_the_behaviour_data(tmp_path: Path) -> None:
    """Trained on slices of a mixed-quality CartPole dataset (returns ~10 to 500, mean ~135), a Decision
    Transformer conditioned on 500 plays well above the data's mean (seeds 0-2 gave 337 to 415 at width 32;
    330 to 449 at the example's width 64, which costs ~1.7x the CPU; at width 32, 300 updates fall short)."""
    result = example_main("decision_transformer")(
        ["--episodes-per-epsilon", "20", "--context", "10", "--updates", "500", "--width", "32",
         "--eval-episodes", "8", "--root", str(tmp_path)]
    )
    behaviour, achieved = result["behaviour"], result["achieved"]
    assert behaviour.size == result["dataset"].total_episodes == 100
    assert behaviour.min() < 50 and behaviour.max() > 300, "the dataset mixes poor and good episodes"
    assert achieved.size == 8
    assert achieved.mean() > behaviour.mean() + 100, (achieved, behaviour.mean())
    assert dataset_ids(tmp_path) == default_dataset_ids("decision_transformer")
