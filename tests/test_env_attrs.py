"""get_env_attr / set_env_attr on every backend: a list in env-id order, Tianshou's semantics, the env
really changed (its next episodes show it), clear errors, and bounded waits for the out-of-process ones."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

from tests.envs import CountingEnv
from vcollect import Collector
from vcollect.envs import DummyVectorEnv, GymnasiumVectorEnv, RayVectorEnv, SubprocVectorEnv
from vcollect.errors import EnvAttributeError, EnvWorkerError


class AttrEnv(CountingEnv):
    """A CountingEnv (episodes of ``episode_length`` steps) behind a TimeLimit of 50, with a lock (which
    cannot be pickled) and a property that takes ``slow_s`` seconds to read."""

    slow_s = 0.0

    def __init__(self, index: int = 0) -> None:
        super().__init__(episode_length=10)
        self.index = index
        self.lock = threading.Lock()

    @property
    def slow(self) -> int:
        time.sleep(self.slow_s)
        return 1


def attr_env(index: int) -> gym.Env:
    return TimeLimit(AttrEnv(index), max_episode_steps=50)


def factories(n: int = 3) -> list[Any]:
    return [lambda i=i: attr_env(i) for i in range(n)]


def episode_length(envs: Any, env_id: int) -> int:
    """Steps until env_id's episode ends (every env stepped with action 0, the others reset as they end)."""
    envs.reset(seeds=0)
    for t in range(1, 200):
        _, _, terms, truncs, _ = envs.step(np.zeros(envs.num_envs, np.int64))
        done = np.flatnonzero(np.logical_or(terms, truncs))
        if env_id in done:
            return t
        if done.size:
            envs.reset(done, seeds=0)
    raise AssertionError("no episode end")


def check_backend(envs: Any, *, can_pickle_locks: bool = True) -> None:
    """What every backend with per-env envs must do."""
    assert envs.get_env_attr("index") == [0, 1, 2]
    assert envs.get_env_attr("index", [2, 0]) == [2, 0]  # in the order asked
    assert envs.get_env_attr("_max_episode_steps") == [50, 50, 50]  # a wrapper's attribute
    # a base-env attribute, set for env 1 only: its episodes end after 4 steps, the others' after 10
    envs.set_env_attr("episode_length", 4, [1])
    assert envs.get_env_attr("episode_length") == [10, 4, 10]
    assert episode_length(envs, 1) == 4 and episode_length(envs, 0) == 10
    # a wrapper attribute is set on the wrapper that has it: TimeLimit truncates env 2 at 3 steps
    envs.set_env_attr("_max_episode_steps", 3, 2)
    assert envs.get_env_attr("_max_episode_steps", [2]) == [3]
    assert episode_length(envs, 2) == 3
    # a new attribute is created (on the base env, as Tianshou does) and read back
    envs.set_env_attr("note", "x")
    assert envs.get_env_attr("note") == ["x", "x", "x"]
    with pytest.raises(EnvAttributeError, match=r"'nope' failed for env 2 \(and env ids \[0\]\)") as info:
        envs.get_env_attr("nope", [2, 0])
    assert info.value.env_ids == [2, 0]
    with pytest.raises(TypeError, match="attribute name is a str"):
        envs.get_env_attr(3)
    with pytest.raises(ValueError, match="unknown env id"):
        envs.get_env_attr("index", [5])
    if not can_pickle_locks:
        with pytest.raises(EnvAttributeError, match="'lock' failed for env 0"):
            envs.get_env_attr("lock")
    assert envs.get_env_attr("index") == [0, 1, 2]  # still usable after the errors


def test_dummy_vector_env_attributes() -> None:
    envs = DummyVectorEnv(factories())
    check_backend(envs)
    assert envs.envs[1].unwrapped.episode_length == 4
    assert envs.envs[0].unwrapped.note == "x"  # created on the base env, where the env's code sees it
    envs.send(np.zeros(1, np.int64), [1])
    with pytest.raises(ValueError, match=r"env ids \[1\] have a step or reset in flight"):
        envs.get_env_attr("index")
    envs.recv(min_ready=1)
    assert envs.get_env_attr("index") == [0, 1, 2]
    envs.close()


def test_subprocess_vector_env_attributes_with_worker_processes() -> None:
    envs = SubprocVectorEnv(factories(), num_workers=2, timeout=30.0)
    try:
        check_backend(envs, can_pickle_locks=False)
    finally:
        envs.close()


def test_subprocess_attribute_read_past_the_timeout_raises_and_closes() -> None:
    envs = SubprocVectorEnv([SlowAttrEnv] * 2, num_workers=2, timeout=0.5)
    envs.reset(seeds=0)
    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match="no reply within the timeout of 0.5 s to the get_env_attr"):
        envs.get_env_attr("slow", [1])
    assert time.monotonic() - start < 5.0
    assert envs.closed


class SlowAttrEnv(AttrEnv):
    slow_s = 30.0


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_gymnasium_sync_vector_env_attributes(mode: str) -> None:
    envs = GymnasiumVectorEnv.from_env_fns(factories(), autoreset_mode="disabled")
    check_backend(envs)
    envs.close()
    # autoresetting vector envs: the attribute reaches the env (it restarts with the new length itself)
    envs = GymnasiumVectorEnv.from_env_fns(factories(), autoreset_mode=mode)
    envs.set_env_attr("episode_length", 2, [0])
    assert envs.get_env_attr("episode_length") == [2, 10, 10]
    envs.reset(seeds=0)
    step = envs.step_all(np.zeros(3, np.int64))
    step = envs.step_all(np.zeros(3, np.int64))
    assert step.terminations.tolist() == [True, False, False]
    envs.close()


def test_gymnasium_async_vector_env_attributes_in_worker_processes() -> None:
    envs = GymnasiumVectorEnv.from_env_fns(factories(), vectorization_mode="async", autoreset_mode="disabled")
    try:
        assert envs.get_env_attr("index", [2, 0]) == [2, 0]
        envs.set_env_attr("episode_length", 4, [1])
        assert envs.get_env_attr("episode_length") == [10, 4, 10]
        assert episode_length(envs, 1) == 4
        with pytest.raises(EnvAttributeError, match=r"'nope' failed for env 1: the env has no attribute 'nope'"):
            envs.get_env_attr("nope", [1])
        assert envs.get_env_attr("index") == [0, 1, 2]  # the workers survived the unknown name
    finally:
        envs.close()


def test_vector_entry_points_have_no_per_env_attributes() -> None:
    envs = GymnasiumVectorEnv(gym.make_vec("CartPole-v1", 2, vectorization_mode="vector_entry_point"))
    with pytest.raises(EnvAttributeError, match="vector entry point"):
        envs.get_env_attr("gravity")
    envs.close()


def test_envpool_offers_its_config_and_refuses_setting() -> None:
    pytest.importorskip("envpool")
    from vcollect.envs import EnvPoolVectorEnv

    envs = EnvPoolVectorEnv.make("CartPole-v1", 2, seed=3)
    try:
        assert envs.get_env_attr("max_episode_steps") == [500, 500]
        assert envs.get_env_attr("seed", [1]) == [3]
        with pytest.raises(EnvAttributeError, match="neither its config"):
            envs.get_env_attr("gravity")
        with pytest.raises(EnvAttributeError, match="no attributes to set"):
            envs.set_env_attr("max_episode_steps", 3)
    finally:
        envs.close()


def test_collector_envs_recording_infos_forward_attributes() -> None:
    collector = Collector(None, factories(), record_infos=True)
    collector.envs.set_env_attr("episode_length", 3, [0])
    assert collector.envs.get_env_attr("episode_length") == [3, 10, 10]
    collector.reset()
    stats = collector.collect(n_episode=3, random=True)
    assert sorted(stats.lens.tolist()) == [3, 10, 10]
    collector.close()


@pytest.fixture
def ray_ready(ray_local: Any) -> Any:
    """The session's Ray, with this module's envs sent to workers by value (pytest imports this file as a
    top-level module the workers cannot import by name)."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_local


def test_ray_vector_env_attributes_with_actors(ray_ready: Any) -> None:
    envs = RayVectorEnv(factories(), timeout=60.0)
    try:
        check_backend(envs, can_pickle_locks=False)
    finally:
        envs.close()
