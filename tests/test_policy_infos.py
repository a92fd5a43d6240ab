"""Infos reach the policies that ask for them (SupportsInfos, TianshouPolicy(pass_infos=True)), and no other.

``TargetEnv`` (tests/info_envs.py) says in each info dict (its reset's and every step's) which action it
wants next and pays reward 1 only for that action, so a policy that copies ``info["target"]`` earns a
return equal to the episode length exactly when it was handed the right env's latest info every step: the
step's, or after a reset or an autoreset the reset's. Its observation says nothing about the target.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
tianshou = pytest.importorskip("tianshou")

from tianshou.algorithm.algorithm_base import Policy as TianshouBasePolicy  # noqa: E402
from tianshou.data import Batch  # noqa: E402

from tests import info_envs  # noqa: E402
from tests.info_envs import NUM_TARGETS, TargetEnv  # noqa: E402
from vcollect import AsyncCollector, Collector, make_vector  # noqa: E402
from vcollect.envs import DummyVectorEnv, GymnasiumVectorEnv  # noqa: E402
from vcollect.infos import split_vector_infos  # noqa: E402
from vcollect.policies import EpsilonGreedy, SupportsInfos, TianshouPolicy  # noqa: E402
from vcollect.policies.tianshou_policy import info_batch  # noqa: E402


class TargetPolicy(TianshouBasePolicy):
    """A Tianshou policy acting on ``batch.info.target``; records the info Batch of every call."""

    def __init__(self) -> None:
        super().__init__(action_space=gym.spaces.Discrete(NUM_TARGETS))
        self.seen: list[Batch] = []

    def forward(self, batch: Any, state: Any = None, **kwargs: Any) -> Batch:
        self.seen.append(batch.info)
        if not list(batch.info.keys()):
            return Batch(act=np.zeros(len(batch.obs), np.int64))
        return Batch(act=np.asarray(batch.info.target, dtype=np.int64))


class InfoCopier:
    """A vcollect policy that wants infos: ``info["target"]``, every call's infos recorded."""

    wants_infos = True

    def __init__(self) -> None:
        self.calls: list[list[Mapping[str, Any]]] = []

    def __call__(
        self, obs: Any, state: Any = None, *, infos: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[Any, Any]:
        assert infos is not None
        self.calls.append(list(infos))
        return np.array([info["target"] for info in infos], np.int64), None


def backend(kind: str, num_envs: int = 3) -> Any:
    if kind == "dummy":
        return DummyVectorEnv([TargetEnv] * num_envs)
    if kind == "subproc":
        return make_vector(TargetEnv, num_envs, backend="subproc", num_workers=2)
    mode = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
            "disabled": AutoresetMode.DISABLED}[kind]
    return GymnasiumVectorEnv(SyncVectorEnv([TargetEnv] * num_envs, autoreset_mode=mode))


def assert_every_action_was_the_target(returns: np.ndarray, lens: np.ndarray) -> None:
    assert len(returns) > 0
    np.testing.assert_array_equal(returns, lens.astype(np.float64))


@pytest.mark.parametrize("collector_cls", [Collector, AsyncCollector])
@pytest.mark.parametrize("kind", ["dummy", "subproc"])
def test_a_tianshou_policy_reading_batch_info_gets_each_envs_latest_info(collector_cls: Any, kind: str) -> None:
    policy = TargetPolicy()
    with collector_cls(TianshouPolicy(policy, pass_infos=True), backend(kind), seed=0) as collector:
        collector.reset()
        stats = collector.collect(n_episode=12)
        assert_every_action_was_the_target(stats.returns, stats.lens)
        # n_step calls end mid-episode: the next call acts on the infos the last one left
        for _ in range(4):
            step_stats = collector.collect(n_step=5)
        episodes = collector.collect(n_episode=6)
        assert_every_action_was_the_target(episodes.returns, episodes.lens)
        assert step_stats.n_collected_steps == 5
    fresh = np.concatenate([np.atleast_1d(info.fresh) for info in policy.seen])
    assert fresh.sum() > 12 and (fresh == 0).sum() > 12  # reset infos and step infos both acted on


@pytest.mark.parametrize("collector_cls", [Collector, AsyncCollector])
def test_ray_actors_hand_the_policy_their_infos(collector_cls: Any, ray_local: Any) -> None:
    from vcollect.envs.ray_env import RayVectorEnv

    for module in (sys.modules[__name__], info_envs):  # workers cannot import these files
        ray_local.cloudpickle.register_pickle_by_value(module)
    policy = TargetPolicy()
    with collector_cls(TianshouPolicy(policy, pass_infos=True), RayVectorEnv([TargetEnv] * 2, timeout=60.0),
                       seed=0) as collector:
        collector.reset()
        stats = collector.collect(n_episode=6)
    assert_every_action_was_the_target(stats.returns, stats.lens)


def copier_for(observation_space: gym.Space, action_space: gym.Space) -> InfoCopier:
    return InfoCopier()


@pytest.mark.parametrize("collector", ["sync", "async"])
def test_distributed_workers_hand_their_policy_its_infos(collector: str, ray_local: Any, tmp_path: Any) -> None:
    """DistributedCollector's workers build the policy themselves: one that wants infos gets them there
    too, on both collector kinds, and what they store is what they report."""
    from vcollect.distributed import DistributedCollector
    from vcollect.store import EpisodeStore, load_dataset

    for module in (sys.modules[__name__], info_envs):  # workers cannot import these files
        ray_local.cloudpickle.register_pickle_by_value(module)
    env = TargetEnv()
    EpisodeStore.create("infos/target-v0", env.observation_space, env.action_space, root=tmp_path).close()
    with DistributedCollector(TargetEnv, copier_for, num_workers=2, envs_per_worker=2, collector=collector,
                              store="infos/target-v0", root=tmp_path, seed=0) as dc:
        stats = dc.collect(n_episode=8)
    assert_every_action_was_the_target(stats.returns, stats.lens)
    stored = load_dataset("infos/target-v0", root=tmp_path)
    assert stored.total_episodes == stats.n_collected_episodes
    assert all(float(np.sum(ep.rewards)) == len(ep) for ep in stored)


@pytest.mark.parametrize("kind", ["next_step", "same_step", "disabled"])
def test_infos_follow_gymnasium_autoresets_and_the_block_path(kind: str) -> None:
    """NEXT_STEP envs restart on their next step (the blocks backend: stepped one by one for this policy),
    SAME_STEP ones in the step that ended them (the reset's info at the top level), DISABLED ones by reset."""
    policy = InfoCopier()
    with Collector(policy, backend(kind), seed=1) as collector:
        collector.reset()
        stats = collector.collect(n_episode=15)
        more = collector.collect(n_step=40)
        again = collector.collect(n_episode=9)
    assert_every_action_was_the_target(np.concatenate([stats.returns, more.returns, again.returns]),
                                       np.concatenate([stats.lens, more.lens, again.lens]))
    assert all(len(infos) == 3 for infos in policy.calls)


def test_a_vcollect_policy_gets_one_info_per_ready_env_in_env_id_order() -> None:
    """Partial batches (the last step of an n_step call) hand the policy the infos of exactly those envs."""
    policy = InfoCopier()
    with Collector(policy, DummyVectorEnv([TargetEnv] * 4), seed=2) as collector:
        collector.reset()
        collector.collect(n_step=4 * 5 + 3)
        collector.collect(n_step=2)
    assert [len(infos) for infos in policy.calls] == [4] * 5 + [3, 2]
    steps = [info["t"] for infos in policy.calls[:5] for info in infos]
    assert steps[:4] == [0, 0, 0, 0]  # the reset's infos first


def test_epsilon_greedy_passes_infos_to_the_policy_it_wraps() -> None:
    space = gym.spaces.Discrete(NUM_TARGETS)
    wrapped = EpsilonGreedy(InfoCopier(), space, epsilon=0.0)
    assert wrapped.wants_infos and not EpsilonGreedy(RecordsWhatItIsGiven(), space, 0.0).wants_infos
    with Collector(wrapped, DummyVectorEnv([TargetEnv] * 2), seed=4, exploration_noise=True) as collector:
        collector.reset()
        stats = collector.collect(n_episode=6)
    assert_every_action_was_the_target(stats.returns, stats.lens)


def test_reset_before_collect_hands_the_policy_the_reset_infos() -> None:
    policy = InfoCopier()
    with Collector(policy, DummyVectorEnv([TargetEnv] * 2), seed=3) as collector:
        collector.reset()
        collector.collect(n_step=4)
        collector.collect(n_step=2, reset_before_collect=True)
    assert [info["fresh"] for info in policy.calls[2]] == [1, 1]


class RecordsWhatItIsGiven:
    """A policy that does not want infos; fails if it is handed any."""

    wants_infos = False

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, obs: Any, state: Any = None, **kwargs: Any) -> tuple[Any, Any]:
        assert not kwargs, f"handed {sorted(kwargs)}"
        self.calls += 1
        return np.zeros(len(obs), np.int64), None


@pytest.mark.parametrize("kind", ["dummy", "subproc", "next_step"])
def test_policies_not_asking_for_infos_get_none(kind: str) -> None:
    unwrapped, wrapped, declared = TargetPolicy(), TargetPolicy(), RecordsWhatItIsGiven()
    assert isinstance(declared, SupportsInfos) and not isinstance(lambda obs, state: None, SupportsInfos)
    for policy in (unwrapped, TianshouPolicy(wrapped), declared, lambda obs, state: (np.zeros(len(obs), int), None)):
        with Collector(policy, backend(kind), seed=0) as collector:
            collector.reset()
            collector.collect(n_step=30)
            assert not collector._actor.wants_infos
    assert unwrapped.seen and all(not list(info.keys()) for info in unwrapped.seen + wrapped.seen)
    assert declared.calls >= 10


def test_a_policy_that_wants_no_infos_keeps_no_infos() -> None:
    """Without wants_infos the actor keeps nothing (the default list stays as made)."""
    with Collector(TianshouPolicy(TargetPolicy()), DummyVectorEnv([TargetEnv] * 2), seed=0) as collector:
        made = collector._actor._infos
        collector.reset()
        collector.collect(n_step=10)
        assert collector._actor._infos is made and made == [{}, {}]


def test_envpool_infos_reach_the_policy_in_env_id_order() -> None:
    envpool = pytest.importorskip("envpool")
    pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=3, seed=0)

    class Elapsed:
        wants_infos = True

        def __init__(self) -> None:
            self.calls: list[list[Mapping[str, Any]]] = []

        def __call__(self, obs: Any, state: Any = None, *, infos: Any = None) -> tuple[Any, Any]:
            self.calls.append(list(infos))
            return np.zeros(len(obs), np.int64), None

    policy = Elapsed()
    with Collector(policy, pool, seed=0) as collector:
        collector.reset()
        stats = collector.collect(n_episode=6)
    assert stats.n_collected_episodes == 6
    for env_id in range(3):
        assert [int(call[env_id]["env_id"]) for call in policy.calls] == [env_id] * len(policy.calls)
        elapsed = np.array([int(call[env_id]["elapsed_step"]) for call in policy.calls])
        assert elapsed[0] == 0
        step = np.diff(elapsed)
        assert np.all((step == 1) | (elapsed[1:] == 0))  # one more per step, 0 from an autoreset
        assert (elapsed[1:] == 0).any() and (step == 1).sum() >= 8  # autoresets and steps both seen


def test_info_batch_stacks_like_tianshous_collector() -> None:
    assert not list(info_batch([{}, {}]).keys())
    mixed = info_batch([{"k": 1, "s": {"a": 1.5}}, {}, {"k": 3, "s": {"a": 2.5}}])
    np.testing.assert_array_equal(mixed.k, [1, 0, 3])
    np.testing.assert_array_equal(mixed.s.a, [1.5, 0.0, 2.5])
    partial = info_batch([{"k": 1}, {"k": 2, "z": 5}])
    np.testing.assert_array_equal(partial.z, [0, 5])


def _leaf_values(kind: str, shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    if kind == "int":
        return st.integers(-(2**40), 2**40)
    if kind == "float":
        return st.floats(allow_nan=False, width=64)
    if kind == "bool":
        return st.booleans()
    if kind == "int32":
        return st.integers(-(2**31), 2**31 - 1).map(np.int32)
    return st.lists(st.floats(-1e6, 1e6, width=32), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))).map(
        lambda v: np.array(v, np.float32).reshape(shape)
    )


@st.composite
def same_key_infos(draw: Any, n: int | None = None, depth: int = 0) -> list[dict[str, Any]]:
    """Between 1 and 5 info dicts with the same keys, each key's values of one kind (nested dicts too)."""
    if n is None:
        n = draw(st.integers(1, 5))
    keys = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True))
    infos: list[dict[str, Any]] = [{} for _ in range(n)]
    for key in keys:
        kind = draw(st.sampled_from(["int", "float", "bool", "int32", "array"] + (["dict"] if depth < 1 else [])))
        if kind == "dict":
            for info, sub in zip(infos, draw(same_key_infos(n, depth + 1))):
                info[key] = sub
            continue
        shape = draw(st.sampled_from([(2,), (2, 3)]))
        for info in infos:
            info[key] = draw(_leaf_values(kind, shape))
    return infos


def _assert_same_batch(got: Batch, want: Batch) -> None:
    assert sorted(got.keys()) == sorted(want.keys())
    for key, value in want.items():
        if isinstance(value, Batch):
            _assert_same_batch(got[key], value)
        else:
            assert got[key].dtype == value.dtype, key
            np.testing.assert_array_equal(got[key], value)


@settings(max_examples=150, deadline=None)
@given(same_key_infos())
def test_info_batch_builds_what_stacking_one_batch_per_env_builds(infos: list[dict[str, Any]]) -> None:
    """The column fast path of info_batch against the plain reference, Batch.stack of one Batch per env."""
    _assert_same_batch(info_batch(infos), Batch.stack([Batch(info) for info in infos]))


def test_split_vector_infos_follows_gymnasiums_masks() -> None:
    infos = {"a": np.array([1, 2, 3]), "_a": np.array([True, False, True]), "d": {"x": np.array([4, 5, 6])}}
    assert split_vector_infos(infos, 3) == [{"a": 1, "d": {"x": 4}}, {"d": {"x": 5}}, {"a": 3, "d": {"x": 6}}]


def test_pass_infos_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="pass_infos must be True or False"):
        TianshouPolicy(TargetPolicy(), pass_infos="yes")  # type: ignore[arg-type]


def test_a_backend_returning_the_wrong_number_of_infos_is_named() -> None:
    class Short(DummyVectorEnv):
        def reset(self, env_ids: Any = None, seeds: Any = None, options: Any = None) -> Any:
            obs, infos = super().reset(env_ids, seeds, options)
            return obs, infos[:1]

    envs = Short([functools.partial(TargetEnv)] * 2)
    with Collector(InfoCopier(), envs, seed=0) as collector, pytest.raises(ValueError, match="2 env ids"):
        collector.reset()
