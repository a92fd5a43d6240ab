"""vcollect's store and DataCollector against Minari 0.5 on the same CartPole-v1 work.

Two comparisons, each ours vs. Minari's in one process (the machines are shared and noisy, so only
ratios taken within one run mean anything):

* ``iterate_episodes`` over every episode of one dataset: ours, and Minari's on our export of it.
* From first step to finished dataset on one env: ``vcollect.minari.recorder.DataCollector`` vs.
  ``minari.DataCollector`` (random actions, autoseeded resets, then ``create_dataset``).

Usage: ``python benchmarks/bench_store.py [--episodes 2000] [--steps 20000] [--repeats 3]`` prints a
table; ``pytest benchmarks/bench_store.py`` runs the same work under pytest-benchmark. Minari's
DataCollector needs ``jax`` (``minari[create]``); without it that row reads "not installed".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.minari import export_minari
from vcollect.minari.recorder import DataCollector
from vcollect.store import Dataset

DATASET_ID = "bench/cartpole-v0"


@contextmanager
def minari_datasets_path(path: Path) -> Iterator[None]:
    """Point Minari's root at ``path`` for the duration (it reads the variable on every call)."""
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        yield
    finally:
        if old is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def random_actions(steps: int, seed: int = 0) -> list[int]:
    """The action sequence both recorders are stepped with."""
    return np.random.default_rng(seed).integers(0, 2, size=steps).tolist()


def make_dataset(root: Path, episodes: int) -> Dataset:
    """A CartPole-v1 dataset of ``episodes`` random episodes under ``root`` (recorded with our DataCollector)."""
    env = DataCollector(gym.make("CartPole-v1"), root=root, seed=0)
    actions = iter(random_actions(episodes * 500))
    for _ in range(episodes):
        env.reset()
        while True:
            _, _, terminated, truncated, _ = env.step(next(actions))
            if terminated or truncated:
                break
    dataset = env.create_dataset(DATASET_ID)
    env.close()
    return dataset


def iterate_ours(dataset: Dataset) -> int:
    """Decode every episode (all arrays) with vcollect; returns the steps seen."""
    return sum(len(episode) for episode in dataset.iterate_episodes())


def iterate_minari(dataset: Any) -> int:
    """Decode every episode with Minari's iterate_episodes; returns the steps seen."""
    return sum(len(episode) for episode in dataset.iterate_episodes())


def record(collector: Any, actions: list[int], create: Callable[[Any], Any]) -> int:
    """Step a wrapped CartPole with ``actions`` (resetting at episode ends), then create the dataset."""
    collector.reset()
    for action in actions:
        _, _, terminated, truncated, _ = collector.step(action)
        if terminated or truncated:
            collector.reset()
    return int(create(collector).total_steps)


def record_ours(root: Path, actions: list[int], dataset_id: str = "bench/recorded-v0") -> float:
    """Seconds from the first step to the finished dataset with vcollect's DataCollector (default settings)."""
    start = time.perf_counter()
    collector = DataCollector(gym.make("CartPole-v1"), root=root)
    record(collector, actions, lambda c: c.create_dataset(dataset_id, overwrite=True))
    elapsed = time.perf_counter() - start
    collector.close()
    return elapsed


def record_minari(root: Path, actions: list[int], dataset_id: str = "bench/recorded-v0") -> float:
    """Seconds from the first step to the finished dataset with minari.DataCollector."""
    import minari

    with minari_datasets_path(root), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari warns about every metadata field left out
        existing = Path(root, *dataset_id.split("/"))
        if existing.exists():
            with contextlib.redirect_stdout(io.StringIO()):  # it prints "Dataset ... deleted!"
                minari.delete_dataset(dataset_id)
        start = time.perf_counter()
        collector = minari.DataCollector(gym.make("CartPole-v1"))
        record(collector, actions, lambda c: c.create_dataset(dataset_id))
        elapsed = time.perf_counter() - start
        collector.close()
    return elapsed


def minari_available(create: bool = False) -> bool:
    """Whether minari (and, for its DataCollector, jax) can be imported."""
    try:
        import minari  # noqa: F401

        if create:
            import jax  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------------ pytest-benchmark


def _prepared(tmp_path: Path, episodes: int = 500) -> tuple[Dataset, Any]:
    import minari

    dataset = make_dataset(tmp_path / "vc", episodes)
    with minari_datasets_path(tmp_path / "minari"):
        export_minari(dataset, DATASET_ID)
        theirs = minari.load_dataset(DATASET_ID)
    return dataset, theirs


def test_iterate_episodes_vcollect(benchmark: Any, tmp_path: Path) -> None:
    """vcollect: iterate_episodes over 500 CartPole episodes."""
    dataset = make_dataset(tmp_path, 500)
    steps = benchmark(iterate_ours, dataset)
    assert steps == dataset.total_steps


def test_iterate_episodes_minari(benchmark: Any, tmp_path: Path) -> None:
    """Minari: iterate_episodes over the same 500 episodes (our export)."""
    if not minari_available():
        import pytest

        pytest.skip("minari is not installed")
    dataset, theirs = _prepared(tmp_path)
    steps = benchmark(iterate_minari, theirs)
    assert steps == dataset.total_steps


def test_datacollector_vcollect(benchmark: Any, tmp_path: Path) -> None:
    """vcollect DataCollector: 5,000 CartPole steps to a finished dataset."""
    actions = random_actions(5_000)
    benchmark.pedantic(record_ours, args=(tmp_path, actions), rounds=3, iterations=1)


def test_datacollector_minari(benchmark: Any, tmp_path: Path) -> None:
    """minari.DataCollector: the same 5,000 steps to a finished dataset."""
    if not minari_available(create=True):
        import pytest

        pytest.skip("minari[create] (jax) is not installed")
    actions = random_actions(5_000)
    benchmark.pedantic(record_minari, args=(tmp_path, actions), rounds=1, iterations=1)


# ------------------------------------------------------------------------------------ table


def best_of(repeats: int, fn: Callable[[], float]) -> float:
    """Smallest of ``repeats`` timings (the least disturbed by other load on the machine)."""
    return min(fn() for _ in range(repeats))


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    """Print steps/s of both comparisons and the ratios ours/Minari."""
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=2_000, help="episodes of the iterated dataset")
    parser.add_argument("--steps", type=int, default=20_000, help="steps recorded by each DataCollector")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per row")
    args = parser.parse_args()

    rows: list[tuple[str, str, float | None, float | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = make_dataset(root / "vc", args.episodes)
        steps = dataset.total_steps
        ours = steps / best_of(args.repeats, lambda: timed(lambda: iterate_ours(dataset)))
        theirs: float | None = None
        if minari_available():
            import minari

            with minari_datasets_path(root / "minari"):
                export_minari(dataset, DATASET_ID)
                minari_dataset = minari.load_dataset(DATASET_ID)
            theirs = steps / best_of(args.repeats, lambda: timed(lambda: iterate_minari(minari_dataset)))
        rows.append((f"iterate_episodes ({args.episodes} episodes, {steps} steps)", "steps/s", ours, theirs))

        actions = random_actions(args.steps)
        ours = args.steps / best_of(args.repeats, lambda: record_ours(root / "rec", actions))
        theirs = None
        if minari_available(create=True):
            theirs = args.steps / best_of(args.repeats, lambda: record_minari(root / "minari-rec", actions))
        rows.append((f"DataCollector, first step to dataset ({args.steps} steps)", "steps/s", ours, theirs))

    table = Table(title=f"CartPole-v1: vcollect vs Minari (one run, best of {args.repeats})")
    table.add_column("what")
    table.add_column("vcollect", justify="right")
    table.add_column("minari", justify="right")
    table.add_column("ratio", justify="right")
    for name, unit, a, b in rows:
        table.add_row(
            name,
            f"{a:,.0f} {unit}" if a is not None else "-",
            f"{b:,.0f} {unit}" if b is not None else "not installed",
            f"{a / b:.1f}x" if a is not None and b else "-",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
