"""EnvPoolVectorEnv: EnvPool's sync and async (batch_size < num_envs) modes driven by the collectors, with
exact counts, real CartPole transitions, and per-env data independent of the mode."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

try:
    import envpool
except ImportError as exc:  # envpool has wheels for Linux x86-64 only
    pytest.skip(f"envpool cannot be imported on this platform ({exc})", allow_module_level=True)

from tests.sinks import ListStore, StoredEpisode
from tests.test_capabilities import assert_declares
from tests.test_gymnasium_adapter import assert_cartpole_transitions
from vcollect import Collector, make_vector
from vcollect.async_collector import AsyncCollector
from vcollect.collecting.loops import AllEnvLoop, BlockLoop
from vcollect.collecting.loops import blocks as block_loop
from vcollect.envs import EnvCapabilities, EnvPoolVectorEnv
from vcollect.envs.steps import StepBlock

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # envpool's Box precision warnings


def upright(obs: np.ndarray, state: None) -> tuple[np.ndarray, None]:
    """Deterministic policy: push towards the side the pole leans to."""
    return (obs[:, 2] > 0).astype(np.int64), None


def pool(num_envs: int = 8, batch_size: int | None = None, seed: int = 7) -> EnvPoolVectorEnv:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_vector("CartPole-v1", num_envs, backend="envpool", batch_size=batch_size, seed=seed)  # type: ignore[return-value]


def by_env(episodes: list[StoredEpisode]) -> dict[int, list[StoredEpisode]]:
    out: dict[int, list[StoredEpisode]] = {}
    for episode in episodes:
        out.setdefault(episode.env_id, []).append(episode)
    return out


def test_sync_mode_collector_exact_counts_and_real_transitions() -> None:
    envs = pool()
    assert envs.seed == 7 and not envs.is_async and envs.capabilities.recv_batch_size == 1
    store = ListStore()
    with Collector(None, envs, store=store, seed=0) as collector:
        assert isinstance(collector._loop, BlockLoop)
        collector.reset()
        stats = [collector.collect(n_step=n, random=True) for n in (3, 250, 13)]
        assert [s.n_collected_steps for s in stats] == [3, 250, 13]
        # one pool call per step (EnvPool restarts finished envs): surplus transitions wait for the next call
        assert 266 + collector.pending_transitions == len(collector.buffer)
        episodes = collector.collect(n_episode=9, random=True)
        assert episodes.n_collected_episodes == 9
        assert 266 + episodes.n_collected_steps + collector.pending_transitions == len(collector.buffer)
    assert store.episodes and all(e.seed is None for e in store.episodes)  # envpool cannot seed resets
    for episode in store.episodes:
        assert_cartpole_transitions(episode)


@pytest.mark.parametrize("batch_size", [4, 2])
def test_async_mode_exact_counts_and_same_per_env_data_as_sync_mode(batch_size: int) -> None:
    """Each env's generator is seeded from the pool seed, so with an observation-driven policy every env
    produces the same episodes whatever order the pool returns them in."""
    stores = {}
    for size in (8, batch_size):
        store = ListStore()
        envs = pool(batch_size=size)
        with AsyncCollector(upright, envs, store=store, seed=0) as collector:
            collector.reset()
            stats = [collector.collect(n_step=n) for n in (101, 3, 400)]
            assert [s.n_collected_steps for s in stats] == [101, 3, 400]
            episodes = collector.collect(n_episode=11)
            assert episodes.n_collected_episodes == 11
            reported = sum(s.n_collected_steps for s in [*stats, episodes])
            # steps added to fill a batch are recorded now and reported by the next call
            assert reported + collector.pending_transitions == len(collector.buffer)
        stores[size] = by_env(store.episodes)
    sync, other = stores[8], stores[batch_size]
    compared = 0
    for env_id in range(8):
        for a, b in zip(sync.get(env_id, []), other.get(env_id, [])):
            np.testing.assert_array_equal(a.observations, b.observations)
            np.testing.assert_array_equal(a.actions, b.actions)
            compared += 1
    assert compared >= 8
    for episodes in other.values():
        for episode in episodes:
            assert_cartpole_transitions(episode)


def test_sync_mode_staged_blocks_record_what_the_per_step_path_records() -> None:
    """The Collector stages a sync pool's steps in blocks (EnvPool restarts envs on their next step); the
    data equals the per-step path's, in n_step and n_episode calls: stats per call, episodes in the store,
    transitions pending."""
    runs = []
    for blocks in (True, False):
        store = ListStore()
        with Collector(None, pool(), store=store, seed=0, stage_blocks=blocks) as collector:
            assert isinstance(collector._loop, BlockLoop if blocks else AllEnvLoop)
            collector.reset()
            stats = [collector.collect(n_step=n, random=True) for n in (5, 3000, 1, 1700)]
            stats += [collector.collect(n_episode=n, random=True) for n in (3, 50)]
            runs.append((stats, store.episodes, collector.pending_transitions))
    (staged, staged_eps, staged_pending), (stepwise, stepwise_eps, stepwise_pending) = runs
    assert [s.n_collected_steps for s in staged[:4]] == [s.n_collected_steps for s in stepwise[:4]] == [5, 3000, 1, 1700]
    assert [s.n_collected_episodes for s in staged[4:]] == [s.n_collected_episodes for s in stepwise[4:]] == [3, 50]
    for a, b in zip(staged, stepwise):
        np.testing.assert_array_equal(a.lens, b.lens)
        np.testing.assert_array_equal(a.returns, b.returns)
    assert len(staged_eps) == len(stepwise_eps) >= 100 and staged_pending == stepwise_pending
    for a, b in zip(staged_eps, stepwise_eps):
        assert a.env_id == b.env_id
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)


def test_step_into_hands_over_arrays_the_pool_never_writes_again() -> None:
    """``hands_over_obs``: each step's observation array is new and EnvPool does not write to it after
    handing it over, through later steps and restarts; the block keeps the very arrays (no copy). Should an
    EnvPool release start reusing its buffers, this fails, and the block must copy again."""
    envs = pool()
    assert envs.capabilities.hands_over_obs
    envs.reset()
    block = StepBlock(8, 60, envs.single_observation_space, envs.single_action_space, hold_obs=True)
    copies = []
    for k in range(60):  # CartPole episodes under random actions are ~20 steps: restarts among them
        envs.step_into(np.random.default_rng(k).integers(0, 2, 8), block)
        copies.append(block.obs_leaf_row(k)[0].copy())
    assert block.restarts().any()
    rows = [block.obs_leaf_row(k)[0] for k in range(60)]
    for k in range(60):
        np.testing.assert_array_equal(rows[k], copies[k])
    assert not any(np.shares_memory(rows[k], rows[k + 1]) for k in range(59))
    envs.close()


def test_staged_blocks_with_a_policy_record_what_the_per_step_path_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a policy acting on the held arrays (no copy of them in the block), the staged loop stores the
    per-step loop's episodes. CartPole's observations are small enough to be copied (HOLD_OBS_BYTES);
    they are held here with the threshold at zero."""
    with Collector(None, pool()) as small:
        assert isinstance(small._loop, BlockLoop) and not small._loop.block.hold_obs
    monkeypatch.setattr(block_loop, "HOLD_OBS_BYTES", 0)
    runs = []
    for blocks in (True, False):
        store = ListStore()
        with Collector(upright, pool(), store=store, seed=0, stage_blocks=blocks) as collector:
            assert isinstance(collector._loop, BlockLoop if blocks else AllEnvLoop)
            if blocks:
                assert collector._loop.block.hold_obs
            collector.reset()
            stats = collector.collect(n_step=3000)
            runs.append((stats.n_collected_steps, store.episodes))
    (staged_steps, staged), (stepwise_steps, stepwise) = runs
    assert staged_steps == stepwise_steps == 3000 and len(staged) == len(stepwise) > 5
    for a, b in zip(staged, stepwise):
        assert a.env_id == b.env_id
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)


def test_collectors_accept_a_pool_directly_and_reject_async_pools_for_sync_collection() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, seed=1)
        async_raw = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=2, seed=1)
    with Collector(None, raw, seed=0) as collector:
        assert isinstance(collector.envs, EnvPoolVectorEnv)
        assert collector.collect(n_step=10, random=True, reset_before_collect=True).n_collected_steps == 10
    with pytest.raises(ValueError, match="AsyncCollector"):
        Collector(None, async_raw)
    with AsyncCollector(None, async_raw, seed=0) as collector:
        assert collector.collect(n_step=5, random=True, reset_before_collect=True).n_collected_steps == 5


def test_bad_input_is_rejected_without_hanging() -> None:
    with pytest.raises(ValueError, match="multiple of batch_size"):
        pool(num_envs=6, batch_size=4)
    with pytest.raises(TypeError, match="task id"):
        make_vector(lambda: None, 2, backend="envpool")  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="no task"):
        make_vector("NoSuchTask-v9", 2, backend="envpool")
    with pytest.raises(TypeError):
        EnvPoolVectorEnv(object())
    envs = pool(num_envs=4, batch_size=2)
    envs.reset()
    with pytest.raises(ValueError, match="no options"):
        envs.reset(options={"start": 1})
    envs.send(np.zeros(1, np.int64), env_ids=[3])
    with pytest.raises(ValueError, match="already have a step or reset in flight"):
        envs.send(np.zeros(1, np.int64), env_ids=[3])
    with pytest.raises(ValueError, match="unknown env id"):
        envs.send(np.zeros(1, np.int64), env_ids=[4])
    # one env in flight, but the pool answers two at a time: a clear error instead of a hang
    with pytest.raises(ValueError, match="batch_size=2"):
        envs.recv()
    envs.send(np.zeros(1, np.int64), env_ids=[0])
    steps, resets = envs.recv_any()
    assert resets is None and steps is not None and sorted(steps[-1].tolist()) == [0, 3]
    envs.close()
    envs.close()


@pytest.mark.parametrize(
    ("batch_size", "expected"),
    [
        (None, EnvCapabilities(steps_all_envs=True, autoresets=True, seeded_resets=False, steps_in_blocks=True, recv_any=True,
                               hands_over_obs=True)),
        (4, EnvCapabilities(autoresets=True, seeded_resets=False, step_reset=True, recv_batch_size=4, recv_any=True)),
    ],
)
def test_capabilities_follow_sync_or_async_mode(batch_size: int | None, expected: EnvCapabilities) -> None:
    envs = pool(8, batch_size=batch_size)
    try:
        assert_declares(envs, expected)
    finally:
        envs.close()
