"""SIGKILL real writer processes at seeded random moments (mid-commit included) and check what survives.

After every kill: each dataset opens, no committed episode is lost, every stored episode is whole, no
partial dataset is published, and ``verify()`` is clean. One verify finding is accepted: a shard "not
recorded in the manifest" -- a writer killed between the shard's rename and its manifest append leaves
a whole, loadable shard the manifest does not list yet (the shard was committed; only its SHA-256
record is missing). Every other kind of problem fails the test.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from tests import forked_scripts
from vcollect import (
    EpisodeStore,
    combine_datasets,
    export_minari,
    import_minari,
    list_datasets,
    load_dataset,
)
from vcollect.errors import DatasetNotFoundError
from vcollect.store.read.reader import StoredDataset

pytestmark = pytest.mark.slow

ROUNDS = 3
SEED = int(os.environ.get("VCOLLECT_CRASH_SEED", "0"))  # vary the kill moments: VCOLLECT_CRASH_SEED=7 make test
DEADLINE_S = 30.0
UNRECORDED = "not recorded in the manifest"


class Child:
    """A child Python process whose stdout lines are read by a thread, so waits have a deadline.

    It is forked from a server that has imported vcollect already (tests/forked_scripts.py), so each
    child costs its work, not the imports; it is a real process all the same, killed with SIGKILL."""

    def __init__(self, args: list[str], root: Path) -> None:
        self.err_path = root.parent / f"{root.name}-stderr.txt"
        self.proc, fd = forked_scripts.start(args, {"VCOLLECT_DATASETS_PATH": str(root)}, str(root.parent),
                                             str(self.err_path))
        self._out = open(fd)  # noqa: SIM115 - read to its end by the pump thread
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        with self._out:
            for line in self._out:
                self.lines.put(line.strip())
        self.lines.put(None)

    def readline(self) -> str:
        try:
            line = self.lines.get(timeout=DEADLINE_S)
        except queue.Empty:
            raise AssertionError(f"no progress line within {DEADLINE_S}s: {self.stderr()}") from None
        assert line is not None, f"child exited early ({self.poll()}): {self.stderr()}"
        return line

    def stderr(self) -> str:
        return self.err_path.read_text()[-3000:] if self.err_path.exists() else ""

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.proc.exitcode

    def wait(self) -> int | None:
        """Wait (at most DEADLINE_S) for it to end; returns the exit code."""
        self.proc.join(timeout=DEADLINE_S)
        return self.proc.exitcode

    def kill(self) -> int | None:
        """SIGKILL (unless it already finished) and reap; returns the exit code."""
        if self.proc.exitcode is None:
            self.proc.kill()
        return self.wait()


def py(code: str) -> list[str]:
    return ["-c", textwrap.dedent(code)]


def check_whole(dataset_id: str, root: Path, at_least: int) -> int:
    """The dataset opens, holds >= ``at_least`` episodes, all whole, and verifies clean; returns its size."""
    ds = load_dataset(dataset_id, root=root)
    assert ds.total_episodes >= at_least, (dataset_id, ds.total_episodes, at_least)
    problems = ds.verify()
    assert all(UNRECORDED in p for p in problems), problems  # see the module docstring
    steps = 0
    for ep in ds:
        n = len(ep.actions)
        assert n > 0 and len(ep.observations) == n + 1 and len(ep.rewards) == n
        assert len(ep.terminations) == len(ep.truncations) == n
        assert bool(ep.terminations[-1] or ep.truncations[-1])
        assert not (ep.terminations[:-1].any() or ep.truncations[:-1].any())
        steps += n
    assert steps == ds.total_steps
    info = list_datasets(root)[dataset_id]
    assert info["total_episodes"] == ds.total_episodes and info["corrupt_shards"] == []
    return ds.total_episodes


def kill_after_lines(child: Child, rng: random.Random, lines: int) -> list[str]:
    """Read ``lines`` progress lines, then SIGKILL after a short seeded delay (maybe mid-commit)."""
    seen = [child.readline() for _ in range(lines)]
    time.sleep(rng.uniform(0, 0.05))  # the kill moment, not synchronisation
    assert child.kill() == -signal.SIGKILL, child.stderr()
    return seen


# --- 1. Collector + EpisodeStore -------------------------------------------------------------------

COLLECTOR = """
from vcollect import Collector, EpisodeStore, RandomPolicy
from vcollect.envs import make_vector
envs = make_vector("CartPole-v1", 3, backend="dummy")
store = EpisodeStore.create("crash/collector-v0", envs.single_observation_space, envs.single_action_space,
                            shard_steps=150)
with Collector(RandomPolicy(envs.single_action_space, seed=0), envs, store=store, seed=1) as collector:
    collector.reset()
    while True:
        collector.collect(n_step=150)
        print("committed", store.committed_episodes, flush=True)
"""


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_kill_collector_with_episode_store(tmp_path: Path, round_: int) -> None:
    rng = random.Random(1000 + 10 * SEED + round_)
    root = tmp_path / "root"
    root.mkdir()
    child = Child(py(COLLECTOR), root)
    seen = kill_after_lines(child, rng, rng.randint(2, 8))
    committed = int(seen[-1].split()[1])
    assert committed > 0
    check_whole("crash/collector-v0", root, committed)


# --- 2. DataCollector ------------------------------------------------------------------------------

DATA_COLLECTOR = """
import gymnasium as gym
from vcollect import DataCollector
env = DataCollector(gym.make("CartPole-v1"), seed=3, flush_every=2)
env.action_space.seed(0)
env.reset()
print("staging", env.staging_id, flush=True)
finished = 0
while True:
    _, _, te, tr, _ = env.step(env.action_space.sample())
    if te or tr:
        finished += 1
        env.reset()
        print("finished", finished, flush=True)
"""


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_kill_data_collector(tmp_path: Path, round_: int) -> None:
    rng = random.Random(2000 + 10 * SEED + round_)
    root = tmp_path / "root"
    root.mkdir()
    child = Child(py(DATA_COLLECTOR), root)
    word, staging_id = child.readline().split()
    assert word == "staging"
    seen = kill_after_lines(child, rng, rng.randint(3, 30))
    finished = int(seen[-1].split()[1])
    # flush_every=2 commits in the step that finishes every second episode, so by the time "finished N"
    # is printed the first N - N % 2 episodes are committed.
    check_whole(staging_id, root, finished - finished % 2)


# --- 3. CLI collect --------------------------------------------------------------------------------

CLI = ["-m", "vcollect", "collect", "CartPole-v1", "--backend", "dummy", "--episodes", "100000",
       "--dataset", "ns/cli-v0", "--shard-steps", "500", "--no-progress"]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_kill_cli_collect(tmp_path: Path, round_: int) -> None:
    rng = random.Random(3000 + 10 * SEED + round_)
    root = tmp_path / "root"
    root.mkdir()
    child = Child(CLI, root)
    want = rng.randint(1, 6)
    deadline = time.monotonic() + DEADLINE_S
    shards: list[Path] = []
    while len(shards) < want:  # wait for `want` committed shards (a poll, with a deadline)
        assert child.poll() is None, child.stderr()
        assert time.monotonic() < deadline, f"only {len(shards)} shards: {child.stderr()}"
        shards = list(root.glob("ns/cli-v0/shards/*.h5"))
        time.sleep(0.01)
    committed = len(shards)
    time.sleep(rng.uniform(0, 0.1))
    assert child.kill() == -signal.SIGKILL, child.stderr()
    ds = load_dataset("ns/cli-v0", root=root)
    assert len(StoredDataset(ds).shard_paths) >= committed
    check_whole("ns/cli-v0", root, committed)  # each shard holds >= 1 whole episode


# --- 4. combine, split, import-minari --------------------------------------------------------------

SOURCE_ID = "src/source-v0"
SOURCE_EPISODES = 600
OBS = spaces.Box(-1e9, 1e9, shape=(8,), dtype=np.float32)
ACT = spaces.Discrete(4)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A source dataset (many shards) and its Minari export, copied into each test's root."""
    base = tmp_path_factory.mktemp("source")
    root, minari_root = base / "root", base / "minari"
    rng = np.random.default_rng(0)
    with EpisodeStore.create(SOURCE_ID, OBS, ACT, root=root, shard_steps=2_000) as store:
        for seed in range(SOURCE_EPISODES):
            n = 20 + seed % 30
            store.write_episode(
                observations=rng.standard_normal((n + 1, 8), dtype=np.float32), actions=rng.integers(0, 4, n),
                rewards=np.ones(n), terminations=np.arange(n) == n - 1, truncations=np.zeros(n, bool), seed=seed, env_id=0,
            )
    export_minari(SOURCE_ID, "src/source-v0", minari_root, root=root)
    return base


def copy_source(source: Path, tmp_path: Path) -> tuple[Path, Path]:
    import shutil

    shutil.copytree(source, tmp_path / "base")
    return tmp_path / "base" / "root", tmp_path / "base" / "minari"


def absent_or_complete(dataset_id: str, root: Path, total: int) -> bool:
    """True when ``dataset_id`` is published (and then complete); False when it does not exist at all."""
    if dataset_id not in list_datasets(root):
        with pytest.raises(DatasetNotFoundError):
            load_dataset(dataset_id, root=root)
        return False
    assert check_whole(dataset_id, root, total) == total
    return True


def kill_op(child: Child, rng: random.Random, root: Path, latest: float) -> None:
    """Kill once the operation's hidden staging folder exists (polled), after a seeded delay."""
    assert child.readline() == "start"
    deadline = time.monotonic() + DEADLINE_S
    while not list(root.glob("out/.*")) and child.poll() is None:
        assert time.monotonic() < deadline, child.stderr()
        time.sleep(0.001)
    time.sleep(rng.uniform(0, latest))  # the kill moment, not synchronisation: anywhere in the operation
    code = child.kill()
    assert code in (0, -signal.SIGKILL), child.stderr()


COMBINE = """
import vcollect
print("start", flush=True)
vcollect.combine_datasets(["src/source-v0", "src/source-v0"], "out/combined-v0")
print("done", flush=True)
"""

IMPORT = """
import sys
import vcollect
print("start", flush=True)
vcollect.import_minari("src/source-v0", "out/imported-v0", minari_root=sys.argv[1])
print("done", flush=True)
"""

SPLIT = """
import runpy, sys
print("start", flush=True)
sys.argv = ["vcollect", "split", "src/source-v0", "--sizes", "70%,30%", "--into", "out/a-v0", "out/b-v0",
            "--seed", "0"]
runpy.run_module("vcollect", run_name="__main__")
"""


@pytest.mark.parametrize("op", ["combine", "split", "import-minari"])
@pytest.mark.parametrize("round_", range(ROUNDS))
def test_kill_dataset_operations(source: Path, tmp_path: Path, op: str, round_: int) -> None:
    rng = random.Random(f"{op}-{SEED}-{round_}")
    root, minari_root = copy_source(source, tmp_path)
    if op == "combine":
        child = Child(py(COMBINE), root)
        targets = {"out/combined-v0": 2 * SOURCE_EPISODES}
    elif op == "import-minari":
        child = Child([*py(IMPORT), str(minari_root)], root)
        targets = {"out/imported-v0": SOURCE_EPISODES}
    else:
        child = Child(py(SPLIT), root)
        targets = {"out/a-v0": SOURCE_EPISODES * 7 // 10, "out/b-v0": SOURCE_EPISODES * 3 // 10}
    kill_op(child, rng, root, (0.0, 0.05, 0.3)[round_])  # early, mid, maybe after publishing
    published = [absent_or_complete(dataset_id, root, total) for dataset_id, total in targets.items()]
    assert len(set(published)) == 1, f"a killed {op} published {published} of {list(targets)}: all or none"
    if op == "combine" and not published[0]:  # the dead writer's staging does not block a rerun
        combine_datasets([SOURCE_ID, SOURCE_ID], "out/combined-v0", root)
        assert absent_or_complete("out/combined-v0", root, 2 * SOURCE_EPISODES)
        assert [p.name for p in (root / "out").iterdir()] == ["combined-v0"]  # its staging was removed
    if op == "import-minari" and not published[0]:
        import_minari("src/source-v0", "out/imported-v0", root, minari_root=minari_root)
        assert absent_or_complete("out/imported-v0", root, SOURCE_EPISODES)
        assert [p.name for p in (root / "out").iterdir()] == ["imported-v0"]
    # No hidden leftover is listed as a dataset, and the source is untouched.
    assert set(list_datasets(root)) <= {SOURCE_ID, *targets}
    assert check_whole(SOURCE_ID, root, SOURCE_EPISODES) == SOURCE_EPISODES


def test_split_killed_between_parts_is_all_or_nothing(source: Path, tmp_path: Path) -> None:
    """Killed once its first part is visible, a split has committed its journal: the next reader publishes
    the other part (store/layout/publish_journal.py), so both are complete and no staging folder is left."""
    root, _ = copy_source(source, tmp_path)
    child = Child(py(SPLIT), root)
    assert child.readline() == "start"
    deadline = time.monotonic() + DEADLINE_S
    while not (root / "out" / "a-v0" / "dataset.json").is_file() and child.poll() is None:
        assert time.monotonic() < deadline, child.stderr()
        time.sleep(0.001)  # a poll: the first part is published
    child.kill()
    published = [absent_or_complete(i, root, n) for i, n in (("out/a-v0", 420), ("out/b-v0", 180))]
    assert published == [True, True], f"a killed split left {published} (a-v0, b-v0) published"
    assert sorted(p.name for p in (root / "out").iterdir()) == ["a-v0", "b-v0"]
    assert not list(root.glob(".vcollect-publish-*")), "the journal outlived the publish"


SPLIT_OVER = """
import runpy, sys
print("start", flush=True)
sys.argv = ["vcollect", "split", "src/source-v0", "--sizes", "70%,30%", "--into", "out/a-v0", "out/b-v0",
            "--seed", "1", "--overwrite"]
runpy.run_module("vcollect", run_name="__main__")
"""


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_split_overwrite_killed_leaves_all_old_or_all_new(source: Path, tmp_path: Path, round_: int) -> None:
    """`split --overwrite` over an earlier split: killed anywhere, both parts exist and come from one split."""
    rng = random.Random(f"split-over-{SEED}-{round_}")
    root, _ = copy_source(source, tmp_path)
    first = Child(py(SPLIT), root)  # the earlier split (seed 0), run to its end
    assert first.readline() == "start"
    assert first.wait() == 0, first.stderr()
    child = Child(py(SPLIT_OVER), root)
    kill_op(child, rng, root, (0.0, 0.05, 0.3)[round_])
    seeds = [load_dataset(i, root=root).metadata["split_seed"] for i in ("out/a-v0", "out/b-v0")]
    assert seeds in ([0, 0], [1, 1]), f"the parts come from different splits: {seeds}"
    for dataset_id, total in (("out/a-v0", 420), ("out/b-v0", 180)):
        assert absent_or_complete(dataset_id, root, total)
