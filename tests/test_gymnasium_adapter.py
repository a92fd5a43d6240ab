"""GymnasiumVectorEnv: the three autoreset modes, data equal to the dummy backend where seeding allows,
exact counts with surplus transitions carried to the next call, vector entry points, errors."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from tests.envs import CountingEnv, DictObsEnv, FailingEnv
from tests.sinks import ListStore, StoredEpisode
from tests.test_async_collector import Alternating, replay
from tests.test_capabilities import assert_declares
from vcollect import Collector, DummyVectorEnv, make_vector
from vcollect.async_collector import AsyncCollector
from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.ring import RingWriter
from vcollect.collecting.loops import AllEnvLoop, BlockLoop
from vcollect.collecting.loops.blocks import BLOCK_BYTES
from vcollect.envs import EnvCapabilities, GymnasiumVectorEnv
from vcollect.envs.factory import BACKENDS
from vcollect.errors import CollectorStateError, EnvWorkerError, ObservationError
from vcollect.policies import RandomPolicy

MODES = [AutoresetMode.DISABLED, AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]


def collect_store(envs: object, n_step: int, seed: int = 0, **collect_kwargs: object) -> list[StoredEpisode]:
    store = ListStore()
    with Collector(None, envs, store=store, seed=seed) as collector:
        collector.collect(n_step=n_step, random=True, reset_before_collect=True, **collect_kwargs)
    return store.episodes


def assert_same_episode(a: StoredEpisode, b: StoredEpisode) -> None:
    assert (a.env_id, a.seed) == (b.env_id, b.seed)
    np.testing.assert_equal(a.observations, b.observations)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_array_equal(a.terminations, b.terminations)
    np.testing.assert_array_equal(a.truncations, b.truncations)


@pytest.mark.parametrize("make", [gym.vector.SyncVectorEnv, functools.partial(AsyncVectorEnv, context="fork")])
def test_disabled_mode_gives_the_dummy_backends_data(make) -> None:
    """Seeded resets through reset_mask: every episode, seed included, equals the dummy backend's."""
    fns = [lambda: gym.make("CartPole-v1")] * 4
    dummy = collect_store(DummyVectorEnv(fns), n_step=4 * 60)
    adapted = collect_store(make(fns, autoreset_mode=AutoresetMode.DISABLED), n_step=4 * 60)
    assert len(dummy) == len(adapted) > 4
    for a, b in zip(dummy, adapted):
        assert_same_episode(a, b)
        replay(b)


def test_nested_spaces_through_the_adapter_equal_the_dummy_backend() -> None:
    fns = [DictObsEnv] * 3
    dummy = collect_store(DummyVectorEnv(fns), n_step=3 * 40)
    adapted = collect_store(SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED), n_step=3 * 40)
    assert len(dummy) == len(adapted) > 3
    for a, b in zip(dummy, adapted):
        assert_same_episode(a, b)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_autoreset_modes_store_whole_episodes_and_seed_only_the_first(mode: AutoresetMode) -> None:
    """NEXT_STEP drops the restart row, SAME_STEP takes final_obs: CountingEnv episodes read 0..T exactly."""
    lengths = [2, 3, 5]
    fns = [functools.partial(CountingEnv, n) for n in lengths]
    store = ListStore()
    with Collector(None, SyncVectorEnv(fns, autoreset_mode=mode), store=store, seed=0) as collector:
        collector.reset()
        reported = [collector.collect(n_step=n, random=True).n_collected_steps for n in (1, 4, 20, 2)]
        assert reported == [1, 4, 20, 2]
        assert sum(reported) + collector.pending_transitions == len(collector.buffer)
        assert collector.capabilities.autoresets
    per_env: dict[int, list[StoredEpisode]] = {}
    for episode in store.episodes:
        per_env.setdefault(episode.env_id, []).append(episode)
        length = lengths[episode.env_id]
        np.testing.assert_array_equal(episode.observations[:, 0], np.arange(length + 1))
        np.testing.assert_array_equal(episode.rewards, np.ones(length))
    for episodes in per_env.values():  # the collector's reset is seeded; the env's own restarts are not
        assert episodes[0].seed is not None
        assert all(e.seed is None for e in episodes[1:])


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_first_episodes_equal_the_dummy_backends(mode: AutoresetMode) -> None:
    fns = [lambda: gym.make("CartPole-v1")] * 4
    dummy = collect_store(DummyVectorEnv(fns), n_step=4 * 150)
    adapted = collect_store(SyncVectorEnv(fns, autoreset_mode=mode), n_step=4 * 150)
    for env_id in range(4):
        first_dummy = next(e for e in dummy if e.env_id == env_id)
        first_adapted = next(e for e in adapted if e.env_id == env_id)
        assert_same_episode(first_dummy, first_adapted)
    for episode in adapted:
        if episode.seed is not None:
            replay(episode)


def assert_cartpole_transitions(episode: StoredEpisode) -> None:
    """Each stored step is CartPole's dynamics from the stored observation and action (vector envs
    compute in float64 and return float32, hence the tolerance)."""
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    for t, action in enumerate(episode.actions):
        env.state = episode.observations[t].astype(np.float64)
        obs, reward, terminated, _, _ = env.step(int(action))
        np.testing.assert_allclose(obs, episode.observations[t + 1], rtol=1e-5, atol=1e-5)
        assert reward == episode.rewards[t] == 1.0
        assert terminated == episode.terminations[t]
    assert episode.terminations[-1] or episode.truncations[-1]
    assert abs(episode.observations[0]).max() <= 0.05  # a fresh start, not the end of another episode


def test_vector_entry_point_counts_exactly_and_carries_surplus_over() -> None:
    vector_env = gym.make_vec("CartPole-v1", num_envs=16, vectorization_mode="vector_entry_point")
    store = ListStore()
    with Collector(None, vector_env, store=store, seed=0) as collector:
        assert isinstance(collector.envs, GymnasiumVectorEnv) and not collector.capabilities.seeded_resets
        collector.reset()
        calls = [collector.collect(n_step=n, random=True) for n in (5, 100, 17, 1)]
        assert [s.n_collected_steps for s in calls] == [5, 100, 17, 1]
        assert 123 + collector.pending_transitions == len(collector.buffer)
        # A call that the carried transitions cover does not step the envs at all.
        assert collector.pending_transitions >= 1
        steps_before = collector.envs.env.unwrapped.steps.copy()  # type: ignore[attr-defined]
        calls.append(collector.collect(n_step=1, random=True))
        assert calls[-1].n_collected_steps == 1
        np.testing.assert_array_equal(collector.envs.env.unwrapped.steps, steps_before)  # type: ignore[attr-defined]
        calls.append(collector.collect(n_episode=20, random=True))
        assert calls[-1].n_collected_episodes == 20
        assert sum(s.n_collected_steps for s in calls) + collector.pending_transitions == len(collector.buffer)
    assert all(e.seed is None for e in store.episodes)  # one int seed for the whole vector env
    assert len(store.episodes) >= sum(s.n_collected_episodes for s in calls)
    for episode in store.episodes:
        assert_cartpole_transitions(episode)


def test_n_episode_quota_and_carried_episodes_count_in_the_next_call() -> None:
    lengths = [2, 9]
    fns = [functools.partial(CountingEnv, n) for n in lengths]
    store = ListStore()
    with Collector(None, SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP), store=store, seed=0) as c:
        c.reset()
        first = c.collect(n_episode=2, random=True)
        # one episode per env; env 0 finished more episodes meanwhile: stored now, reported later
        assert sorted(first.lens.tolist()) == [2, 9]
        assert len(store.episodes) > 2 and c.pending_transitions > 0
        second = c.collect(n_episode=2, random=True)
        assert sorted(second.lens.tolist()) == [2, 9]
        assert first.n_collected_steps == second.n_collected_steps == 2 + 9
    assert len(store.episodes) >= 4


def test_make_vector_and_direct_vector_envs() -> None:
    entry = make_vector("CartPole-v1", 4, backend="gymnasium")
    assert type(entry.env.unwrapped).__name__ == "CartPoleVectorEnv"  # type: ignore[attr-defined]
    assert entry.autoreset_mode == AutoresetMode.NEXT_STEP  # type: ignore[attr-defined]
    entry.close()
    sync = make_vector("CartPole-v1", 2, backend="gymnasium", vectorization_mode="sync")
    assert isinstance(sync.env, SyncVectorEnv) and sync.autoreset_mode == AutoresetMode.DISABLED  # type: ignore[attr-defined]
    sync.close()
    same = make_vector(CountingEnv, 2, backend="gymnasium", autoreset_mode="same_step", env_kwargs={"episode_length": 3})
    assert same.autoreset_mode == AutoresetMode.SAME_STEP  # type: ignore[attr-defined]
    assert "gymnasium" in BACKENDS
    with pytest.raises(ValueError, match="needs a registered env id"):
        make_vector(CountingEnv, 2, backend="gymnasium", vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="unknown autoreset_mode"):
        make_vector(CountingEnv, 2, backend="gymnasium", autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="envpool"):
        make_vector("CartPole-v1", 2, backend="nope")
    with Collector(None, same, seed=0) as collector:
        assert collector.collect(n_step=7, random=True, reset_before_collect=True).n_collected_steps == 7
    with pytest.raises(TypeError):
        GymnasiumVectorEnv(gym.make("CartPole-v1"))  # type: ignore[arg-type]


def test_async_collector_collects_from_a_gymnasium_vector_env() -> None:
    vector_env = SyncVectorEnv([functools.partial(CountingEnv, 4)] * 3, autoreset_mode=AutoresetMode.NEXT_STEP)
    with AsyncCollector(None, vector_env, seed=0) as collector:
        assert collector.collect(n_step=10, random=True, reset_before_collect=True).n_collected_steps == 10
        assert collector.collect(n_episode=4, random=True).n_collected_episodes == 4


def test_protocol_half_and_errors() -> None:
    envs = GymnasiumVectorEnv(SyncVectorEnv([functools.partial(CountingEnv, 2)] * 3, autoreset_mode=AutoresetMode.DISABLED))
    obs, infos = envs.reset(seeds=[1, 2, 3])
    assert obs.shape == (3, 1) and [i["seed"] for i in infos] == [1, 2, 3]
    with pytest.raises(ValueError, match="steps all its 3 envs at once"):
        envs.step(np.zeros(2, np.int64), env_ids=[0, 1])
    envs.send(np.zeros(3, np.int64))
    assert envs.in_flight.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="in flight"):
        envs.reset(env_ids=[0])
    next_obs, rewards, terms, _, infos, ids = envs.recv()
    assert ids.tolist() == [0, 1, 2] and next_obs[:, 0].tolist() == [1, 1, 1] and [i["t"] for i in infos] == [1, 1, 1]
    _, _, terms, _, _ = envs.step(np.zeros(3, np.int64))
    assert terms.all()
    with pytest.raises(ValueError, match=r"\[0, 1, 2\] finished and were not reset"):
        envs.step(np.zeros(3, np.int64))
    obs, infos = envs.reset(env_ids=[2, 0], seeds=[7, 5], options={"start": 10})  # through reset_mask
    assert obs[:, 0].tolist() == [10, 10] and [i["seed"] for i in infos] == [7, 5]
    envs.reset_async(env_ids=[1])
    assert envs.recv_reset()[2].tolist() == [1]
    envs.close()
    envs.close()
    with pytest.raises(CollectorStateError, match="closed"):
        envs.step(np.zeros(3, np.int64))

    entry = GymnasiumVectorEnv(gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point"))
    with pytest.raises(ValueError, match="resets all its envs at once"):
        entry.reset(env_ids=[1])
    entry.close()


@pytest.mark.filterwarnings("ignore::UserWarning")  # gymnasium logs the worker's error too
def test_errors_inside_the_vector_env_become_env_worker_errors() -> None:
    fns = [CountingEnv, functools.partial(FailingEnv, fail_step=2)]
    vector_env = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED, context="fork")
    with Collector(None, vector_env, seed=0) as collector, pytest.raises(EnvWorkerError) as info:
        collector.collect(n_step=10, random=True, reset_before_collect=True)
    assert "FailingEnv exploded at step 2" in info.value.traceback_text


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_keeps_counts_exact_under_a_policy(mode: AutoresetMode) -> None:
    def policy(obs: np.ndarray, state: None) -> tuple[np.ndarray, None]:
        return (obs[:, 2] > 0).astype(np.int64), None

    fns = [lambda: gym.make("CartPole-v1")] * 3
    with Collector(policy, SyncVectorEnv(fns, autoreset_mode=mode), seed=3) as collector:
        collector.reset()
        stats = [collector.collect(n_step=n) for n in (2, 11, 40)]
        assert [s.n_collected_steps for s in stats] == [2, 11, 40]
        assert 53 + collector.pending_transitions == len(collector.buffer)


@pytest.mark.parametrize("mode", MODES)
def test_policy_after_random_steps_sees_each_envs_latest_observation(mode: AutoresetMode) -> None:
    """A policy acting after random collection (which keeps no observation cache) gets each env's latest
    observation, the one the vector env returned last, and the arrays handed to it are never written to
    afterwards (NEXT_STEP collection stages steps in blocks: the rings may lag behind while it runs)."""
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    class Latest(gym.vector.VectorWrapper):
        """Remembers the last batch of observations the vector env returned."""

        def step(self, actions: Any) -> Any:
            result = super().step(actions)
            self.latest = np.array(result[0])
            return result

        def reset(self, **kwargs: Any) -> Any:
            result = super().reset(**kwargs)
            self.latest = np.array(result[0])
            return result

    def policy(obs: np.ndarray, state: None) -> tuple[np.ndarray, None]:
        seen.append((obs, obs.copy(), envs.latest.copy()))
        return (obs[:, 2] > 0).astype(np.int64), None

    envs = Latest(SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3, autoreset_mode=mode))
    with Collector(policy, envs, seed=3) as collector:
        collector.reset()
        for n in (5, 7, 13, 4, 30):
            collector.collect(n_step=n, random=True)
            collector.collect(n_step=n)
    assert len(seen) >= 18
    for obs, at_call, latest in seen:
        np.testing.assert_array_equal(obs, latest)
        np.testing.assert_array_equal(obs, at_call)


# ---------------------------------------------------------------- NEXT_STEP steps staged in blocks


def take(batch: Any, first: int, stop: int) -> Any:
    """Rows [first, stop) of a batched nested value."""
    if isinstance(batch, dict):
        return {key: take(value, first, stop) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(take(value, first, stop) for value in batch)
    return batch[first:stop]


class Frames(gym.Env):
    """Image observations (64 KiB each, all pixels the step count), episodes of a seeded 5 to 30 steps."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (128, 128, 4), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self._t = self._length = 0

    def _frame(self) -> np.ndarray:
        return np.full((128, 128, 4), self._t % 256, np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t, self._length = 0, int(self.np_random.integers(5, 31))
        return self._frame(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        return self._frame(), float(action), self._t >= self._length, False, {}


def next_step_envs(kind: str) -> gym.vector.VectorEnv:
    """Five envs that restart on the step after they finish: CartPole's vector entry point (one seed for
    all), or a SyncVectorEnv (a seed per env: the first episodes are stored with theirs) of CartPole, of an
    env with nested Dict/Tuple observations, or of one with large image observations."""
    if kind == "vector entry":
        return gym.make_vec("CartPole-v1", num_envs=5, vectorization_mode="vector_entry_point")
    make = {"sync": lambda: gym.make("CartPole-v1"), "dict": DictObsEnv, "frames": Frames}[kind]
    return SyncVectorEnv([make] * 5, autoreset_mode=AutoresetMode.NEXT_STEP)


def collect_in_calls(
    blocks: bool, capacity: int | None, policy: Any, kind: str
) -> tuple[list, list[StoredEpisode], int, int, int | None]:
    """Collect in n_step and n_episode calls of uneven sizes, staging steps in blocks or not; returns stats,
    stored episodes, pending transitions, ring rows and block size."""
    envs = next_step_envs(kind)
    store = ListStore()
    buffer = None
    if capacity is not None:
        buffer = VectorRingBuffer(5, capacity, envs.single_observation_space, envs.single_action_space, keep_overflow=True)
    random = policy is None
    with Collector(policy, envs, buffer=buffer, store=store, seed=1, stage_blocks=blocks) as collector:
        assert isinstance(collector._loop, BlockLoop if blocks else AllEnvLoop)
        collector.reset(seed=4)
        stats = [collector.collect(n_step=n, random=random) for n in (3, 70, 7, 400, 1, 200)]
        stats.append(collector.collect(n_episode=9, random=random))
        stats.append(collector.collect(n_step=130, random=random))
        stats += [collector.collect(n_episode=n, random=random) for n in (1, 23, 2)]
        stats.append(collector.collect(n_step=11, random=random))
        loop = collector._loop
        block_size = loop.block.size if isinstance(loop, BlockLoop) else None
        return stats, store.episodes, collector.pending_transitions, len(collector.buffer), block_size


@pytest.mark.parametrize("kind", ["vector entry", "sync"])
@pytest.mark.parametrize("policy", [None, Alternating()], ids=["random", "stateful policy"])
@pytest.mark.parametrize("capacity", [None, 12, 40], ids=["default rings", "short rings", "rings near episodes"])
def test_staged_blocks_record_what_the_per_step_path_records(capacity: int | None, policy: Any, kind: str) -> None:
    """Staging NEXT_STEP steps in blocks changes no data: the same stats per call, the same episodes (seeds
    included) in the store in the same order, the same transitions left pending. Rings shorter than the
    episodes make them spill out, which the blocks hand to the per-step path; rings near the episodes'
    length make queued episodes due for the store within a few blocks; a stateful policy's state is reset
    when its env restarts by itself."""
    staged = collect_in_calls(True, capacity, policy, kind)
    stepwise = collect_in_calls(False, capacity, policy, kind)
    assert_same_collection(staged, stepwise)
    assert any(e.seed is not None for e in staged[1]) == (kind == "sync")


def assert_same_collection(staged: tuple, stepwise: tuple) -> None:
    """collect_in_calls' results agree: stats per call, stored episodes, pending transitions, ring rows.
    Returns of float rewards may differ in the last bits: blocks sum an episode's rewards as numpy's sum
    does, not one addition per step."""
    for a, b in zip(staged[0], stepwise[0], strict=True):
        assert a.n_collected_steps == b.n_collected_steps and a.n_collected_episodes == b.n_collected_episodes
        np.testing.assert_allclose(a.returns, b.returns, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(a.lens, b.lens)
    assert len(staged[1]) == len(stepwise[1]) > 15
    for a, b in zip(staged[1], stepwise[1]):
        assert_same_episode(a, b)
        assert a.options == b.options
    assert staged[2:4] == stepwise[2:4]


def test_nested_observations_go_through_blocks_as_through_single_steps() -> None:
    """Dict/Tuple observations and Discrete leaves staged in blocks, leaf by leaf, give the same data."""
    assert_same_collection(collect_in_calls(True, None, None, "dict"), collect_in_calls(False, None, None, "dict"))


def test_large_observations_make_shorter_blocks() -> None:
    """A block holds at most BLOCK_BYTES of observations (5 envs x 64 KiB frames: 12 steps), and the data
    is the per-step path's."""
    staged = collect_in_calls(True, 40, None, "frames")
    assert staged[4] == BLOCK_BYTES // (5 * 128 * 128 * 4) == 12
    assert_same_collection(staged, collect_in_calls(False, 40, None, "frames"))


class Spoiled(gym.vector.VectorWrapper):
    """From its ``at``-th step on, env 2's observations are NaN (or, with ``short``, one env's row is
    missing); keeps every observation batch and done mask it returned."""

    def __init__(self, env: gym.vector.VectorEnv, at: int, short: bool = False) -> None:
        super().__init__(env)
        self.at, self.short = at, short
        self.batches: list[np.ndarray] = []
        self.done: list[np.ndarray] = []

    def step(self, actions: Any) -> Any:
        obs, rewards, terminations, truncations, infos = super().step(actions)
        obs = np.array(obs)
        if len(self.batches) + 1 >= self.at:
            if self.short:
                obs = obs[:-1]
            else:
                obs[2, 0] = np.nan
        self.batches.append(obs.copy())
        self.done.append(np.asarray(terminations | truncations))
        return obs, rewards, terminations, truncations, infos


@pytest.mark.parametrize("kind", ["random", "policy", "blind policy"])
def test_bad_observation_in_a_block_keeps_every_step_before_it(kind: str) -> None:
    """An observation outside the space in the middle of a block raises ObservationError naming it; the
    steps before it are all recorded (rings and pending transitions), none of it or after it; a policy that
    reads observations never sees it (one that reads none, RandomPolicy, has it checked with the block, as
    random actions do, and the same is recorded)."""
    envs = Spoiled(gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point"), at=40)
    random = kind == "random"

    def policy(obs: np.ndarray, state: None) -> tuple[np.ndarray, None]:
        assert np.isfinite(obs).all()
        return (obs[:, 2] > 0).astype(np.int64), None

    acting = {"random": None, "policy": policy, "blind policy": RandomPolicy(envs.single_action_space, seed=0)}[kind]
    with Collector(acting, envs, seed=0) as collector:
        collector.reset(seed=1)
        with pytest.raises(ObservationError, match="outside the observation space"):
            collector.collect(n_step=10_000, random=random)
        np.testing.assert_array_equal(RingWriter(collector.buffer).last_obs(np.arange(4)), envs.batches[38])
        restarting = np.concatenate([np.zeros((1, 4), bool), np.array(envs.done[:38])])
        assert collector.pending_transitions == int((~restarting).sum())


class CountingPolicy:
    """Actions from a call counter (never from the observations); keeps every observation batch it is handed
    and a copy of it made at the call. ``reads_observations`` as given."""

    def __init__(self, reads_observations: bool) -> None:
        self.reads_observations = reads_observations
        self.handed: list[np.ndarray] = []
        self.copies: list[np.ndarray] = []

    def __call__(self, obs: np.ndarray, state: None) -> tuple[np.ndarray, None]:
        self.handed.append(obs)
        self.copies.append(obs.copy())
        calls = len(self.handed)
        return np.array([(calls // 3 + i) % 2 for i in range(len(obs))], np.int64), None


def test_block_loop_hands_every_policy_the_current_observations_and_a_reading_one_rows_never_written_over() -> None:
    """Over several blocks and two calls, a policy that reads no observations gets the very observations one
    that reads them gets (its block's rows are written over, not renewed), and what a reading policy was
    handed stays as it was (its rows are renewed); both record the same steps."""
    got = {}
    for reads in (True, False):
        policy = CountingPolicy(reads)
        envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point")
        store = ListStore()
        with Collector(policy, envs, store=store, seed=0, unfinished="truncate") as collector:
            assert isinstance(collector._loop, BlockLoop)
            collector.reset(seed=5)
            first = collector.collect(n_step=500)
            second = collector.collect(n_step=300)
            got[reads] = (policy, [(s.n_collected_steps, s.returns.tolist()) for s in (first, second)], store.episodes)
    (reader, reader_stats, reader_eps), (blind, blind_stats, blind_eps) = got[True], got[False]
    assert len(reader.copies) > 3 * 64 and len(blind.copies) == len(reader.copies)
    for k, (seen, copy) in enumerate(zip(reader.handed, reader.copies)):
        np.testing.assert_array_equal(seen, copy, err_msg=f"call {k}: a row handed to the policy was written over")
    for k, (blind_copy, copy) in enumerate(zip(blind.copies, reader.copies)):
        np.testing.assert_array_equal(blind_copy, copy, err_msg=f"call {k}: not the current observations")
    assert blind_stats == reader_stats and len(reader_eps) == len(blind_eps) > 3
    for ours, theirs in zip(blind_eps, reader_eps):
        np.testing.assert_array_equal(ours.observations, theirs.observations)
        np.testing.assert_array_equal(ours.actions, theirs.actions)


def test_wrong_observation_shape_from_a_vector_env_is_refused() -> None:
    """A vector env returning a batch of the wrong shape gets ObservationError saying so (a row copy into a
    block would broadcast it silently)."""
    envs = Spoiled(gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point"), at=3, short=True)
    with Collector(None, envs, seed=0) as collector:
        collector.reset()
        with pytest.raises(ObservationError, match=r"shape \(3, 4\), expected \(4, 4\)"):
            collector.collect(n_step=100, random=True)
        assert collector.pending_transitions == 8


@pytest.mark.parametrize("blocks", [True, False], ids=["blocks", "per step"])
def test_progress_bar_of_all_env_steps_ends_at_the_count(capsys: pytest.CaptureFixture[str], blocks: bool) -> None:
    """The bar counts what is recorded, steps or episodes within the quotas, ending at the count."""
    envs = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="vector_entry_point")
    with Collector(None, envs, seed=0, stage_blocks=blocks) as collector:
        collector.reset()
        collector.collect(n_step=300, random=True, progress=True)
        assert "300/300" in capsys.readouterr().err
        collector.collect(n_episode=41, random=True, progress=True)
        assert "41/41" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (AutoresetMode.DISABLED, EnvCapabilities(steps_all_envs=True)),
        (AutoresetMode.NEXT_STEP, EnvCapabilities(steps_all_envs=True, autoresets=True, steps_in_blocks=True)),
        (AutoresetMode.SAME_STEP, EnvCapabilities(steps_all_envs=True, autoresets=True)),
    ],
)
def test_capabilities_follow_the_autoreset_mode(mode: AutoresetMode, expected: EnvCapabilities) -> None:
    envs = GymnasiumVectorEnv(SyncVectorEnv([CountingEnv] * 2, autoreset_mode=mode))
    try:
        assert_declares(envs, expected)
    finally:
        envs.close()


def test_vector_entry_points_declare_unseeded_resets() -> None:
    envs = make_vector("CartPole-v1", 3, backend="gymnasium")  # CartPole's own vector env, NEXT_STEP
    try:
        expected = EnvCapabilities(steps_all_envs=True, autoresets=True, seeded_resets=False, steps_in_blocks=True)
        assert_declares(envs, expected)
        assert envs.capabilities.loop == "blocks"
    finally:
        envs.close()
