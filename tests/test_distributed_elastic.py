"""DistributedCollector under worker failure (max_worker_restarts) and without a shared filesystem
(transport="object_store"), on the session's real local Ray (ray.init(num_cpus=2)); workers are killed for
real (ray.kill, an env calling os._exit mid-episode) and every count is checked against the HDF5 shards."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from tests.envs import CountingEnv, ExitOnceEnv
from tests.replay import assert_replays
from vcollect.collecting.episode_writer import WRITE_BATCH
from vcollect.distributed import DistributedCollector, replacement_seed
from vcollect.errors import ActionError, UnfinishedEpisodesWarning, WorkerLostError
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.layout.dataset_info import SHARDS_DIR

pytestmark = pytest.mark.slow  # each test starts and replaces real Ray actors: 5 to 10 s apiece

CARTPOLE_OBS = gym.spaces.Box(
    np.array([-4.8, -np.inf, -0.41887903, -np.inf], np.float32),
    np.array([4.8, np.inf, 0.41887903, np.inf], np.float32),
    dtype=np.float32,
)


@pytest.fixture
def ray_ready(ray_local: Any) -> Any:
    """The session's Ray, with this module sent to workers by value (they cannot import it by name)."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_local


def new_dataset(root: Path, obs: gym.Space, act: gym.Space, name: str = "test/elastic-v0") -> str:
    EpisodeStore.create(name, obs, act, root=root).close()
    return name


def shard_writers(root: Path, dataset_id: str) -> list[str]:
    """The writer name of every committed shard (`<time>-<writer>-<seq>.h5`), in commit order."""
    shards = sorted((root / dataset_id.replace("/", os.sep) / SHARDS_DIR).glob("*.h5"))
    return [re.match(r"\d+-(.+)-\d+\.h5$", p.name).group(1) for p in shards]  # type: ignore[union-attr]


def wait_dead(ray: Any, actor: Any) -> None:
    """Bounded wait until a killed actor no longer answers (ray.kill returns at once)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        assert time.monotonic() < deadline, "the killed actor still answers after 30 s"


@pytest.mark.parametrize("transport", ["shared_fs", "object_store"])
def test_worker_dying_mid_episode_is_replaced_and_totals_stay_exact(
    ray_ready: Any, tmp_path: Path, transport: str
) -> None:
    dataset_id = new_dataset(tmp_path, CountingEnv().observation_space, CountingEnv().action_space)
    flag = tmp_path / "fault"
    # one env exits at its `at`-th step, mid-episode, after its worker's two envs finished `at` episodes of
    # 2 steps between them: more than a batch (EpisodeWriter.WRITE_BATCH) handed to the store
    at = WRITE_BATCH + 22
    n_step = 4 * (at + 50)  # 4 envs, each past its `at`-th step
    dc = DistributedCollector(
        ExitOnceEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        env_kwargs={"flag": str(flag), "at": at, "episode_length": 2}, store_kwargs={"shard_steps": 10},
        max_worker_restarts=1,
        transport=transport, unfinished="truncate",
    )
    try:
        first = dc.collect(n_step=22, random=True)  # 11 steps per worker: unfinished episodes carry over
        before = load_dataset(dataset_id, root=tmp_path)
        writers_before = shard_writers(tmp_path, dataset_id)
        pids = [info["pid"] for info in dc.worker_info]
        dead = pids.index(int(flag.read_text()))
        old_writer = dc.worker_info[dead]["writer"]
        # the batch handed over before the exit is committed as shards of 10 steps
        stats = dc.collect(n_step=n_step, random=True)
        assert stats.n_collected_steps == n_step and first.n_collected_steps == 22
        assert dc.restarts == [int(w == dead) for w in range(2)]
        assert dc.worker_info[dead]["pid"] != pids[dead] and dc.worker_info[dead]["writer"] != old_writer
        assert dc.worker_seeds[dead] == replacement_seed(dc.seed, dead, 1)
        after = load_dataset(dataset_id, root=tmp_path)
        # every episode stored by the call is reported once, with its length, and nothing else is reported
        new_lens = sorted(after.episode_lengths.tolist()[before.total_episodes:])
        assert after.total_episodes - before.total_episodes == stats.n_collected_episodes
        assert new_lens == sorted(stats.lens.tolist())
        writers = shard_writers(tmp_path, dataset_id)
        if transport == "shared_fs":  # the worker commits its own shards before it goes on: they stay
            assert writers.count(old_writer) > writers_before.count(old_writer)
        else:  # batches still in flight to the writer actor when the worker died are dropped, by design; on a
            # loaded machine that can be all of the call's (seen once), so only "none taken back" is certain
            assert writers.count(old_writer) >= writers_before.count(old_writer)
    finally:
        dc.close()  # unfinished="truncate": the steps still running are stored too
    # every step reported was stored exactly once: the dead worker's committed part counted (its episode
    # carried over from the first call included), its uncommitted part collected again by the replacement;
    # a wrong count changes the replacement's quota and so the stored total
    final = load_dataset(dataset_id, root=tmp_path)
    assert final.total_steps == 22 + n_step
    dead_envs = [ep for ep in final if ep.env_id // 2 == dead]
    seeds = [ep.seed for ep in dead_envs]
    assert len(seeds) == len(set(seeds))  # the replacement's seed stream differs from the dead worker's
    writers = shard_writers(tmp_path, dataset_id)
    assert len(set(writers)) == 3  # no shard name reused: the replacement writes under a new name


def test_killed_idle_worker_replaced_until_restarts_run_out(ray_ready: Any, tmp_path: Path) -> None:
    dataset_id = new_dataset(tmp_path, CountingEnv().observation_space, CountingEnv().action_space)
    dc = DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        max_worker_restarts=1,
    )
    try:
        assert dc.collect(n_episode=4, random=True).n_collected_episodes == 4
        killed = dc.workers[1]
        ray_ready.kill(killed)
        wait_dead(ray_ready, killed)
        stats = dc.collect(n_episode=6, random=True)  # worker 1 replaced, its whole quota collected again
        assert stats.n_collected_episodes == 6 and dc.restarts == [0, 1]
        assert load_dataset(dataset_id, root=tmp_path).total_episodes == 10
        killed = dc.workers[1]
        ray_ready.kill(killed)
        wait_dead(ray_ready, killed)
        with pytest.raises(WorkerLostError, match=r"distributed worker 1 \(global env ids 2\.\.3.*after 1 repl") as info:
            dc.collect(n_episode=6, random=True)
        assert info.value.stats.n_collected_episodes == 3  # worker 0's quota; worker 1 committed nothing
        assert "collected so far in this call" in "".join(info.value.__notes__)
    finally:
        dc.close()
    assert load_dataset(dataset_id, root=tmp_path).total_episodes == 13


def _worker_view(worker: Any) -> dict[str, Any]:
    """Inside a worker actor: its datasets root and its sink (run by __ray_call__)."""
    from vcollect.store.layout.naming import resolve_root

    return {"root": str(resolve_root()), "sink": type(worker.writer).__name__, "stalls": worker.writer.stalls}


def test_object_store_transport_needs_no_shared_path(ray_ready: Any, tmp_path: Path) -> None:
    driver_root, worker_root = tmp_path / "driver", tmp_path / "workers-see-this"
    worker_root.mkdir()
    dataset_id = new_dataset(driver_root, CARTPOLE_OBS, gym.spaces.Discrete(2), "test/cartpole-v0")
    with DistributedCollector(
        "CartPole-v1", None, num_workers=2, envs_per_worker=2, store=dataset_id, root=driver_root, seed=3,
        transport="object_store", max_in_flight=1,
        worker_options={"runtime_env": {"env_vars": {"VCOLLECT_DATASETS_PATH": str(worker_root)}}},
    ) as dc:
        views = [ray_ready.get(a.__ray_call__.remote(_worker_view), timeout=60) for a in dc.workers]
        _, sink_pid = ray_ready.get(dc.writer_actor.node_and_pid.remote(), timeout=60)
        first = dc.collect(n_episode=10, random=True)
        stats = dc.collect(n_episode=300, random=True)  # 150 per worker: sent in batches of up to 64
        stalls = [ray_ready.get(a.__ray_call__.remote(_worker_view), timeout=60)["stalls"] for a in dc.workers]
        worker_pids = {info["pid"] for info in dc.worker_info}
    assert all(v["root"] == str(worker_root) and v["sink"] == "RemoteSink" for v in views)
    assert list(worker_root.iterdir()) == []  # the workers' view of the datasets root stayed empty
    assert min(stalls) > 0  # max_in_flight=1: a worker waited for the writer before sending more
    # every shard was written by the writer actor's process, none by a worker
    assert {int(w[1:].split("x")[0]) for w in shard_writers(driver_root, dataset_id)} == {sink_pid}
    assert sink_pid not in worker_pids
    ds = load_dataset(dataset_id, root=driver_root)
    assert ds.total_episodes == first.n_collected_episodes + stats.n_collected_episodes
    assert sorted(ds.episode_lengths.tolist()) == sorted([*first.lens.tolist(), *stats.lens.tolist()])
    assert set(int(ep.env_id) for ep in ds) == {0, 1, 2, 3}
    env = gym.make("CartPole-v1")
    for episode in ds:
        assert_replays(env, episode)


class ConstantPolicy:
    """Acts weights["action"] for every env (None before any weights): what a replacement starts with shows."""

    def __init__(self) -> None:
        self.action: int | None = None

    def __call__(self, obs: Any, state: Any = None) -> tuple[Any, None]:
        assert self.action is not None, "no weights loaded"
        return np.full(len(obs), self.action, dtype=np.int64), None

    def load_state_dict(self, weights: dict[str, int]) -> None:
        self.action = int(weights["action"])


def constant_policy(observation_space: gym.Space, action_space: gym.Space) -> ConstantPolicy:
    return ConstantPolicy()


def test_replacement_gets_the_latest_weights(ray_ready: Any, tmp_path: Path) -> None:
    dataset_id = new_dataset(tmp_path, CARTPOLE_OBS, gym.spaces.Discrete(2), "test/weights-v0")
    with DistributedCollector(
        "CartPole-v1", constant_policy, num_workers=2, envs_per_worker=1, store=dataset_id, root=tmp_path,
        seed=0, max_worker_restarts=2,
    ) as dc:
        dc.set_policy_weights({"action": 1})
        killed = dc.workers[0]
        ray_ready.kill(killed)
        wait_dead(ray_ready, killed)
        dc.collect(n_episode=4)  # worker 0 replaced inside collect: it must start with the weights above
        killed = dc.workers[1]
        ray_ready.kill(killed)
        wait_dead(ray_ready, killed)
        dc.set_policy_weights({"action": 0})
        dc.collect(n_episode=4)  # worker 1 was replaced by set_policy_weights
        assert dc.restarts == [1, 1]
    episodes = list(load_dataset(dataset_id, root=tmp_path))
    assert len(episodes) == 8
    assert all(np.all(np.asarray(ep.actions) == 1) for ep in episodes[:4])
    assert all(np.all(np.asarray(ep.actions) == 0) for ep in episodes[4:])


@pytest.mark.parametrize("found_by", ["collect", "set_policy_weights", "reset"])
def test_dead_workers_unfinished_steps_are_collected_again_not_lost(
    ray_ready: Any, tmp_path: Path, found_by: str
) -> None:
    """A worker killed between calls takes its unfinished episodes with it, whose steps an earlier call
    counted: its replacement collects them again, uncounted, so every step reported ends up stored. With
    reset first, the episodes it stored truncated must be committed before it can die."""
    dataset_id = new_dataset(tmp_path, CountingEnv().observation_space, CountingEnv().action_space)
    dc = DistributedCollector(
        CountingEnv, constant_policy, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        env_kwargs={"episode_length": 4}, max_worker_restarts=1, transport="object_store", unfinished="truncate",
    )
    try:
        first = dc.collect(n_step=22, random=True)  # 11 steps per worker: envs of 6 and 5 steps, both running
        assert load_dataset(dataset_id, root=tmp_path).total_steps == 22 - 2 * (2 + 1)
        if found_by == "reset":
            dc.reset()  # unfinished="truncate": the running episodes are stored, truncated
        killed = dc.workers[1]
        ray_ready.kill(killed)
        wait_dead(ray_ready, killed)
        if found_by == "set_policy_weights":
            dc.set_policy_weights({"action": 1})  # finds worker 1 dead and replaces it
        second = dc.collect(n_step=40, random=True)
        assert (first.n_collected_steps, second.n_collected_steps) == (22, 40) and dc.restarts == [0, 1]
    finally:
        dc.close()
    assert load_dataset(dataset_id, root=tmp_path).total_steps == 22 + 40


def test_owed_steps_stay_owed_through_a_call_that_fails(ray_ready: Any, tmp_path: Path) -> None:
    """Steps a replaced worker owes (counted, never stored) are still owed after a call that was to collect
    them fails without a death (here every policy acts outside the space): that call neither collects nor
    counts them, the next one does, so every step reported ends up stored."""
    dataset_id = new_dataset(tmp_path, CountingEnv().observation_space, CountingEnv().action_space)
    dc = DistributedCollector(
        CountingEnv, constant_policy, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        env_kwargs={"episode_length": 4}, max_worker_restarts=1, transport="object_store", unfinished="truncate",
    )
    try:
        first = dc.collect(n_step=22, random=True)  # 11 steps per worker, unfinished episodes on both
        killed = dc.workers[1]
        ray_ready.kill(killed)
        wait_dead(ray_ready, killed)
        dc.set_policy_weights({"action": 7})  # replaces worker 1, whose carried steps are now owed; 7: no action
        with pytest.raises(ActionError, match="outside"):
            dc.collect(n_step=10)
        dc.set_policy_weights({"action": 1})
        second = dc.collect(n_step=40)
        assert (first.n_collected_steps, second.n_collected_steps) == (22, 40) and dc.restarts == [0, 1]
    finally:
        dc.close()
    assert load_dataset(dataset_id, root=tmp_path).total_steps == 22 + 40


def test_a_worker_dead_at_close_is_warned_about_with_the_steps_it_took(ray_ready: Any, tmp_path: Path) -> None:
    """Killed after the last collect, a worker's unfinished episodes (counted, never stored) cannot be
    collected again: close says so, naming the worker and the steps, and the rest is stored."""
    dataset_id = new_dataset(tmp_path, CountingEnv().observation_space, CountingEnv().action_space)
    dc = DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        env_kwargs={"episode_length": 4}, max_worker_restarts=1, transport="object_store", unfinished="truncate",
    )
    try:
        stats = dc.collect(n_step=22, random=True)  # 11 steps per worker: running episodes of 1 and 2 steps
        killed = dc.workers[1]
        ray_ready.kill(killed)
        wait_dead(ray_ready, killed)
    finally:
        with pytest.warns(UnfinishedEpisodesWarning, match=r"workers 1 \(3 steps\) died after their last collect"):
            dc.close()
    assert load_dataset(dataset_id, root=tmp_path).total_steps == stats.n_collected_steps - 3


class HangOnceEnv(CountingEnv):
    """A CountingEnv; the first one built anywhere (O_EXCL on `flag`) blocks forever at its `at`-th step."""

    def __init__(self, flag: str, at: int) -> None:
        super().__init__(5)
        self.total_steps, self.at = 0, -1
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        self.at = at

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.total_steps += 1
        if self.total_steps == self.at:
            import threading

            threading.Event().wait()  # an in-process hang nothing inside the worker can interrupt
        return super().step(action)


def test_a_worker_hung_in_its_env_is_killed_after_worker_timeout(ray_ready: Any, tmp_path: Path) -> None:
    """worker_timeout: the hung worker is killed and replaced (its quota collected again), the call returns
    exact totals instead of waiting forever."""
    dataset_id = new_dataset(tmp_path, CountingEnv().observation_space, CountingEnv().action_space)
    flag = str(tmp_path / "hang-flag")
    dc = DistributedCollector(
        lambda: HangOnceEnv(flag, at=7), None, num_workers=2, envs_per_worker=1, store=dataset_id, root=tmp_path,
        seed=0, max_worker_restarts=1, worker_timeout=3.0,
    )
    try:
        start = time.monotonic()
        stats = dc.collect(n_episode=8, random=True)
        assert stats.n_collected_episodes == 8 and sum(dc.restarts) == 1
        assert time.monotonic() - start < 60
    finally:
        dc.close()
    assert load_dataset(dataset_id, root=tmp_path).total_episodes == 8
