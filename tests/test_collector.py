"""Collector: exact counts, carry-over, quotas, seeds, per-env policy state, and every bad input."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vcollect.collecting.progress
import vcollect.collector
from tests.envs import BadObsEnv, CountingEnv, DictObsEnv, DyingEnv, FailingEnv
from tests.replay import assert_replays
from tests.sinks import ListStore
from vcollect import (
    Collector,
    DummyVectorEnv,
    RandomPolicy,
    SubprocVectorEnv,
    VectorRingBuffer,
    make_vector,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.errors import ActionError, CollectorStateError, EnvWorkerError, ObservationError
from vcollect.policies import EpsilonGreedy
from vcollect.spaces import flatten_batch
from vcollect.spaces import leaves as leaves_of


def counting_fns(n: int, length: int = 5) -> list:
    return [lambda: CountingEnv(length) for _ in range(n)]


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("n_step", [1, 3, 8, 13, 100])
def test_n_step_collects_exactly_n_transitions(n_step: int) -> None:
    with Collector(None, counting_fns(8), seed=0) as collector:
        stats = collector.collect(n_step=n_step, random=True, reset_before_collect=True)
        assert stats.n_collected_steps == n_step
        assert len(collector.buffer) == n_step
        # Every episode that completed is a whole 5-step episode.
        assert np.all(stats.lens == 5)
        assert stats.n_collected_episodes == len(stats.returns)


@pytest.mark.parametrize(("num_envs", "n_episode"), [(8, 1), (8, 3), (8, 8), (8, 13), (3, 10), (1, 4)])
def test_n_episode_collects_exactly_n_whole_episodes(num_envs: int, n_episode: int) -> None:
    store = ListStore()
    with Collector(None, counting_fns(num_envs, length=7), store=store, seed=1) as collector:
        stats = collector.collect(n_episode=n_episode, random=True, reset_before_collect=True)
    assert stats.n_collected_episodes == n_episode
    assert stats.n_collected_steps == 7 * n_episode
    assert len(store.episodes) == n_episode
    per_env = np.bincount([e.env_id for e in store.episodes], minlength=num_envs)
    # Quota: each env gets n // N episodes or one more.
    assert per_env.min() >= n_episode // num_envs
    assert per_env.max() <= n_episode // num_envs + 1
    for episode in store.episodes:
        assert len(episode.actions) == 7
        np.testing.assert_array_equal(episode.observations[:, 0], np.arange(8))


def test_n_episode_extra_quota_is_not_biased_to_low_env_ids() -> None:
    counts = np.zeros(8, dtype=np.int64)
    store = ListStore()
    with Collector(None, counting_fns(8, length=2), store=store, seed=3) as collector:
        collector.reset()
        for _ in range(40):
            collector.collect(n_episode=1, random=True)
    counts += np.bincount([e.env_id for e in store.episodes], minlength=8)
    assert counts.sum() == 40
    assert (counts > 0).sum() >= 6, counts


def test_n_episode_finished_first_stops_the_envs_that_finish_first_once_fewer_are_owed() -> None:
    store = ListStore()
    fns = [lambda n=n: CountingEnv(episode_length=n) for n in (2, 3, 4, 5)]
    with Collector(None, fns, store=store, seed=0) as collector:
        stats = collector.collect(n_episode=8, random=True, reset_before_collect=True, episode_order="finished_first")
        # step 5: env 3 ends the 5th episode, 3 owed for 4 envs: it stops; step 6: envs 0 and 1 end the 6th and
        # 7th, 1 owed for 3 envs: both stop; env 2 ends the 8th at step 8
        assert np.bincount([e.env_id for e in store.episodes], minlength=4).tolist() == [3, 2, 2, 1]
        assert stats.n_collected_episodes == 8 and stats.n_collected_steps == 3 * 2 + 2 * 3 + 2 * 4 + 5
        # fewer episodes than envs: only the first ones step
        stats = collector.collect(n_episode=2, random=True, episode_order="finished_first")
        assert stats.lens.tolist() == [2, 3]
        with pytest.raises(ValueError, match="episode_order must be 'quota' or 'finished_first'"):
            collector.collect(n_episode=2, random=True, episode_order="tianshou")


def test_n_episode_finished_first_needs_envs_stepped_on_request() -> None:
    envs = gym.vector.SyncVectorEnv([lambda: CountingEnv(episode_length=3)] * 2)
    with Collector(None, envs, seed=0) as collector:
        collector.reset()
        with pytest.raises(ValueError, match="episode_order='finished_first' needs a backend that steps envs on"):
            collector.collect(n_episode=2, random=True, episode_order="finished_first")


def test_unfinished_episodes_carry_over_between_calls() -> None:
    with Collector(None, counting_fns(1, length=10), seed=0) as collector:
        collector.reset()
        first = collector.collect(n_step=4, random=True)
        second = collector.collect(n_step=4, random=True)
        third = collector.collect(n_step=4, random=True)
    assert first.n_collected_episodes == 0 and first.returns_stat is None and first.lens_stat is None
    assert second.n_collected_episodes == 0
    assert third.n_collected_episodes == 1
    # The whole episode counts, including the 8 steps taken in the two earlier calls.
    assert third.lens.tolist() == [10]
    assert third.returns.tolist() == [10.0]
    assert third.lens_stat is not None and third.lens_stat.mean == 10


def test_n_episode_finishes_a_carried_over_episode_and_counts_it_whole() -> None:
    store = ListStore()
    with Collector(None, counting_fns(2, length=6), store=store, seed=0) as collector:
        collector.reset()
        collector.collect(n_step=4, random=True)  # both envs 2 steps into an episode
        stats = collector.collect(n_episode=2, random=True)
    assert stats.n_collected_episodes == 2
    assert stats.lens.tolist() == [6, 6]
    assert stats.n_collected_steps == 8
    assert [len(e.actions) for e in store.episodes] == [6, 6]


def test_stats_fields_and_str() -> None:
    with Collector(None, counting_fns(4, length=3), seed=0) as collector:
        stats = collector.collect(n_episode=6, random=True, reset_before_collect=True)
    assert stats.returns.tolist() == [3.0] * 6
    assert stats.lens_stat is not None and stats.lens_stat.min == 3 and stats.lens_stat.max == 3
    assert stats.returns_stat is not None and stats.returns_stat.std == 0.0
    assert stats.collect_time > 0 and stats.collect_speed == pytest.approx(18 / stats.collect_time)
    text = str(stats)
    assert "18 steps" in text and "6 episodes" in text


def test_same_seed_gives_identical_data_on_dummy_and_subprocess() -> None:
    results = []
    for backend in ("dummy", "subproc"):
        store = ListStore()
        envs = make_vector("CartPole-v1", 4, backend=backend, **({"num_workers": 2} if backend == "subproc" else {}))
        with Collector(RandomPolicy(envs.single_action_space, seed=5), envs, store=store, seed=42) as collector:
            collector.reset()
            collector.collect(n_episode=6)
            collector.collect(n_step=37, random=True)
        results.append(store.episodes)
    dummy, subproc = results
    assert len(dummy) == len(subproc) >= 6
    for a, b in zip(dummy, subproc):
        assert (a.seed, a.env_id) == (b.seed, b.env_id)
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)


def test_seed_every_reset_false_seeds_each_envs_first_reset_only_and_is_reproducible() -> None:
    """Tianshou-style resets: the first episode of each env carries its seed, later ones None (the env's own
    generator carried on). Same data on both backends (the subprocess one restarts envs in its shared-memory
    call), twice over, and the first episodes replay by seed."""
    results = []
    for backend in ("dummy", "subproc", "dummy"):
        store = ListStore()
        envs = make_vector("CartPole-v1", 4, backend=backend, **({"num_workers": 2} if backend == "subproc" else {}))
        with Collector(None, envs, store=store, seed=42, seed_every_reset=False) as collector:
            collector.collect(n_step=400, random=True, reset_before_collect=True)
            collector.reset(seed=7)  # a re-seed seeds each env's next (first) reset again
            collector.collect(n_episode=8, random=True)
        results.append(store.episodes)
    first_run = results[0]
    assert len(first_run) >= 16
    for run in results[1:]:
        assert len(run) == len(first_run)
        for a, b in zip(first_run, run):
            assert (a.seed, a.env_id) == (b.seed, b.env_id)
            np.testing.assert_array_equal(a.observations, b.observations)
            np.testing.assert_array_equal(a.actions, b.actions)
    # per env: seeded first episode, then None until the re-seed, whose first episode is seeded again
    for env_id in range(4):
        seeds = [e.seed for e in first_run if e.env_id == env_id]
        assert seeds[0] is not None and seeds[1] is None
        assert sum(seed is not None for seed in seeds) == 2
    with Collector(None, [cartpole] * 4, seed=42) as every:  # the default seeds every reset
        store = ListStore()
        every.store = store
        every.collect(n_episode=8, random=True, reset_before_collect=True)
    assert all(e.seed is not None for e in store.episodes)
    firsts = [e for e in first_run if e.seed is not None]
    for episode in firsts:
        assert_replays(cartpole(), episode)


def test_seed_first_reset_false_seeds_no_reset_and_the_envs_carry_on_their_generators() -> None:
    """seed_first_reset=False: every episode is stored with seed None and the data is what the envs' own
    generators give (seeded by their caller beforehand), whatever the collector's seed; the contradictory
    seed_every_reset=True is refused."""
    runs = []
    for seed in (1, 2):
        envs = [cartpole() for _ in range(2)]
        for i, env in enumerate(envs):
            env.reset(seed=100 + i)
        store = ListStore()
        with Collector(None, [lambda env=env: env for env in envs], store=store, seed=seed, seed_every_reset=False,
                       seed_first_reset=False) as collector:
            collector.collect(n_episode=4, random=True, reset_before_collect=True)
        runs.append(store.episodes)
    assert all(e.seed is None for run in runs for e in run)
    reference = cartpole()
    reference.reset(seed=100)
    first, _ = reference.reset()  # the env's own generator, carried on past its seeded reset
    assert np.array_equal([e for e in runs[0] if e.env_id == 0][0].observations[0], first)
    assert np.array_equal([e for e in runs[1] if e.env_id == 0][0].observations[0], first)
    with pytest.raises(ValueError, match="seed_first_reset=False"):
        Collector(None, [cartpole], seed_first_reset=False)


class StepThenResetEnvs(DummyVectorEnv):
    """A DummyVectorEnv that declares no step_reset: the Collector steps, then resets the ended envs in a
    second call."""

    @property
    def capabilities(self) -> EnvCapabilities:
        return dataclasses.replace(super().capabilities, step_reset=False)


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_restarting_inside_the_step_gives_the_same_data_as_a_separate_reset(backend: str) -> None:
    fns = [lambda length=length: CountingEnv(length) for length in (2, 3, 5)]
    results = []
    for envs in (
        DummyVectorEnv(fns) if backend == "dummy" else SubprocVectorEnv(fns, num_workers=2),
        StepThenResetEnvs(fns),
    ):
        store = ListStore()
        with Collector(RandomPolicy(envs.single_action_space, seed=1), envs, store=store, seed=3) as collector:
            collector.collect(n_episode=7, reset_before_collect=True)  # quotas 3/2/2: some ends do not restart
            collector.collect(n_step=11)
            collector.collect(n_episode=4, reset_options={"start": 100.0})
        results.append(store.episodes)
    fused, separate = results
    assert len(fused) == len(separate) >= 11
    for a, b in zip(fused, separate):
        assert (a.seed, a.env_id, a.options) == (b.seed, b.env_id, b.options)
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
    assert any(e.options == {"start": 100.0} and e.observations[0, 0] == 100.0 for e in fused)


def test_stored_seed_and_actions_replay_the_episode() -> None:
    store = ListStore()
    with Collector(None, [cartpole] * 3, store=store, seed=9) as collector:
        collector.collect(n_episode=5, random=True, reset_before_collect=True)
    for episode in store.episodes:
        assert_replays(cartpole(), episode)


def test_episode_longer_than_the_ring_reaches_the_store_whole() -> None:
    store = ListStore()
    buffer = VectorRingBuffer(2, 4, CountingEnv(25).observation_space, CountingEnv(25).action_space,
                              keep_overflow=True)
    with Collector(None, counting_fns(2, length=25), buffer=buffer, store=store, seed=0) as collector:
        stats = collector.collect(n_episode=2, random=True, reset_before_collect=True)
    assert stats.lens.tolist() == [25, 25]
    for episode in store.episodes:
        np.testing.assert_array_equal(episode.observations[:, 0], np.arange(26))
        assert len(episode.actions) == 25 and episode.terminations[-1]


@pytest.mark.parametrize("collector_class", ["Collector", "AsyncCollector"])
@pytest.mark.parametrize("record_infos", [False, True])
def test_a_ring_passed_in_without_keep_overflow_still_stores_whole_episodes(collector_class: str,
                                                                             record_infos: bool) -> None:
    """A user's 25-row ring and 30-step episodes store all 30 steps from the first observation (not the
    last 24 the ring holds, with a seed claiming to replay them): the collector makes any ring it writes
    from keep episodes whole."""
    from vcollect import AsyncCollector

    cls = Collector if collector_class == "Collector" else AsyncCollector
    store = ListStore()
    env = CountingEnv(30)
    buffer = VectorRingBuffer(1, 25, env.observation_space, env.action_space)
    assert not buffer.keep_overflow
    with cls(None, [lambda: InfoCountingEnv(30)], buffer=buffer, store=store, seed=0, record_infos=record_infos) as c:
        stats = c.collect(n_episode=2, random=True, reset_before_collect=True)
    assert stats.lens.tolist() == [30, 30]
    assert [len(e.rewards) for e in store.episodes] == [30, 30]
    for episode in store.episodes:
        np.testing.assert_array_equal(episode.observations[:, 0], np.arange(31))
        assert episode.terminations[-1] and not episode.terminations[:-1].any()
        if record_infos:
            np.testing.assert_array_equal(episode.infos["t"], np.arange(31))


def test_a_store_or_ring_that_does_not_fit_the_envs_is_refused_when_the_collector_is_built() -> None:
    env = CountingEnv()

    class WritesOneByOne:  # the old duck-typed store: would have taken the collector off its batched path
        observation_space, action_space = env.observation_space, env.action_space

        def write_episode(self, *args: Any, **kwargs: Any) -> None: ...

        def flush(self) -> None: ...

    with pytest.raises(TypeError, match="EpisodeSink.*WritesOneByOne lacks write_episodes, close"):
        Collector(None, counting_fns(2), store=WritesOneByOne())
    other_obs = gym.spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
    with pytest.raises(ValueError, match=r"store holds observation space Box\(0.0, 1.0, \(3,\).*envs have"):
        Collector(None, counting_fns(2), store=ListStore(other_obs, env.action_space))
    with pytest.raises(ValueError, match=r"store holds action space Discrete\(3\).*envs have action space Discrete\(2\)"):
        Collector(None, counting_fns(2), store=ListStore(env.observation_space, gym.spaces.Discrete(3)))
    with pytest.raises(ValueError, match="buffer has 3 env rings but the collector has 2 envs"):
        Collector(None, counting_fns(2), buffer=VectorRingBuffer(3, 10, env.observation_space, env.action_space))
    with pytest.raises(ValueError, match="buffer holds observation space .* envs have observation space"):
        Collector(None, counting_fns(2), buffer=VectorRingBuffer(2, 10, other_obs, env.action_space))
    with pytest.raises(TypeError, match="buffer must be a vcollect VectorRingBuffer"):
        Collector(None, counting_fns(2), buffer=[])  # type: ignore[arg-type]


def test_pendulum_box_actions_and_truncation() -> None:
    with Collector(RandomPolicy(gym.make("Pendulum-v1").action_space, seed=0),
                   [lambda: gym.make("Pendulum-v1")] * 2, seed=0) as collector:
        stats = collector.collect(n_episode=2, reset_before_collect=True)
        assert stats.lens.tolist() == [200, 200]
        batch = collector.buffer.sample(64, np.random.default_rng(0))
    assert batch["actions"].shape == (64, 1)
    assert np.all(np.abs(batch["actions"]) <= 2.0)
    assert batch["truncations"].dtype == bool


def test_dict_observation_env_on_subprocesses() -> None:
    store = ListStore()
    envs = SubprocVectorEnv([DictObsEnv] * 3, num_workers=2)
    with Collector(RandomPolicy(envs.single_action_space, seed=0), envs, store=store, seed=0) as collector:
        stats = collector.collect(n_episode=4, reset_before_collect=True)
    assert stats.n_collected_episodes == 4
    space = DictObsEnv().observation_space
    for episode in store.episodes:
        assert isinstance(episode.observations, dict)
        leaves = flatten_batch(space, episode.observations)
        assert len(leaves) == len(leaves_of(space)) >= 3
        for leaf in leaves:
            assert len(leaf) == len(episode.actions) + 1


class StepCountingPolicy:
    """Recurrent-style stub: state row i counts the steps env i took since its reset."""

    def __init__(self, action_space: gym.Space) -> None:
        self.action_space = action_space
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []

    def __call__(self, obs: np.ndarray, state: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        steps = np.zeros(len(obs), dtype=np.int64) if state is None else state
        # CountingEnv's observation is the step counter, so it must equal the state.
        self.seen.append((obs[:, 0].astype(np.int64).copy(), steps.copy()))
        return np.zeros(len(obs), dtype=np.int64), steps + 1

    def reset_state(self, state: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        state[env_ids] = 0
        return state


def test_policy_state_is_kept_per_env_and_zeroed_on_reset() -> None:
    fns = [lambda length=length: CountingEnv(length) for length in (3, 4, 5, 6, 7)]
    policy = StepCountingPolicy(CountingEnv(3).action_space)
    with Collector(policy, fns, seed=0) as collector:
        collector.collect(n_episode=7, reset_before_collect=True)
        collector.collect(n_step=3)
    assert len(policy.seen) >= 8  # the length-7 env alone takes 7 steps, then one more vector step
    # envs restarted mid-call (7 episodes on 5 envs): their state rows were zeroed after the first call
    assert sum(int((state == 0).sum()) for _, state in policy.seen[1:]) >= 2
    for obs_steps, state_steps in policy.seen:
        np.testing.assert_array_equal(obs_steps, state_steps)


class FlippingPolicy:
    def __call__(self, obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
        return np.zeros(len(obs), dtype=np.int64), None

    def add_exploration_noise(self, actions: np.ndarray, obs: np.ndarray) -> np.ndarray:
        return 1 - actions


@pytest.mark.parametrize("noise", [False, True])
def test_exploration_noise_is_applied_only_when_asked(noise: bool) -> None:
    with Collector(FlippingPolicy(), counting_fns(2), seed=0, exploration_noise=noise) as collector:
        collector.collect(n_step=10, reset_before_collect=True)
        actions = collector.buffer.sample(32, np.random.default_rng(0))["actions"]
    assert np.all(actions == (1 if noise else 0))


def test_reset_options_reach_every_reset_and_the_store() -> None:
    store = ListStore()
    with Collector(None, counting_fns(2, length=2), store=store, seed=0) as collector:
        collector.collect(n_episode=4, random=True, reset_before_collect=True, reset_options={"start": 3})
    assert [e.options for e in store.episodes] == [{"start": 3}] * 4
    # CountingEnv starts its counter at options["start"].
    assert all(e.observations[0, 0] == 3 for e in store.episodes)


class RenderCountingEnv(CountingEnv):
    renders = 0

    def render(self) -> None:
        RenderCountingEnv.renders += 1


def test_render_renders_every_step() -> None:
    RenderCountingEnv.renders = 0
    with Collector(None, [lambda: RenderCountingEnv(5)] * 2, seed=0) as collector:
        collector.collect(n_step=6, random=True, reset_before_collect=True, render=0.0)
    assert RenderCountingEnv.renders == 6  # 3 vector steps x 2 envs


def test_progress_bar_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    with Collector(None, counting_fns(2), seed=0) as collector:
        collector.collect(n_step=20, random=True, reset_before_collect=True, progress=True)
    assert "20/20" in capsys.readouterr().err


def test_no_progress_bar_is_made_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_tqdm(*args: object, **kwargs: object) -> None:
        raise AssertionError("collect() made a progress bar without progress=True")

    monkeypatch.setattr(vcollect.collecting.progress, "tqdm", no_tqdm)
    with Collector(None, counting_fns(2), seed=0) as collector:
        assert collector.collect(n_step=20, random=True, reset_before_collect=True).n_collected_steps == 20
        assert collector.collect(n_episode=3, random=True).n_collected_episodes == 3


def test_single_gymnasium_env_is_accepted() -> None:
    with Collector(None, gym.make("CartPole-v1"), seed=0) as collector:
        stats = collector.collect(n_episode=2, random=True, reset_before_collect=True)
    assert collector.num_envs == 1 and stats.n_collected_episodes == 2


# ---------------------------------------------------------------- bad input


def test_collect_before_reset_says_what_to_do() -> None:
    with Collector(None, counting_fns(2), seed=0) as collector, pytest.raises(
        CollectorStateError, match="reset_before_collect=True"
    ):
        collector.collect(n_step=1, random=True)


@pytest.mark.parametrize("kwargs", [{}, {"n_step": 1, "n_episode": 1}, {"n_step": 0}, {"n_episode": -2}])
def test_both_neither_or_non_positive_counts_are_rejected(kwargs: dict[str, int]) -> None:
    with Collector(None, counting_fns(2), seed=0) as collector, pytest.raises(ValueError):
        collector.collect(random=True, reset_before_collect=True, **kwargs)


def test_wrong_number_of_actions_is_a_clear_error() -> None:
    policy = lambda obs, state=None: (np.zeros(len(obs) + 1, dtype=np.int64), None)  # noqa: E731
    with Collector(policy, counting_fns(3), seed=0) as collector, pytest.raises(ActionError, match="3 ready envs"):
        collector.collect(n_step=3, reset_before_collect=True)


def test_wrong_action_shape_is_a_clear_error() -> None:
    space = gym.make("Pendulum-v1").action_space
    policy = lambda obs, state=None: (np.zeros((len(obs), 2), dtype=np.float32), None)  # noqa: E731
    with Collector(policy, [lambda: gym.make("Pendulum-v1")] * 2, seed=0) as collector, pytest.raises(
        ActionError, match=r"expected \(2, 1\)"
    ):
        collector.collect(n_step=2, reset_before_collect=True)
    assert space.shape == (1,)


def test_action_outside_the_space_is_a_clear_error() -> None:
    policy = lambda obs, state=None: (np.full(len(obs), 5, dtype=np.int64), None)  # noqa: E731
    with Collector(policy, [cartpole] * 2, seed=0) as collector, pytest.raises(ActionError, match="outside"):
        collector.collect(n_step=2, reset_before_collect=True)


class VouchingPolicy:
    """Returns action 5 for a Discrete(2) space while claiming its actions lie in the space."""

    def __init__(self, action_space: gym.Space, vouches: bool) -> None:
        self.action_space = action_space
        self.actions_in_space = vouches

    def __call__(self, obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
        return np.full(len(obs), 5, dtype=np.int64), None

    def add_exploration_noise(self, actions: np.ndarray, obs: np.ndarray) -> np.ndarray:
        return actions


@pytest.mark.parametrize(
    ("vouches", "same_space", "noise", "checked"),
    [(True, True, False, False), (False, True, False, True), (True, False, False, True), (True, True, True, True)],
)
def test_actions_are_checked_unless_the_policy_vouches_for_them(
    vouches: bool, same_space: bool, noise: bool, checked: bool
) -> None:
    space = CountingEnv().action_space if same_space else gym.spaces.Discrete(3)
    policy = VouchingPolicy(space, vouches)
    with Collector(policy, counting_fns(2), seed=0, exploration_noise=noise) as collector:
        if checked:
            with pytest.raises(ActionError, match="outside"):
                collector.collect(n_step=2, reset_before_collect=True)
        else:  # CountingEnv ignores its action: the unchecked 5 is what the ring holds
            collector.collect(n_step=2, reset_before_collect=True)
            assert np.all(collector.buffer.sample(8, np.random.default_rng(0))["actions"] == 5)


@pytest.mark.parametrize(("vouches", "epsilon", "checked"), [(True, 0.0, False), (False, 0.0, True), (True, 1.0, False)])
def test_epsilon_greedy_keeps_the_wrapped_policys_word(vouches: bool, epsilon: float, checked: bool) -> None:
    """EpsilonGreedy's noise swaps in actions drawn from the space (noise_in_space), so its actions are
    trusted exactly when the wrapped policy's are; with epsilon 1 every action is a random one in the space."""
    space = CountingEnv().action_space
    policy = EpsilonGreedy(VouchingPolicy(space, vouches), space, epsilon, seed=0)  # type: ignore[arg-type]
    assert policy.actions_in_space is vouches
    with Collector(policy, counting_fns(2), seed=0, exploration_noise=True) as collector:
        if checked:
            with pytest.raises(ActionError, match="outside"):
                collector.collect(n_step=2, reset_before_collect=True)
        else:
            collector.collect(n_step=4, reset_before_collect=True)
            actions = collector.buffer.sample(16, np.random.default_rng(0))["actions"]
            assert np.all(actions == 5) if epsilon == 0.0 else np.all((actions >= 0) & (actions < space.n))


def test_policy_not_returning_a_pair_is_a_clear_error() -> None:
    policy = lambda obs, state=None: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    with Collector(policy, [cartpole] * 2, seed=0) as collector, pytest.raises(ActionError, match="actions, state"):
        collector.collect(n_step=2, reset_before_collect=True)


def test_observation_outside_the_space_is_a_clear_error() -> None:
    with Collector(None, [BadObsEnv] * 2, seed=0) as collector, pytest.raises(
        ObservationError, match="outside the observation space"
    ):
        collector.collect(n_step=10, random=True, reset_before_collect=True)


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_env_raising_in_step_gives_env_worker_error_with_traceback(backend: str) -> None:
    fns = [lambda: CountingEnv(50), lambda: FailingEnv(fail_step=3)]
    envs = DummyVectorEnv(fns) if backend == "dummy" else SubprocVectorEnv(fns, num_workers=2)
    with Collector(None, envs, seed=0) as collector, pytest.raises(EnvWorkerError) as info:
        collector.collect(n_step=20, random=True, reset_before_collect=True)
    assert info.value.env_id == 1
    assert "FailingEnv" in str(info.value) or "fail" in info.value.traceback_text.lower()


def test_dead_worker_process_gives_env_worker_error_without_hanging() -> None:
    envs = SubprocVectorEnv([lambda: CountingEnv(50), lambda: DyingEnv(die_step=2)], num_workers=2)
    with Collector(None, envs, seed=0) as collector, pytest.raises(EnvWorkerError) as info:
        collector.collect(n_step=20, random=True, reset_before_collect=True)
    assert info.value.env_id == 1


def test_calls_after_close_are_rejected() -> None:
    collector = Collector(None, counting_fns(2), seed=0)
    collector.close()
    collector.close()  # idempotent
    with pytest.raises(CollectorStateError, match="closed"):
        collector.collect(n_step=1, random=True, reset_before_collect=True)
    with pytest.raises(CollectorStateError):
        collector.reset()


def test_buffer_with_the_wrong_number_of_rings_is_rejected() -> None:
    env = CountingEnv(3)
    buffer = VectorRingBuffer(3, 10, env.observation_space, env.action_space)
    with pytest.raises(ValueError, match="num_envs"):
        Collector(None, counting_fns(2), buffer=buffer)


def test_collect_without_policy_needs_random() -> None:
    with Collector(None, counting_fns(2), seed=0) as collector, pytest.raises(ValueError, match="random=True"):
        collector.collect(n_step=1, reset_before_collect=True)


class InfoCountingEnv(CountingEnv):
    """CountingEnv whose reset info has the same structure as its step infos: {"t": steps}."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"t": 0}


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_record_infos_stores_each_episodes_infos_in_a_real_store(tmp_path, backend: str) -> None:
    from vcollect.store import EpisodeStore, load_dataset

    fns = [lambda: InfoCountingEnv(4)] * 2
    envs = DummyVectorEnv(fns) if backend == "dummy" else SubprocVectorEnv(fns, num_workers=2)
    space = CountingEnv(4)
    store = EpisodeStore.create("t/infos-v0", space.observation_space, space.action_space, root=tmp_path)
    with store, Collector(None, envs, store=store, seed=0, record_infos=True) as collector:
        collector.collect(n_episode=3, random=True, reset_before_collect=True)
    dataset = load_dataset("t/infos-v0", root=tmp_path)
    assert dataset.total_episodes == 3
    for episode in dataset:
        # One info row per observation: the reset's, then one per step.
        np.testing.assert_array_equal(episode.infos["t"], np.arange(0, 5))


def test_record_infos_names_a_key_missing_from_some_infos(tmp_path) -> None:
    from vcollect.errors import InfoStructureError
    from vcollect.store import EpisodeStore

    space = CountingEnv(4)
    store = EpisodeStore.create("t/bad-v0", space.observation_space, space.action_space, root=tmp_path)
    collector = Collector(None, counting_fns(1, length=3), store=store, seed=0, record_infos=True)
    # CountingEnv's reset info is {"seed": ...} but its step infos are {"t": ...}.
    with store, collector, pytest.raises(InfoStructureError, match="'seed' is missing at step 1"):
        collector.collect(n_episode=1, random=True, reset_before_collect=True)


def test_record_infos_refuses_a_step_only_key_as_data_collector_does(tmp_path) -> None:
    """An info key every step has but the reset has not would be stored with T rows beside keys of T+1
    (ragged, and exported to Minari so): refused, as DataCollector refuses it."""
    from vcollect import DataCollector
    from vcollect.errors import InfoStructureError

    class StepOnlyKey(InfoCountingEnv):
        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated, truncated, {**info, "action": int(action)}

    store = ListStore()
    collector = Collector(None, [lambda: StepOnlyKey(3)], store=store, seed=0, record_infos=True)
    with collector, pytest.raises(InfoStructureError, match="'action' is new at step 1"):
        collector.collect(n_episode=1, random=True, reset_before_collect=True)
    assert store.episodes == []
    with DataCollector(StepOnlyKey(3), record_infos=True, root=tmp_path) as recorder:
        recorder.reset(seed=0)
        with pytest.raises(InfoStructureError, match="'action'"):
            recorder.step(0)


def test_record_infos_is_refused_for_backends_that_reset_by_themselves() -> None:
    vector = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with pytest.raises(ValueError, match="record_infos"):
        Collector(None, vector, record_infos=True)


def test_queued_writes_from_a_small_ring_store_what_a_ring_holding_everything_stores(tmp_path) -> None:
    # Lengths around a 10-row ring: short episodes are queued and gathered later (also across ring
    # wrap-arounds, write deadlines and WRITE_BATCH flushes), an 11-step one is spilled and written at once,
    # in order; a 1000-row ring never reaches a deadline or spills.
    from vcollect.store import EpisodeStore, load_dataset

    lengths = (2, 3, 11, 5)
    space = CountingEnv()
    datasets = []
    for name, rows in (("t/small-ring-v0", 10), ("t/large-ring-v0", 1000)):
        store = EpisodeStore.create(name, space.observation_space, space.action_space, root=tmp_path)
        fns = [lambda length=length: CountingEnv(length) for length in lengths]
        buffer = VectorRingBuffer(4, rows, space.observation_space, space.action_space)
        with store, Collector(None, fns, buffer=buffer, store=store, seed=4) as collector:
            collector.collect(n_episode=90, random=True, reset_before_collect=True)
            collector.collect(n_step=37, random=True, reset_options={"start": 50.0})
            assert collector._writer is not None and collector._writer.queued == 0  # all stored by the call's end
            collector.collect(n_episode=9, random=True)
        datasets.append(load_dataset(name, root=tmp_path))
    batched_ds, single_ds = datasets
    assert batched_ds.total_episodes == single_ds.total_episodes >= 99
    for a, b in zip(batched_ds, single_ds):
        assert (a.seed, a.env_id, a.options) == (b.seed, b.env_id, b.options)
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        np.testing.assert_array_equal(a.terminations, b.terminations)
        np.testing.assert_array_equal(a.truncations, b.truncations)
    for episode in batched_ds:  # CountingEnv: observation t counts the steps since the (optioned) start
        start = episode.observations[0, 0]
        np.testing.assert_array_equal(episode.observations[:, 0], start + np.arange(len(episode) + 1))
    assert {len(e) for e in batched_ds} == set(lengths)


@pytest.mark.parametrize("collector_class", ["Collector", "AsyncCollector"])
def test_unfinished_episodes_at_close_are_dropped_with_a_warning_or_stored_truncated(collector_class: str) -> None:
    """25 steps of two 10-step envs: two whole episodes, and 3 + 2 steps of episodes still running at close.
    Default: not stored, and a warning says how many; unfinished='truncate': stored, last step truncated,
    so the store holds every collected step."""
    import warnings

    from vcollect import AsyncCollector
    from vcollect.errors import UnfinishedEpisodesWarning

    cls = Collector if collector_class == "Collector" else AsyncCollector
    dropped = ListStore()
    collector = cls(None, counting_fns(2, length=10), store=dropped, seed=0)
    stats = collector.collect(n_step=25, random=True, reset_before_collect=True)
    with pytest.warns(UnfinishedEpisodesWarning, match=r"2 episodes still running at close \(5 steps\).*unfinished='truncate'"):
        collector.close()
    assert stats.n_collected_steps == 25
    assert sorted(len(e.rewards) for e in dropped.episodes) == [10, 10]
    assert all(e.terminations[-1] and not e.truncations.any() for e in dropped.episodes)

    kept = ListStore()
    collector = cls(None, counting_fns(2, length=10), store=kept, seed=0, unfinished="truncate")
    collector.collect(n_step=25, random=True, reset_before_collect=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is lost: no warning
        collector.close()
    assert sum(len(e.rewards) for e in kept.episodes) == 25
    cut = [e for e in kept.episodes if len(e.rewards) < 10]
    assert sorted(len(e.rewards) for e in cut) == [2, 3]
    for episode in cut:
        assert episode.truncations[-1] and not episode.truncations[:-1].any() and not episode.terminations.any()
        np.testing.assert_array_equal(episode.observations[:, 0], np.arange(len(episode.rewards) + 1))
        assert episode.seed is not None  # its reset's seed: the steps stored replay from it


def test_unfinished_episodes_at_a_reset_follow_the_same_choice_and_without_a_store_nothing_is_said() -> None:
    import warnings

    from vcollect.errors import UnfinishedEpisodesWarning

    kept = ListStore()
    with Collector(None, counting_fns(2, length=10), store=kept, seed=0, unfinished="truncate") as collector:
        collector.collect(n_step=6, random=True, reset_before_collect=True)
        collector.collect(n_step=4, random=True, reset_before_collect=True)  # the reset cuts 3 + 3 steps
    assert sorted(len(e.rewards) for e in kept.episodes) == [2, 2, 3, 3]
    store = ListStore()
    collector = Collector(None, counting_fns(2, length=10), store=store, seed=0)
    collector.collect(n_step=6, random=True, reset_before_collect=True)
    with pytest.warns(UnfinishedEpisodesWarning, match="2 episodes still running at reset"):
        collector.reset()
    collector.collect(n_step=2, random=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Collector(None, counting_fns(2, length=10), seed=0) as plain:  # no store: nothing to lose
            plain.collect(n_step=5, random=True, reset_before_collect=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per collector: at the reset above
        collector.close()
    assert sum(len(e.rewards) for e in store.episodes) == 0  # the close dropped the running ones too
    with pytest.raises(ValueError, match="unfinished must be 'drop' or 'truncate'"):
        Collector(None, counting_fns(1), unfinished="keep")  # type: ignore[arg-type]


@pytest.mark.parametrize("collector_class", ["Collector", "AsyncCollector"])
def test_the_unfinished_episodes_warning_comes_once_per_collector_naming_its_keyword(
    collector_class: str, recwarn: pytest.WarningsRecorder
) -> None:
    import warnings

    """Four step-count calls that each reset (dropping 2 running episodes), then a close that drops 2 more:
    one warning, at the first reset, naming the class made; a second collector says it once again."""
    from vcollect import AsyncCollector
    from vcollect.errors import UnfinishedEpisodesWarning

    cls = Collector if collector_class == "Collector" else AsyncCollector
    warnings.simplefilter("always")  # not Python's once per line and text: count every warning given
    for _ in range(2):
        store = ListStore()
        collector = cls(None, counting_fns(2, length=10), store=store, seed=0)
        for _ in range(4):
            collector.collect(n_step=6, random=True, reset_before_collect=True)
        collector.close()
        assert store.episodes == []  # every episode was cut short and dropped
    said = [w for w in recwarn.list if issubclass(w.category, UnfinishedEpisodesWarning)]
    assert len(said) == 2, [str(w.message) for w in said]
    for warning in said:
        text = str(warning.message)
        assert text.startswith("2 episodes still running at reset (6 steps) were not stored"), text
        assert f"pass {collector_class}(..., unfinished='truncate')" in text and "once per collector" in text
        assert warning.filename == __file__  # pointed at the caller's line


def test_an_entry_point_names_its_own_option_in_the_unfinished_warning() -> None:
    from vcollect.errors import UnfinishedEpisodesWarning

    collector = Collector(None, counting_fns(2, length=10), store=ListStore(), seed=0,
                          unfinished_hint="--unfinished truncate")
    collector.collect(n_step=5, random=True, reset_before_collect=True)
    with pytest.warns(UnfinishedEpisodesWarning, match="pass --unfinished truncate to store them") as said:
        collector.close()
    assert len(said) == 1 and "Collector(" not in str(said[0].message)
    with pytest.raises(TypeError, match="unfinished_hint must be a string or None"):
        Collector(None, counting_fns(1), unfinished_hint=3)  # type: ignore[typeddict-item]


class NanRewardEnv(CountingEnv):
    """CountingEnv whose step ``at`` (counted from 1 in each episode) returns reward NaN, or inf obs."""

    def __init__(self, episode_length: int = 6, at: int = 3, what: str = "reward") -> None:
        super().__init__(episode_length)
        self.at, self.what = at, what
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.t == self.at:
            if self.what == "reward":
                reward = float("nan")
            else:
                obs = np.array([np.inf], np.float32)
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("backend", ["dummy", "vector entry"])
def test_a_reward_that_is_not_finite_is_refused_naming_env_and_step(backend: str) -> None:
    """NaN rewards were stored silently and made returns_stat NaN. With validate (the default) the step
    that returned it raises ObservationError naming the env and the step; the steps before it are kept."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    fns = [lambda: NanRewardEnv(at=3), lambda: NanRewardEnv(at=99)]
    envs: Any = DummyVectorEnv(fns) if backend == "dummy" else SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    store = ListStore()
    with Collector(None, envs, store=store, seed=0) as collector:
        collector.reset()
        with pytest.raises(ObservationError, match=r"envs \[0\] returned rewards \[nan\] \(not finite\) at step \[2\]"):
            collector.collect(n_step=40, random=True)
        assert collector.buffer.episode_lengths[0] == 2  # steps 0 and 1 recorded, not the NaN one
    with Collector(None, [lambda: NanRewardEnv(at=3)], store=ListStore(), seed=0, validate=False) as collector:
        stats = collector.collect(n_episode=1, random=True, reset_before_collect=True)
        assert np.isnan(stats.returns[0])  # validate=False: stored as it is


def test_check_finite_refuses_inf_in_an_unbounded_observation_space() -> None:
    with Collector(None, [lambda: NanRewardEnv(at=2, what="obs")], seed=0) as collector:
        collector.collect(n_episode=1, random=True, reset_before_collect=True)  # inf is in Box(-inf, inf)
    collector = Collector(None, [lambda: NanRewardEnv(at=2, what="obs")], seed=0, check_finite=True)
    with collector, pytest.raises(ObservationError, match="not finite .*check_finite=True"):
        collector.collect(n_episode=1, random=True, reset_before_collect=True)


def test_collector_options_are_typed_once_and_an_unknown_one_is_refused() -> None:
    """Collector and AsyncCollector take the same keyword options (CollectorOptions gives their types,
    CollectorSettings their defaults: the two name the same options); a misspelt one is a TypeError, not
    silently ignored, on both."""
    from typing import get_type_hints

    from vcollect.async_collector import AsyncCollector
    from vcollect.collecting.options import CollectorOptions, CollectorSettings

    assert set(get_type_hints(CollectorOptions)) == {f.name for f in dataclasses.fields(CollectorSettings)}
    for cls in (Collector, AsyncCollector):
        with pytest.raises(TypeError, match="valdate"):
            cls(None, DummyVectorEnv([CountingEnv] * 2), valdate=False)  # type: ignore[call-arg]
        with cls(None, DummyVectorEnv([CountingEnv] * 2), seed=3, validate=False, unfinished="truncate") as c:
            assert not c.validate and c.unfinished == "truncate"


def test_a_random_source_draws_the_random_actions_for_the_ready_env_ids() -> None:
    """PolicyActor.random_source replaces RandomPolicy for ``collect(random=True)``: called with the ready env
    ids, its actions are recorded as given; None brings RandomPolicy back, with the collector's seed."""
    calls: list[list[int]] = []

    def source(env_ids: np.ndarray) -> np.ndarray:
        calls.append(env_ids.tolist())
        return (env_ids % 2).astype(np.int64)  # env 0 always 0, env 1 always 1, env 2 always 0

    def stored(collector: Collector) -> list[np.ndarray]:
        return [np.asarray(collector.buffer.episode(env).actions) for env in range(3)]

    with Collector(None, counting_fns(3, length=50), seed=4) as collector:
        collector.context.actor.random_source = source
        collector.collect(n_step=12, random=True, reset_before_collect=True)
        assert calls == [[0, 1, 2]] * 4
        assert [a.tolist() for a in stored(collector)] == [[0] * 4, [1] * 4, [0] * 4]
        collector.context.actor.random_source = None
        collector.collect(n_step=60, random=True, reset_before_collect=True)
        drawn = np.concatenate(stored(collector))
        assert len(calls) == 4 and 0 < drawn.sum() < drawn.size


@pytest.mark.parametrize("size", [8, 200])  # Python's sum below SMALL_BATCH values, numpy's above
def test_sum_is_finite_says_false_for_nan_inf_and_overflow_and_check_rewards_tells_them_apart(size: int) -> None:
    from vcollect.collecting.step_context import sum_is_finite

    rewards = np.ones(size)
    assert sum_is_finite(rewards)
    for bad in (np.nan, np.inf, -np.inf):
        rewards = np.ones(size)
        rewards[size // 2] = bad
        assert not sum_is_finite(rewards)
    both = np.zeros(size)
    both[0], both[-1] = np.inf, -np.inf  # the sum is NaN
    assert not sum_is_finite(both)
    huge = np.full(size, 1e308)  # every value finite, the sum overflows
    assert not sum_is_finite(huge)


class HugeRewardEnv(NanRewardEnv):
    """Rewards of 1e308: finite, but two of them sum to infinity."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, 1e308, terminated, truncated, info


def test_finite_rewards_whose_sum_overflows_are_stored_as_they_are() -> None:
    store = ListStore()
    with Collector(None, [lambda: HugeRewardEnv(at=99)] * 4, store=store, seed=0) as collector:
        collector.collect(n_step=40, random=True, reset_before_collect=True)
    assert store.episodes
    assert all(np.all(e.rewards == 1e308) for e in store.episodes)
