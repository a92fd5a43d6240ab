"""Every script in examples/ runs with small sizes and does what its user story says."""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example_main(name: str) -> Any:
    """The ``main`` of examples/<name>.py, loaded under a module name of its own.

    The module is not put in sys.modules, so worker processes receive its classes by value (as they
    do when the script runs as __main__).
    """
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=f"vcollect_example_{name}")["main"]


def test_every_example_is_tested() -> None:
    tested = {"random_dataset", "torch_rollout", "online_to_offline", "async_slow_envs", "minari_export"}
    assert {path.stem for path in EXAMPLES.glob("*.py")} == tested


def test_random_dataset(tmp_path: Path) -> None:
    dataset = example_main("random_dataset")(
        ["--episodes", "20", "--num-envs", "3", "--backend", "dummy", "--root", str(tmp_path), "--dataset", "ex/random-v0"]
    )
    assert dataset.total_episodes == 20
    assert dataset.metadata["algorithm_name"] == "random"
    assert (tmp_path / "ex" / "random-v0" / "dataset.json").is_file()


def test_torch_rollout(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = example_main("torch_rollout")(["--steps", "600", "--eval-episodes", "5", "--num-envs", "4",
                                            "--root", str(tmp_path)])
    assert result["rollout"].n_collected_steps == 600
    assert result["evaluation"].n_collected_episodes == 5
    assert result["dataset"].total_episodes == result["rollout"].n_collected_episodes > 0


def test_online_to_offline_clone_learns_the_expert(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    result = example_main("online_to_offline")(["--episodes", "8", "--updates", "300", "--eval-episodes", "8",
                                                "--root", str(tmp_path)])
    assert result["expert"].n_collected_episodes == 8
    assert result["accuracy"] > 0.85
    clone, random = result["clone"].returns_stat.mean, result["random"].returns_stat.mean
    assert clone > 5 * random, (clone, random)


def test_async_slow_envs(tmp_path: Path) -> None:
    if importlib.util.find_spec("vcollect.async_collector") is None:
        pytest.skip("vcollect.async_collector (issue 4) is not in this tree yet")
    result = example_main("async_slow_envs")(["--steps", "400", "--num-envs", "4", "--root", str(tmp_path)])
    assert result["sync"].n_collected_steps == result["async"].n_collected_steps == 400
    assert result["dataset"].total_episodes == result["async"].n_collected_episodes


def test_minari_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    result = example_main("minari_export")(["--episodes", "12", "--num-envs", "4", "--root", str(tmp_path)])
    assert result["path"] == tmp_path / "minari" / "vcollect" / "cartpole-random-v0"
    assert result["imported"].total_episodes == result["dataset"].total_episodes == 12
    if importlib.util.find_spec("minari") is not None:
        assert result["minari"].total_episodes == 12
