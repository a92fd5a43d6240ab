"""A store or collector nobody closes still commits its finished episodes: at interpreter exit (real scripts
in subprocesses that never close anything) and when it is garbage-collected while the program runs; what
cannot be committed is said on stderr by an EpisodesLostWarning, shown by default."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import warnings
import weakref
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from vcollect import Collector, EpisodeStore, list_datasets, load_dataset, make_vector
from vcollect.errors import EpisodesLostWarning

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 120

HEADER = """
import sys
import numpy as np
from vcollect import Collector, EpisodeStore, make_vector
root = sys.argv[1]
"""

SCRIPTS = {
    # a Collector on the dummy backend writing to a store, neither closed
    "dummy": """
envs = make_vector("CartPole-v1", 4, backend="dummy")
store = EpisodeStore.create("exit/dummy-v0", envs.single_observation_space, envs.single_action_space, root=root)
collector = Collector(None, envs, store=store, seed=0)
stats = collector.collect(n_episode=50, random=True, reset_before_collect=True)
print(stats.n_collected_episodes, stats.n_collected_steps, flush=True)
""",
    # the same on the subprocess backend, with background commits and shards committed along the way
    "subproc": """
if __name__ == "__main__":
    envs = make_vector("CartPole-v1", 2, backend="subproc")
    store = EpisodeStore.create("exit/subproc-v0", envs.single_observation_space, envs.single_action_space,
                                root=root, shard_steps=300, background_commits=True)
    collector = Collector(None, envs, store=store, seed=0)
    stats = collector.collect(n_episode=40, random=True, reset_before_collect=True)
    print(stats.n_collected_episodes, stats.n_collected_steps, flush=True)
""",
    # n_step collection: the finished episodes are stored, the running ones dropped with today's warning
    "running": """
envs = make_vector("CartPole-v1", 3, backend="dummy")
store = EpisodeStore.create("exit/running-v0", envs.single_observation_space, envs.single_action_space, root=root)
collector = Collector(None, envs, store=store, seed=0)
stats = collector.collect(n_step=500, random=True, reset_before_collect=True)
print(stats.n_collected_episodes, int(stats.lens.sum()), flush=True)
""",
    # a bare store with episodes written into it
    "bare": """
import gymnasium as gym
obs_space, act_space = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)
store = EpisodeStore.create("exit/bare-v0", obs_space, act_space, root=root)
steps = 0
for e in range(7):
    n = 5 + e
    store.write_episode(np.zeros((n + 1, 3), np.float32), np.zeros(n, np.int64), np.ones(n), np.eye(n, dtype=bool)[-1],
                        np.zeros(n, bool), seed=e, env_id=0)
    steps += n
print(7, steps, flush=True)
""",
    # two DataCollectors never closed: one with finished episodes (kept in its staging dataset, said) and a
    # running one, one with only a running episode (its empty staging dataset deleted)
    "recorder": """
import gymnasium as gym
from vcollect import DataCollector
kept = DataCollector(gym.make("CartPole-v1"), root=root + "/kept", seed=0)
kept.action_space.seed(0)
episodes = steps = 0
kept.reset()
while episodes < 3:
    _, _, terminated, truncated, _ = kept.step(kept.action_space.sample())
    steps += 1
    if terminated or truncated:
        episodes += 1
        kept.reset()
kept.step(0)
empty = DataCollector(gym.make("CartPole-v1"), root=root + "/empty", seed=1)
empty.reset()
empty.step(0)
print(episodes, steps, flush=True)
""",
    # the dataset is deleted under a store that is never closed: nothing can be committed, and it is said
    "lost": """
import shutil
envs = make_vector("CartPole-v1", 2, backend="dummy")
store = EpisodeStore.create("exit/lost-v0", envs.single_observation_space, envs.single_action_space, root=root)
collector = Collector(None, envs, store=store, seed=0)
stats = collector.collect(n_episode=6, random=True, reset_before_collect=True)
shutil.rmtree(store.path)
print(stats.n_collected_episodes, stats.n_collected_steps, flush=True)
""",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[int], str]]:
    """Every script run once, all at the same time: name -> (root, the numbers it printed, its stderr)."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("PYTHONWARNINGS", None)  # Python's default warning filters, as a user's script gets them
    procs = {}
    for name, body in SCRIPTS.items():
        root = tmp_path_factory.mktemp(name)
        script = root.parent / f"{name}.py"
        script.write_text(textwrap.dedent(HEADER) + textwrap.dedent(body))
        procs[name] = (root, subprocess.Popen([sys.executable, str(script), str(root)], stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True, env=env, cwd=root))
    out = {}
    for name, (root, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, (name, stderr)
        out[name] = (root, [int(x) for x in stdout.split()], stderr)
    return out


@pytest.mark.parametrize("name", ["dummy", "subproc", "bare"])
def test_a_script_that_never_closes_stores_every_finished_episode(
    runs: dict[str, tuple[Path, list[int], str]], name: str
) -> None:
    root, (episodes, steps), stderr = runs[name]
    data = load_dataset(f"exit/{name}-v0", root=root)
    assert (data.total_episodes, data.total_steps) == (episodes, steps) and episodes > 0
    assert "Warning" not in stderr, stderr


def test_running_episodes_at_exit_keep_the_unfinished_rule(runs: dict[str, tuple[Path, list[int], str]]) -> None:
    root, (episodes, steps), stderr = runs["running"]
    data = load_dataset("exit/running-v0", root=root)
    assert (data.total_episodes, data.total_steps) == (episodes, steps) and episodes > 0
    assert "UnfinishedEpisodesWarning" in stderr and "EpisodesLostWarning" not in stderr, stderr


def test_what_cannot_be_committed_at_exit_is_said_with_its_counts(
    runs: dict[str, tuple[Path, list[int], str]],
) -> None:
    _, (episodes, steps), stderr = runs["lost"]
    assert "EpisodesLostWarning" in stderr, stderr
    assert f"{episodes} episodes ({steps} steps) could not be committed" in stderr, stderr
    assert "deleted, moved or replaced" in stderr  # and why


def spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    return gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2)


def write(store: EpisodeStore, episodes: int, length: int = 4) -> None:
    for e in range(episodes):
        store.write_episode(np.zeros((length + 1, 3), np.float32), np.zeros(length, np.int64), np.ones(length),
                            np.eye(length, dtype=bool)[-1], np.zeros(length, bool), seed=e, env_id=0)


def test_a_data_collector_never_closed_keeps_its_episodes_and_leaves_no_empty_staging(
    runs: dict[str, tuple[Path, list[int], str]],
) -> None:
    root, (episodes, steps), stderr = runs["recorder"]
    (staging,) = list_datasets(root / "kept")
    data = load_dataset(staging, root=root / "kept")
    assert (data.total_episodes, data.total_steps) == (episodes, steps) and episodes == 3 and steps > 3
    assert "alive at interpreter exit with 3 recorded episodes" in stderr and staging in stderr, stderr
    assert "EpisodesLostWarning" not in stderr, stderr
    assert list_datasets(root / "empty") == {}


def test_a_store_dropped_mid_program_commits(tmp_path: Path) -> None:
    store = EpisodeStore.create("drop/store-v0", *spaces(), root=tmp_path)
    write(store, 3)
    ref = weakref.ref(store)
    del store
    gc.collect()
    assert ref() is None  # the exit registry holds no strong reference
    assert load_dataset("drop/store-v0", root=tmp_path).total_episodes == 3


def test_a_store_in_a_reference_cycle_commits_when_collected(tmp_path: Path) -> None:
    store = EpisodeStore.create("drop/cycle-v0", *spaces(), root=tmp_path, background_commits=True, shard_steps=6)
    write(store, 5)
    store.cycle = store  # type: ignore[attr-defined]
    del store
    gc.collect()
    data = load_dataset("drop/cycle-v0", root=tmp_path)
    assert (data.total_episodes, data.total_steps) == (5, 20)


def test_a_collector_dropped_mid_program_hands_its_queue_over(tmp_path: Path) -> None:
    envs = make_vector("CartPole-v1", 4, backend="dummy")
    store = EpisodeStore.create("drop/collector-v0", envs.single_observation_space, envs.single_action_space,
                                root=tmp_path)
    collector = Collector(None, envs, store=store, seed=0)
    stats = collector.collect(n_episode=12, random=True, reset_before_collect=True)
    ref = weakref.ref(collector)
    del collector
    gc.collect()
    assert ref() is None
    assert store.pending_episodes == 0  # flushed by the dropped collector; the store stays open (it is ours)
    data = load_dataset("drop/collector-v0", root=tmp_path)
    assert (data.total_episodes, data.total_steps) == (12, stats.n_collected_steps)
    with Collector(None, envs, store=store, seed=1) as again:  # its envs still serve another collector
        again.collect(n_episode=4, random=True, reset_before_collect=True)
    store.close()
    assert load_dataset("drop/collector-v0", root=tmp_path).total_episodes == 16


def test_a_store_that_cannot_commit_when_dropped_says_what_was_lost(tmp_path: Path) -> None:
    store = EpisodeStore.create("drop/gone-v0", *spaces(), root=tmp_path)
    write(store, 2, length=3)
    store.path.rename(tmp_path / "elsewhere")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del store
        gc.collect()
    lost = [w for w in caught if issubclass(w.category, EpisodesLostWarning)]
    assert len(lost) == 1 and "2 episodes (6 steps) could not be committed" in str(lost[0].message)
    assert issubclass(EpisodesLostWarning, UserWarning)  # shown by Python's default filters
