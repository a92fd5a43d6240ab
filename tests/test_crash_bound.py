"""The most a crash can lose is the documented bound (the docs' "What the store guarantees"; EpisodeStore):
fewer than ``shard_steps + WRITE_STEPS + L`` steps with inline commits and ``3 * (shard_steps + L) +
WRITE_STEPS`` with background commits, L the longest episode. A batch of episodes handed to a store is cut
into shards of about ``shard_steps``, the collector's queue goes to the store every WRITE_STEPS steps, and
SIGKILLs of real collection processes at random moments lose no more than that."""

from __future__ import annotations

import os
import queue
import random
import textwrap
import threading
import time
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest

from tests import forked_scripts
from tests.sinks import ListStore
from vcollect import Collector, EpisodeStore, load_dataset, make_vector
from vcollect.collecting.episode_writer import WRITE_BATCH, WRITE_STEPS

SHARD = 250
SEED = int(os.environ.get("VCOLLECT_CRASH_SEED", "0"))


def crash_bound(shard_steps: int, longest: int, background: bool) -> int:
    """The documented bound: steps a crash may lose (strictly fewer)."""
    if background:
        return 3 * (shard_steps + longest) + WRITE_STEPS
    return shard_steps + WRITE_STEPS + longest


def shard_steps(paths: list[Path]) -> list[int]:
    """Steps each shard file holds, in order."""
    sizes = []
    for path in paths:
        with h5py.File(path, "r") as f:
            sizes.append(int(f["rewards"].shape[0]))
    return sizes


class LongEpisodes(gym.Env[np.ndarray, int]):
    """Episodes of ``length`` steps; observations are the step count."""

    observation_space = gym.spaces.Box(0, 10_000, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 300) -> None:
        self.length, self.t = length, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full(2, self.t, np.float32), 1.0, self.t >= self.length, False, {}


def test_a_batch_larger_than_a_shard_is_committed_as_several(tmp_path: Path) -> None:
    envs = make_vector("CartPole-v1", 4, backend="dummy")  # the reproduction: 60 CartPole episodes, 250-step shards
    with EpisodeStore.create("bound/split-v0", envs.single_observation_space, envs.single_action_space,
                             root=tmp_path, shard_steps=SHARD) as store, Collector(None, envs, store=store, seed=0) as c:
        stats = c.collect(n_episode=60, random=True, reset_before_collect=True)
    data = load_dataset("bound/split-v0", root=tmp_path)
    assert data.total_steps == stats.n_collected_steps > 4 * SHARD
    longest = int(stats.lens.max())
    sizes = shard_steps(data.shard_paths)
    assert len(sizes) >= stats.n_collected_steps // (SHARD + longest)
    assert all(SHARD <= size < SHARD + longest for size in sizes[:-1]) and sizes[-1] < SHARD + longest, sizes


@pytest.mark.parametrize("limit", ["steps", "bytes"])
def test_write_episodes_cuts_between_episodes(tmp_path: Path, limit: str) -> None:
    obs_space, act_space = gym.spaces.Box(0, 1, (16,), np.float32), gym.spaces.Discrete(2)
    options = {"shard_steps": 100} if limit == "steps" else {"shard_bytes": 100 * (10 + 64 + 8)}
    lengths = np.array([30, 5, 250, 40, 40, 40, 7, 60, 1, 33])
    steps = int(lengths.sum())
    with EpisodeStore.create("bound/cut-v0", obs_space, act_space, root=tmp_path, **options) as store:
        store.write_episodes(np.random.default_rng(0).random((steps + len(lengths), 16), np.float32),
                             np.zeros(steps, np.int64), np.arange(steps, dtype=np.float64), np.zeros(steps, bool),
                             np.zeros(steps, bool), lengths, seeds=list(range(10)), env_ids=[0] * 10)
        assert store.pending_steps == 0
    data = load_dataset("bound/cut-v0", root=tmp_path)
    per_shard = shard_steps(data.shard_paths)
    assert per_shard == [285, 120, 101]  # each shard ends with the episode that filled it
    assert [len(ep) for ep in data] == lengths.tolist()
    np.testing.assert_array_equal(np.concatenate([ep.rewards for ep in data]), np.arange(steps))  # order kept


def test_the_collector_hands_over_every_write_steps_steps() -> None:
    envs = make_vector(lambda: LongEpisodes(300), 4, backend="dummy")
    sink = ListStore()
    batches: list[int] = []
    write = sink.write_episodes

    def spy(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
        batches.append(int(np.sum(args[5])))
        write(*args, **kwargs)

    sink.write_episodes = spy  # type: ignore[method-assign]
    with Collector(None, envs, store=sink, seed=0) as c:
        c.collect(n_episode=40, random=True, reset_before_collect=True)
    assert sum(batches) == 40 * 300 and len(sink.episodes) == 40 < WRITE_BATCH
    assert max(batches) < WRITE_STEPS + 300, batches


# --- SIGKILL at random moments -----------------------------------------------------------------------

CHILD = """
import sys
import gymnasium as gym
import h5py
import numpy as np
from vcollect import Collector, EpisodeStore, VectorRingBuffer, make_vector

kind, background, shard = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])

class Frames(gym.Env):
    # Pong-sized observations: a stack of four 84x84 uint8 frames; episodes of 20 to 150 steps
    observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(20, 151))
        return np.zeros((4, 84, 84), np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.full((4, 84, 84), self.t % 256, np.uint8), 0.0, self.t >= self.length, False, {}

if kind == "frames":
    envs = make_vector(Frames, 2, backend="dummy")
    buffer = VectorRingBuffer(total_size=2 * 512, num_envs=2)
else:
    envs = make_vector("CartPole-v1", 4, backend="dummy")
    buffer = None
store = EpisodeStore.create("crash/bound-v0", envs.single_observation_space, envs.single_action_space,
                            shard_steps=shard, background_commits=background)
finished = 0

def report(episode):
    global finished
    finished += len(episode.rewards)
    print("finished", finished, len(episode.rewards), flush=True)

collector = Collector(None, envs, buffer=buffer, store=store, seed=0, on_episode_done_hook=report)
collector.reset()
print("started", flush=True)
while True:
    collector.collect(n_step=10**7, random=True)
"""


def run_and_kill(tmp: Path, kind: str, background: bool, rng: random.Random) -> tuple[int, int, int]:
    """Start a collection, SIGKILL it once it reported a random number of finished steps (then a random
    moment later); returns (steps reported finished, steps stored, longest episode)."""
    root = tmp / "root"
    root.mkdir(parents=True)
    err_path = tmp / "stderr.txt"
    # a real process forked from a server that has imported vcollect (tests/forked_scripts.py)
    proc, fd = forked_scripts.start(["-c", textwrap.dedent(CHILD), kind, str(int(background)), str(SHARD)],
                                    {"VCOLLECT_DATASETS_PATH": str(root)}, str(tmp), str(err_path))
    out = open(fd)  # noqa: SIM115 - read to its end by the pump thread
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        with out:
            for line in out:
                lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    target = rng.randint(2 * SHARD, 8 * SHARD)
    reported = longest = 0
    deadline = time.monotonic() + 60
    try:
        while reported < target:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, err_path.read_text()
            if line.startswith("finished"):
                _, total, length = line.split()
                reported, longest = int(total), max(longest, int(length))
        time.sleep(rng.uniform(0, 0.03))
    finally:
        proc.kill()  # SIGKILL
        proc.join(timeout=30)
    while (line := lines.get(timeout=30)) is not None:  # what it printed up to the kill (whole lines)
        if line.startswith("finished") and line.endswith("\n"):
            _, total, length = line.split()
            reported, longest = int(total), max(longest, int(length))
    stored = load_dataset("crash/bound-v0", root=root).total_steps
    return reported, stored, longest


CASES = [(kind, background) for kind in ("cartpole", "frames") for background in (False, True)]


@pytest.mark.slow
def test_a_kill_loses_no_more_than_the_documented_bound(tmp_path: Path) -> None:
    rng = random.Random(4000 + SEED)
    kills = [(kind, background, round_) for kind, background in CASES for round_ in range(2)]
    results: dict[tuple[str, bool, int], tuple[int, int, int]] = {}
    errors: list[BaseException] = []

    def one(case: tuple[str, bool, int], seed: int) -> None:
        try:
            results[case] = run_and_kill(tmp_path / f"{case[0]}-{case[1]}-{case[2]}", case[0], case[1],
                                         random.Random(seed))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(case, rng.randrange(2**32))) for case in kills]
    for t in threads:  # all at once: each mostly waits for its imports and its disk
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    for (kind, background, round_), (reported, stored, longest) in sorted(results.items()):
        lost = reported - stored
        bound = crash_bound(SHARD, longest, background)
        assert 0 <= lost < bound, (kind, background, round_, reported, stored, longest, bound)
