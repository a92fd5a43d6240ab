"""Ray: RayVectorEnv and DistributedCollector on a real local Ray (ray.init(num_cpus=2), once per session).

Every worker here is a real Ray actor process writing real HDF5 shards under tmp_path.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from tests.envs import BadObsEnv, CountingEnv, DictObsEnv, FailingEnv, SlowEnv
from tests.replay import assert_replays
from vcollect import Collector, DummyVectorEnv, make_vector
from vcollect.distributed import DistributedCollector, derive_seeds
from vcollect.envs.ray_env import RayVectorEnv
from vcollect.errors import (
    CollectorStateError,
    DatasetNotFoundError,
    EnvWorkerError,
    ObservationError,
    UnfinishedEpisodesWarning,
    WorkerLostError,
)
from vcollect.store import EpisodeStore, StoreOptions, load_dataset

CARTPOLE_OBS = gym.spaces.Box(
    np.array([-4.8, -np.inf, -0.41887903, -np.inf], np.float32),
    np.array([4.8, np.inf, 0.41887903, np.inf], np.float32),
    dtype=np.float32,
)


# ---------------------------------------------------------------- helpers (top level: workers import them)


class FaultOnceEnv(CountingEnv):
    """A CountingEnv; the first instance built anywhere (it wins the O_EXCL creation of `flag` and writes
    "<pid> <how many FaultOnceEnvs its process built before it>" there) fails at its `at`-th step since
    construction: its process exits (fault="exit") or its step raises (fault="raise")."""

    built_in_this_process = 0

    def __init__(self, flag: str, at: int, fault: str = "exit", episode_length: int = 5) -> None:
        super().__init__(episode_length)
        self.total_steps = 0
        self.fault = fault
        self.at: int | None = None
        local_index = FaultOnceEnv.built_in_this_process
        FaultOnceEnv.built_in_this_process += 1
        try:
            fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{os.getpid()} {local_index}".encode())
        os.close(fd)
        self.at = at

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.total_steps += 1
        if self.total_steps == self.at:
            if self.fault == "exit":
                os._exit(3)
            raise RuntimeError(f"FaultOnceEnv failed at step {self.at}")
        return super().step(action)


def linear_torch_policy(observation_space: gym.Space, action_space: gym.Space) -> Any:
    """A TorchPolicy on a Linear(obs, n_actions) layer: its bias alone decides a zero-weight layer's action."""
    import torch

    from vcollect.policies import TorchPolicy

    torch.manual_seed(0)
    return TorchPolicy(torch.nn.Linear(observation_space.shape[0], int(action_space.n)), action_space)


def episode_key(env_id, seed, observations, actions, rewards, terminations, truncations) -> tuple:
    return (
        int(env_id),
        int(seed),
        np.asarray(observations, np.float32).tobytes(),
        np.asarray(actions, np.int64).tobytes(),
        np.asarray(rewards, np.float64).tobytes(),
        np.asarray(terminations, bool).tobytes(),
        np.asarray(truncations, bool).tobytes(),
    )


def dataset_keys(dataset_id: str, root: Path) -> list[tuple]:
    return [
        episode_key(ep.env_id, ep.seed, ep.observations, ep.actions, ep.rewards, ep.terminations, ep.truncations)
        for ep in load_dataset(dataset_id, root=root)
    ]


def new_dataset(dataset_id: str, root: Path, obs_space: gym.Space, act_space: gym.Space) -> None:
    EpisodeStore.create(dataset_id, obs_space, act_space, root=root).close()


def counting_dataset(root: Path) -> str:
    new_dataset("test/counting-v0", root, CountingEnv().observation_space, CountingEnv().action_space)
    return "test/counting-v0"


def assert_same_results(x: Any, y: Any) -> None:
    """Equal nested results: tuples/lists/dicts compared item by item, arrays exactly (dtype too)."""
    if isinstance(x, dict):
        assert isinstance(y, dict) and list(x) == list(y)
        for key in x:
            assert_same_results(x[key], y[key])
    elif isinstance(x, (tuple, list)):
        assert type(x) is type(y) and len(x) == len(y)
        for a, b in zip(x, y):
            assert_same_results(a, b)
    elif isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray) and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    else:
        assert x == y


@pytest.fixture
def ray_ready(ray_local: Any) -> Any:
    """The session's Ray, with this module's helpers sent to workers by value: pytest imports this file
    as a top-level module from tests/, which the worker processes cannot import by name."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_local


# ---------------------------------------------------------------- RayVectorEnv


def test_ray_vector_env_matches_dummy_sync_and_async(ray_ready: Any) -> None:
    fns = [lambda: DictObsEnv(2, 6, render_mode="rgb_array") for _ in range(3)]
    ray_env, dummy = RayVectorEnv(fns), DummyVectorEnv(fns)
    try:
        assert ray_env.num_envs == 3 and ray_env.single_observation_space == dummy.single_observation_space
        assert_same_results(ray_env.reset(seeds=[1, 2, 3]), dummy.reset(seeds=[1, 2, 3]))
        ray_env.step(np.array([0, 1, 2]))
        dummy.step(np.array([0, 1, 2]))
        frames = ray_env.render()
        assert frames is not None and len(frames) == 3 and int(frames[0][0, 0, 0]) == 1
        assert_same_results(frames, dummy.render())
        rng = np.random.default_rng(0)
        for _ in range(12):  # includes finished envs being reset, and subsets in a non-sorted order
            ids = rng.permutation(3)[: rng.integers(1, 4)]
            actions = rng.integers(0, 3, size=ids.size)
            got, want = ray_env.step(actions, ids), dummy.step(actions, ids)
            assert_same_results(got, want)
            done = ids[np.logical_or(got[2], got[3])]
            if done.size:
                assert_same_results(ray_env.reset(done, seeds=7), dummy.reset(done, seeds=7))

        # async half: send to a subset, the in-flight set, busy ids rejected, recv gets them all
        ray_env.reset(seeds=[4, 5, 6])
        dummy.reset(seeds=[4, 5, 6])
        ray_env.send(np.array([2, 1]), [2, 0])
        assert ray_env.in_flight.tolist() == [0, 2]
        with pytest.raises(ValueError, match=r"\[0\] already have a step or reset in flight"):
            ray_env.send(np.array([1]), [0])
        obs, rewards, terms, truncs, infos, ids = ray_env.recv(min_ready=2)
        assert ids.tolist() == [0, 2] and ray_env.in_flight.size == 0
        assert_same_results((obs, rewards, terms, truncs, infos), dummy.step(np.array([1, 2]), [0, 2]))
        with pytest.raises(ValueError, match="no step in flight"):
            ray_env.recv()
        ray_env.reset_async([1], seeds=[9])
        obs, infos, ids = ray_env.recv_reset()
        assert ids.tolist() == [1]
        assert_same_results((obs, infos), dummy.reset([1], seeds=[9]))
    finally:
        ray_env.close()
        dummy.close()
    ray_env.close()  # idempotent
    with pytest.raises(CollectorStateError, match="closed"):
        ray_env.step(np.zeros(3, np.int64))


def test_ray_vector_env_env_error_and_dead_actor(ray_ready: Any) -> None:
    envs = RayVectorEnv([lambda: CountingEnv(100), lambda: FailingEnv(fail_step=2)])
    try:
        envs.reset(seeds=0)
        envs.step(np.zeros(2, np.int64))
        with pytest.raises(EnvWorkerError, match="FailingEnv exploded at step 2") as info:
            envs.step(np.zeros(2, np.int64))
        assert info.value.env_id == 1
        assert "in step" in info.value.traceback_text  # the env's own traceback, from the actor
        obs, *_ = envs.step(np.zeros(1, np.int64), [0])  # env 0 is fine and went on stepping
        assert obs[0, 0] == 3.0

        actor = envs._actors[0]
        ray_ready.kill(actor)
        deadline = time.monotonic() + 30
        while True:  # ray.kill returns at once: wait (bounded) until the actor no longer answers
            try:
                ray_ready.get(actor.describe.remote(), timeout=5)
            except ray_ready.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline, "the killed actor still answers after 30 s"
        envs.send(np.zeros(1, np.int64), [0])
        with pytest.raises(EnvWorkerError, match="actor running env 0 .*died") as info:
            envs.recv()
        assert info.value.env_id == 0 and envs.closed
    finally:
        envs.close()


def test_make_vector_ray_backend_and_recv_timeout(ray_ready: Any) -> None:
    envs = make_vector(SlowEnv, 1, backend="ray", env_kwargs={"fast_time": 0.0, "slow_prob": 0.0})
    try:
        assert isinstance(envs, RayVectorEnv)
        envs.reset_async(seeds=1, options={"reset_time": 1.0})
        with pytest.raises(TimeoutError, match=r"env ids in flight: \[0\]"):
            envs.recv_reset(timeout=0.01)
        obs, _, ids = envs.recv_reset()  # nothing was lost by the timeout
        assert ids.tolist() == [0] and obs.shape == (1, 4)
        np.testing.assert_array_equal(obs[0], gym.make("CartPole-v1").reset(seed=1)[0])
    finally:
        envs.close()


def test_missing_ray_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ImportError, match=r"vcollect\[ray\]"):
        make_vector("CartPole-v1", 1, backend="ray")
    with pytest.raises(ImportError, match=r"vcollect\[ray\]"):
        DistributedCollector("CartPole-v1", None, num_workers=1, envs_per_worker=1)


def test_bad_arguments_fail_before_any_actor_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vcollect.async_collector", None)  # as if it did not exist
    with pytest.raises(ImportError, match="collector='async'.*vcollect.async_collector"):
        DistributedCollector("CartPole-v1", None, num_workers=1, envs_per_worker=1, collector="async")
    with pytest.raises(ValueError, match="collector must be one of"):
        DistributedCollector("CartPole-v1", None, num_workers=1, envs_per_worker=1, collector="fast")
    with pytest.raises(ValueError, match="num_workers must be a positive integer"):
        DistributedCollector("CartPole-v1", None, num_workers=0, envs_per_worker=1)


# ---------------------------------------------------------------- DistributedCollector


def test_exact_counts_across_two_workers(ray_ready: Any, tmp_path: Path) -> None:
    dataset_id = counting_dataset(tmp_path)
    with DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=1,
        env_kwargs={"episode_length": 5}, flush_every_call=True,
    ) as dc:
        assert dc.num_envs == 4 and dc.observation_space == CountingEnv().observation_space
        stats = dc.collect(n_step=23, random=True)
        assert stats.n_collected_steps == 23
        assert {w: s.n_collected_steps for w, s in dc.last_worker_stats.items()} == {0: 12, 1: 11}
        assert np.all(stats.lens == 5) and np.all(stats.returns == 5.0)
        ds = load_dataset(dataset_id, root=tmp_path)
        assert ds.total_episodes == stats.n_collected_episodes and ds.total_steps == stats.lens.sum()

        stats = dc.collect(n_episode=7, random=True)
        assert stats.n_collected_episodes == 7 and stats.returns.size == 7 and np.all(stats.lens == 5)
        # the extra episode goes to the worker after the one that had the extra step last time
        assert {w: s.n_collected_episodes for w, s in dc.last_worker_stats.items()} == {0: 3, 1: 4}
        ds2 = load_dataset(dataset_id, root=tmp_path)
        assert ds2.total_episodes == ds.total_episodes + 7
        assert ds2.total_steps == ds.total_steps + stats.lens.sum()
        env_ids = np.array([ep.env_id for ep in ds2])
        assert set(env_ids.tolist()) == {0, 1, 2, 3}  # global ids: worker 1's envs are 2 and 3

        stats = dc.collect(n_step=1, random=True)  # fewer than workers: one worker idles
        assert stats.n_collected_steps == 1 and len(dc.last_worker_stats) == 1

        with pytest.raises(ValueError, match="exactly one of n_step or n_episode"):
            dc.collect(random=True)
        with pytest.raises(ValueError, match="positive integer"):
            dc.collect(n_step=0, random=True)
        with pytest.raises(ValueError, match=r"distributed worker 0 \(global env ids 0\.\.1.*no policy"):
            dc.collect(n_step=4)  # no policy_fn: only random=True works, said by the workers
        with pytest.raises(TypeError, match="distributed worker 0 .*no load_state_dict"):
            dc.set_policy_weights({"bias": 0})
    with pytest.raises(CollectorStateError, match="closed"):
        dc.collect(n_step=2, random=True)


def test_without_episode_stats_workers_reply_moments_and_the_driver_keeps_a_bounded_amount(
    ray_ready: Any, tmp_path: Path
) -> None:
    """keep_episode_stats=False (the CLI's choice): no per-episode arrays come back from the workers or stay
    with the driver, so what it keeps per call does not grow with the call; counts stay exact."""
    dataset_id = counting_dataset(tmp_path)
    with DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=3, store=dataset_id, root=tmp_path, seed=1,
        env_kwargs={"episode_length": 5}, flush_every_call=True,
    ) as dc:
        kept_bytes, stored = [], 0
        for kind, n in [("n_step", 300), ("n_step", 3_000), ("n_episode", 601)]:
            stats = dc.collect(**{kind: n}, random=True, keep_episode_stats=False)
            assert (stats.n_collected_steps if kind == "n_step" else stats.n_collected_episodes) == n
            for part in [stats, *dc.last_worker_stats.values()]:
                assert part.returns.size == part.lens.size == 0
                assert part.returns_moments is not None and part.lens_moments is not None
                assert part.returns_moments.count == part.lens_moments.count == part.n_collected_episodes > 0
            assert stats.returns_stat is not None and stats.lens_stat is not None
            assert (stats.returns_stat.mean, stats.returns_stat.std, stats.lens_stat.max) == (5.0, 0.0, 5.0)
            ds = load_dataset(dataset_id, root=tmp_path)
            assert ds.total_episodes - stored == stats.n_collected_episodes
            stored = ds.total_episodes
            kept_bytes.append(len(pickle.dumps((stats, dc.last_worker_stats))))
        assert max(kept_bytes) < 1.2 * kept_bytes[0], kept_bytes  # 10x the steps: the same few numbers
        kept = dc.collect(n_episode=7, random=True)  # the default keeps every episode's values
        assert kept.returns.tolist() == [5.0] * 7 and kept.returns_moments is None


def test_dataset_is_the_union_of_worker_episodes_and_replays(ray_ready: Any, tmp_path: Path) -> None:
    new_dataset("test/cartpole-v0", tmp_path, CARTPOLE_OBS, gym.spaces.Discrete(2))
    with DistributedCollector(
        "CartPole-v1", None, num_workers=2, envs_per_worker=2, store="test/cartpole-v0", root=tmp_path, seed=7
    ) as dc:
        stats = dc.collect(n_episode=8, random=True)
        seeds = list(dc.worker_seeds)
    assert seeds == derive_seeds(7, 2)[1] and len(set(seeds)) == 2  # reproducible, distinct per worker
    assert stats.n_collected_episodes == 8

    # the same work done here, one plain Collector per worker seed writing with the worker's env id offset,
    # gives exactly the stored episodes
    new_dataset("test/local-v0", tmp_path, CARTPOLE_OBS, gym.spaces.Discrete(2))
    for w, seed in enumerate(seeds):
        store = EpisodeStore.open("test/local-v0", tmp_path, env_id_offset=2 * w)
        with store, Collector(None, make_vector("CartPole-v1", 2), store=store, seed=seed) as collector:
            collector.collect(n_episode=4, random=True, reset_before_collect=True)
    expected = dataset_keys("test/local-v0", tmp_path)
    assert len(expected) == 8
    stored = dataset_keys("test/cartpole-v0", tmp_path)
    assert sorted(stored) == sorted(expected)
    assert sorted(stats.returns.tolist()) == sorted(float(np.frombuffer(k[4]).sum()) for k in stored)

    # every stored episode replays from its seed and actions
    env = gym.make("CartPole-v1")
    for ep in load_dataset("test/cartpole-v0", root=tmp_path):
        assert_replays(env, ep)


@pytest.mark.parametrize("transport", ["shared_fs", "object_store"])
def test_the_env_spec_is_recorded_with_either_transport(ray_ready: Any, tmp_path: Path, transport: str) -> None:
    """The workers' collectors offer their envs' spec to their sink (AcceptsEnvSpec): an EpisodeStore of
    their own, or a RemoteSink forwarding it to the writer actor; the dataset, created without one, then
    names its env, so recover_environment() makes it."""
    new_dataset("test/spec-v0", tmp_path, CARTPOLE_OBS, gym.spaces.Discrete(2))
    with DistributedCollector(
        "CartPole-v1", None, num_workers=2, envs_per_worker=2, store="test/spec-v0", root=tmp_path, seed=5,
        transport=transport,
    ) as dc:
        dc.collect(n_episode=4, random=True)
    data = load_dataset("test/spec-v0", root=tmp_path)
    assert data.total_episodes == 4
    assert data.env_spec is not None and data.env_spec.id == "CartPole-v1"
    env = data.recover_environment()
    assert env.spec is not None and env.spec.id == "CartPole-v1"
    for episode in data:
        assert_replays(env, episode)


def _worker_store(worker: Any) -> dict[str, Any]:
    """What a worker actor's collector writes to (run inside the actor by __ray_call__)."""
    from vcollect.store.sink import EpisodeSink

    store = worker.collector.store
    return {
        "type": type(store).__name__,
        "is_sink": isinstance(store, EpisodeSink),
        "is_writer": store is worker.writer,
        "offset": store.env_id_offset,
        "shards": [str(p) for p in store.shards_written],
    }


def test_workers_hand_their_episode_store_itself_to_the_collector(ray_ready: Any, tmp_path: Path) -> None:
    import h5py

    dataset_id = counting_dataset(tmp_path)
    with DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=2,
        env_kwargs={"episode_length": 3}, flush_every_call=True,
    ) as dc:
        dc.collect(n_episode=8, random=True)
        seen = [ray_ready.get(actor.__ray_call__.remote(_worker_store)) for actor in dc.workers]
    for w, info in enumerate(seen):
        # the full EpisodeSink (write_episodes: the collector's batched path), no wrapper in between
        assert info["type"] == "EpisodeStore" and info["is_sink"] and info["is_writer"]
        assert info["offset"] == 2 * w
        env_ids: list[int] = []
        for shard in info["shards"]:  # the shards this worker's writer committed hold its global env ids
            with h5py.File(shard, "r") as f:
                env_ids += f["episodes/env_id"][()].tolist()
        assert len(env_ids) >= 4 and set(env_ids) == {2 * w, 2 * w + 1}
    with pytest.raises(ValueError, match="store_kwargs cannot set env_id_offset"):
        DistributedCollector(CountingEnv, None, num_workers=1, envs_per_worker=1, store=dataset_id,
                             root=tmp_path, store_kwargs={"env_id_offset": 3})


def test_seed_every_reset_false_reaches_the_workers(ray_ready: Any, tmp_path: Path) -> None:
    new_dataset("test/first-seeded-v0", tmp_path, CARTPOLE_OBS, gym.spaces.Discrete(2))
    with DistributedCollector(
        "CartPole-v1", None, num_workers=2, envs_per_worker=1, store="test/first-seeded-v0", root=tmp_path,
        seed=5, seed_every_reset=False,
    ) as dc:
        assert dc.collect(n_episode=6, random=True).n_collected_episodes == 6
    episodes = list(load_dataset("test/first-seeded-v0", root=tmp_path))
    for env_id in (0, 1):  # each worker's env: its first episode seeded, the rest continue its generator
        seeds = [episode.seed for episode in episodes if episode.env_id == env_id]
        assert len(seeds) == 3 and seeds[0] is not None and seeds[1:] == [None, None]


def test_weight_broadcast_changes_torch_policy_actions(ray_ready: Any, tmp_path: Path) -> None:
    import torch

    new_dataset("test/torch-v0", tmp_path, CARTPOLE_OBS, gym.spaces.Discrete(2))
    with DistributedCollector(
        "CartPole-v1", linear_torch_policy, num_workers=2, envs_per_worker=1, store="test/torch-v0",
        root=tmp_path, seed=0,
    ) as dc:
        seen = 0
        for bias, action in (([5.0, -5.0], 0), ([-5.0, 5.0], 1), ([5.0, -5.0], 0)):
            dc.set_policy_weights({"weight": torch.zeros(2, 4), "bias": torch.tensor(bias)})
            dc.collect(n_episode=2)
            dc.flush()
            episodes = list(load_dataset("test/torch-v0", root=tmp_path))[seen:]
            seen += len(episodes)
            assert len(episodes) == 2 and {ep.env_id for ep in episodes} == {0, 1}
            assert all(np.all(np.asarray(ep.actions) == action) for ep in episodes)


def test_killed_worker_raises_naming_it_and_close_works(ray_ready: Any, tmp_path: Path) -> None:
    dataset_id = counting_dataset(tmp_path)
    dc = DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        flush_every_call=True,
    )
    try:
        assert dc.collect(n_step=20, random=True).n_collected_episodes == 4  # 5 steps per env: one episode each
        killed = dc.workers[1]
        ray_ready.kill(killed)
        deadline = time.monotonic() + 30
        while True:  # ray.kill returns at once: wait (bounded) until the actor no longer answers, or the
            try:  # next collect may still run on it (then worker 1 finishes its second quota too)
                ray_ready.get(killed.__ray_ready__.remote(), timeout=5)
            except ray_ready.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline, "the killed worker still answers after 30 s"
        with pytest.raises(EnvWorkerError, match=r"distributed worker 1 \(global env ids 2\.\.3.* died during collect"):
            dc.collect(n_step=20, random=True)
        with pytest.raises(CollectorStateError, match=r"worker\(s\) \[1\] died"):
            dc.collect(n_step=20, random=True)
    finally:
        dc.close()
    dc.close()
    ds = load_dataset(dataset_id, root=tmp_path)  # every committed shard loads
    env_ids = sorted(ep.env_id for ep in ds)
    assert env_ids == [0, 0, 1, 1, 2, 3]  # worker 0 finished its second quota; worker 1 only the first


def test_worker_dying_mid_collect_keeps_committed_shards(ray_ready: Any, tmp_path: Path) -> None:
    dataset_id = counting_dataset(tmp_path)
    flag = tmp_path / "fault"
    dc = DistributedCollector(
        FaultOnceEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        env_kwargs={"flag": str(flag), "at": 40}, flush_every_call=True,
    )
    try:
        dc.collect(n_step=20, random=True)  # each env: 5 steps, one committed episode
        with pytest.raises(EnvWorkerError, match="died during collect") as info:
            dc.collect(n_step=200, random=True)  # one env dies at its 35th step of this call
        pids = [w["pid"] for w in dc.worker_info]
        dead = pids.index(int(flag.read_text().split()[0]))
        assert f"distributed worker {dead} " in str(info.value)
    finally:
        dc.close()
    env_ids = np.array([ep.env_id for ep in load_dataset(dataset_id, root=tmp_path)])
    dead_ids, live_ids = (env_ids // 2 == dead), (env_ids // 2 != dead)
    assert dead_ids.sum() == 2  # only what the dead worker committed in the first call
    assert live_ids.sum() == 2 + 20  # the other worker finished its 100 steps: 10 more episodes per env


def test_env_error_in_a_worker_names_the_global_env_id(ray_ready: Any, tmp_path: Path) -> None:
    flag = tmp_path / "fault"
    with DistributedCollector(
        FaultOnceEnv, None, num_workers=2, envs_per_worker=2, seed=0,
        env_kwargs={"flag": str(flag), "at": 3, "fault": "raise"},
    ) as dc:
        with pytest.raises(EnvWorkerError, match="FaultOnceEnv failed at step 3") as info:
            dc.collect(n_step=40, random=True)
        pid, local = map(int, flag.read_text().split())
        worker = [w["pid"] for w in dc.worker_info].index(pid)
        assert info.value.env_id == 2 * worker + local
        assert f"in distributed worker {worker} " in str(info.value) and f"local env {local}:" in str(info.value)
        assert 'raise RuntimeError(f"FaultOnceEnv failed' in info.value.traceback_text  # the env's own traceback


def test_store_not_reachable_from_workers(ray_ready: Any, tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match=r"distributed worker 0 .*not reachable at .*not-mounted"):
        DistributedCollector(
            "CartPole-v1", None, num_workers=2, envs_per_worker=1, store="test/absent-v0",
            root=tmp_path / "not-mounted",
        )


def test_workers_that_cannot_be_placed_time_out(ray_ready: Any) -> None:
    with pytest.raises(TimeoutError, match=r"distributed workers \[0, 1\] did not finish setup within 0.5 s"):
        DistributedCollector(
            "CartPole-v1", None, num_workers=2, envs_per_worker=1, startup_timeout=0.5,
            worker_options={"resources": {"no-such-resource": 1}},
        )


def test_async_collector_in_workers(ray_ready: Any, tmp_path: Path) -> None:
    pytest.importorskip("vcollect.async_collector")
    dataset_id = counting_dataset(tmp_path)
    with DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=3,
        collector="async",
    ) as dc:
        first = dc.collect(n_step=21, random=True)
        stats = dc.collect(n_episode=5, random=True)
        assert first.n_collected_steps == 21 and stats.n_collected_episodes == 5
        dc.flush()
        ds = load_dataset(dataset_id, root=tmp_path)
        assert ds.total_episodes == first.n_collected_episodes + 5
        assert set(ds.episode_lengths.tolist()) == {5}


# ---------------------------------------------------------------- the Collector's and the store's options


class InfObsEnv(CountingEnv):
    """A CountingEnv with an unbounded observation space whose step 2 of every episode observes inf."""

    def __init__(self) -> None:
        super().__init__(4)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return (np.array([np.inf], np.float32) if self.t == 2 else obs), reward, terminated, truncated, info


def _worker_options(worker: Any) -> dict[str, Any]:
    """Inside a worker actor: what its collector and writer were built with (run by __ray_call__)."""
    return {
        "validate": worker.collector.validate,
        "loop": type(worker.collector._loop).__name__,
        "background": worker.writer.options.background_commits,
        "pending": worker.writer.pending_episodes,
    }


def test_validate_false_reaches_the_workers(ray_ready: Any, tmp_path: Path) -> None:
    """validate=False: a worker stores an observation outside the space, as a Collector here would; with the
    default the worker refuses it."""
    env = BadObsEnv()
    new_dataset("test/bad-obs-v0", tmp_path, env.observation_space, env.action_space)
    with DistributedCollector(BadObsEnv, None, num_workers=1, envs_per_worker=2, store="test/bad-obs-v0",
                              root=tmp_path, seed=0, validate=False) as dc:
        assert [ray_ready.get(a.__ray_call__.remote(_worker_options))["validate"] for a in dc.workers] == [False]
        assert dc.collect(n_episode=2, random=True).n_collected_episodes == 2
    observations = np.concatenate([ep.observations for ep in load_dataset("test/bad-obs-v0", root=tmp_path)])
    assert np.any(observations == -5.0)  # stored as it came
    with DistributedCollector(BadObsEnv, None, num_workers=1, envs_per_worker=2, seed=0) as dc, pytest.raises(
        ObservationError, match=r"distributed worker 0 .*observation"
    ):
        dc.collect(n_episode=2, random=True)


def test_check_finite_reaches_the_workers(ray_ready: Any) -> None:
    with DistributedCollector(InfObsEnv, None, num_workers=1, envs_per_worker=2, seed=0, check_finite=True) as dc, \
            pytest.raises(ObservationError, match=r"distributed worker 0 .*not finite .*check_finite=True"):
        dc.collect(n_episode=2, random=True)


def test_stage_blocks_false_reaches_the_workers(ray_ready: Any, tmp_path: Path) -> None:
    """stage_blocks=False: a worker on a NEXT_STEP vector env records step by step (AllEnvLoop), as a Collector
    here would; background_commits reaches its store."""
    new_dataset("test/blocks-v0", tmp_path, CARTPOLE_OBS, gym.spaces.Discrete(2))
    with DistributedCollector("CartPole-v1", None, num_workers=1, envs_per_worker=2, backend="gymnasium",
                              store="test/blocks-v0", root=tmp_path, seed=0, stage_blocks=False,
                              store_options=StoreOptions(background_commits=True)) as dc:
        seen = ray_ready.get(dc.workers[0].__ray_call__.remote(_worker_options))
        stats = dc.collect(n_episode=3, random=True)
    assert seen["loop"] == "AllEnvLoop" and seen["background"] is True
    assert load_dataset("test/blocks-v0", root=tmp_path).total_episodes >= stats.n_collected_episodes == 3


def test_workers_commit_per_shard_size_and_on_flush(ray_ready: Any, tmp_path: Path) -> None:
    """By default a worker commits a shard when shard_steps are pending, not after every call; flush() and
    close() commit the rest, and then the dataset holds exactly the episodes reported."""
    dataset_id = counting_dataset(tmp_path)
    with DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=4,
        env_kwargs={"episode_length": 5}, store_kwargs={"shard_steps": 300},
    ) as dc:
        assert dc.flush_every_call is False
        first = dc.collect(n_step=20, random=True)  # 10 steps per worker: 2 episodes each, under 300 steps
        views = [ray_ready.get(a.__ray_call__.remote(_worker_options)) for a in dc.workers]
        assert [v["pending"] for v in views] == [2, 2] and not any(v["background"] for v in views)
        assert load_dataset(dataset_id, root=tmp_path).total_episodes == 0  # nothing committed by the call
        dc.flush()
        assert load_dataset(dataset_id, root=tmp_path).total_episodes == first.n_collected_episodes == 4
        second = dc.collect(n_step=2000, random=True)  # 1000 steps per worker: shards of 300+ steps committed
        during = load_dataset(dataset_id, root=tmp_path).total_episodes
        assert 4 < during < 4 + second.n_collected_episodes  # some shards committed in the call, the rest held
        third = dc.collect(n_episode=6, random=True)
    stored = load_dataset(dataset_id, root=tmp_path)
    reported = [first, second, third]
    assert stored.total_episodes == sum(s.n_collected_episodes for s in reported)
    assert stored.total_steps == sum(s.n_collected_steps for s in reported)
    with pytest.raises(ValueError, match="flush_every_call=False cannot be used with max_worker_restarts"):
        DistributedCollector(CountingEnv, None, num_workers=1, envs_per_worker=1, max_worker_restarts=1,
                             flush_every_call=False)



def test_a_worker_dying_mid_call_reports_its_committed_episodes_once(ray_ready: Any, tmp_path: Path) -> None:
    """Workers committing per shard size: a worker dies mid-call after committing a shard that starts with
    the episodes an earlier call reported (held, not yet committed); those are not reported again, so the
    error's stats and the earlier calls' reports together are exactly what is stored."""
    dataset_id = counting_dataset(tmp_path)
    flag = tmp_path / "fault"
    dc = DistributedCollector(
        FaultOnceEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path, seed=0,
        env_kwargs={"flag": str(flag), "at": 600}, store_kwargs={"shard_steps": 30},
    )
    try:
        first = dc.collect(n_step=20, random=True)  # 2 episodes per worker, held: under 30 steps
        with pytest.raises(WorkerLostError, match="died during collect") as info:
            dc.collect(n_step=4000, random=True)  # one env dies at its 600th step, after commits mid-call
    finally:
        dc.close()
    dead = [w["pid"] for w in dc.worker_info].index(int(flag.read_text().split()[0]))
    reported = first.n_collected_episodes + info.value.stats.n_collected_episodes
    stored = load_dataset(dataset_id, root=tmp_path)
    assert stored.total_episodes == reported
    dead_stored = sum(1 for ep in stored if ep.env_id // 2 == dead)
    assert dead_stored > 2  # its first call's 2 episodes, committed in the call it died in, and more
    assert dc.last_worker_stats[dead].n_collected_episodes == dead_stored - 2


def test_a_worker_killed_holding_uncommitted_episodes_is_warned_about_at_close(
    ray_ready: Any, tmp_path: Path
) -> None:
    dataset_id = counting_dataset(tmp_path)
    dc = DistributedCollector(CountingEnv, None, num_workers=2, envs_per_worker=2, store=dataset_id, root=tmp_path,
                              seed=0)
    try:
        assert dc.collect(n_step=20, random=True).n_collected_episodes == 4  # 2 per worker, held uncommitted
        killed = dc.workers[1]
        ray_ready.kill(killed)
        deadline = time.monotonic() + 30
        while True:  # bounded wait until the killed actor no longer answers
            try:
                ray_ready.get(killed.__ray_ready__.remote(), timeout=5)
            except ray_ready.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline, "the killed worker still answers after 30 s"
    finally:
        with pytest.warns(UnfinishedEpisodesWarning, match=r"workers 1 \(2 episodes, 10 steps\) died holding"):
            dc.close()
    assert sorted(ep.env_id for ep in load_dataset(dataset_id, root=tmp_path)) == [0, 1]  # worker 0's, committed


@pytest.mark.parametrize("hint", [None, "--unfinished truncate"])
def test_a_worker_names_the_option_of_the_entry_point_that_made_it(
    tmp_path: Path, ray_local: Any, hint: str | None
) -> None:
    """A worker's collector warns once about the episodes its close drops, naming DistributedCollector's
    keyword, or the option its maker named (the command line's flag)."""
    import functools
    import warnings
    from dataclasses import replace

    from vcollect.distributed.worker import CollectorWorker, WorkerSpec

    env = CountingEnv(10)
    EpisodeStore.create("w/hint-v0", env.observation_space, env.action_space, root=tmp_path, overwrite=True).close()
    spec = WorkerSpec(env=functools.partial(CountingEnv, 10), env_kwargs={}, backend="dummy", backend_kwargs={},
                      num_envs=2, env_id_offset=0, policy_fn=None, seed=0, collector="sync", store_id="w/hint-v0",
                      root=str(tmp_path))
    if hint is not None:
        spec = replace(spec, unfinished_hint=hint)
    worker = CollectorWorker(0)
    assert worker.setup(spec)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert worker.collect(5, None, True)[0] and worker.collect(4, None, True)[0]
        assert worker.reset(None)[0]  # drops 2 running episodes: said here
        assert worker.collect(6, None, True)[0]
        assert worker.close()[0]  # drops 2 more: not said again
    said = [str(w.message) for w in caught if issubclass(w.category, UnfinishedEpisodesWarning)]
    assert len(said) == 1, said
    assert said[0].startswith("2 episodes still running at reset (9 steps) were not stored; pass ")
    assert (hint or "DistributedCollector(..., unfinished='truncate')") in said[0]
    assert hint is None or "Collector(" not in said[0]
