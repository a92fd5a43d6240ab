"""Collector hooks (Tianshou's on_step_hook / on_episode_done_hook): what they see, what they change in
the rings and the store, exact counts with hooks on, and a hook that raises or returns the wrong length."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests.envs import CountingEnv
from vcollect import AsyncCollector, Collector, DummyVectorEnv, SubprocVectorEnv, VectorRingBuffer
from vcollect.buffers.ring import ring_columns
from vcollect.collecting.loops import BlockLoop
from vcollect.errors import HookOutputError, UnfinishedEpisodesWarning
from vcollect.hooks import EpisodeRolloutHookMCReturn, StepRollout
from vcollect.store import EpisodeStore, load_dataset

LENGTHS = (3, 4)  # env i's episodes last LENGTHS[i] steps

BACKENDS = ["dummy", "subproc", "blocks", "same_step", "async", "record_infos"]


class InfoCountingEnv(CountingEnv):
    """CountingEnv whose reset info has the step info's key (record_infos needs one structure)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"t": 0}


def make(backend: str, **kwargs: Any) -> Collector:
    """Collectors over 2 CountingEnvs (episodes of LENGTHS steps). "record_infos": the dummy backend with
    infos recorded, which steps and resets in separate calls (no step_reset)."""
    env_class = InfoCountingEnv if backend == "record_infos" else CountingEnv
    fns = [lambda length=length: env_class(length) for length in LENGTHS]
    if backend == "record_infos":
        kwargs["record_infos"] = True
    kind: type[Collector] = AsyncCollector if backend == "async" else Collector
    envs: Any
    if backend == "subproc":
        envs = SubprocVectorEnv(fns)
    elif backend == "blocks":
        envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    elif backend == "same_step":
        envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        envs = DummyVectorEnv(fns)
    return kind(None, envs, seed=0, **kwargs)


def mc_reference(rewards: np.ndarray, gamma: float) -> np.ndarray:
    return np.array([sum(r * gamma**k for k, r in enumerate(rewards[t:])) for t in range(len(rewards))])


@pytest.mark.parametrize("backend", BACKENDS)
def test_monte_carlo_returns_are_stored_per_step_in_the_store_and_the_ring(backend: str, tmp_path: Path) -> None:
    gamma = 0.5
    envs_probe = DummyVectorEnv([lambda: CountingEnv(3)])
    store = EpisodeStore.create("hooks/mc-v0", envs_probe.single_observation_space, envs_probe.single_action_space,
                                root=tmp_path)
    envs_probe.close()
    with make(backend, store=store, on_episode_done_hook=EpisodeRolloutHookMCReturn(gamma)) as collector:
        if backend == "blocks":
            assert isinstance(collector._loop, BlockLoop)  # the block loop, stepping row by row while hooked
        stats = collector.collect(n_episode=6, random=True, reset_before_collect=True)
        extras = collector.buffer.extras["mc_return_to_go"].reshape(collector.num_envs, -1)
        full = collector.buffer.extras["full_episode_mc_return"].reshape(collector.num_envs, -1)
        columns = ring_columns(collector.buffer)
        rewards = columns.by_env(columns.rewards)  # (num_envs, capacity): the rings' step rows
    store.close()
    assert stats.n_collected_episodes == 6
    for env, length in enumerate(LENGTHS):  # episodes sit at rows [k*(L+1), k*(L+1)+L) of env's ring
        expected = mc_reference(np.ones(length), gamma)
        for k in range(3 if backend != "same_step" else 2):
            rows = slice(k * (length + 1), k * (length + 1) + length)
            np.testing.assert_allclose(extras[env, rows], mc_reference(rewards[env, rows], gamma))
            np.testing.assert_allclose(extras[env, rows], expected)
            np.testing.assert_allclose(full[env, rows], expected[0])
    dataset = load_dataset("hooks/mc-v0", root=tmp_path)
    assert len(dataset) >= 6
    for episode in dataset:
        np.testing.assert_allclose(episode.infos["mc_return_to_go"], mc_reference(episode.rewards, gamma))
        np.testing.assert_allclose(episode.infos["full_episode_mc_return"], sum(0.5**k for k in range(len(episode.rewards))))
        if backend == "record_infos":
            np.testing.assert_array_equal(episode.infos["t"], np.arange(len(episode.rewards) + 1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_hook_replaces_what_is_recorded_and_stored(backend: str, tmp_path: Path) -> None:
    seen: list[np.ndarray] = []

    def hook(rollout: StepRollout) -> None:
        seen.append(rollout.env_ids.copy())
        rollout.rew = 10.0 * rollout.obs_next[:, 0]  # the step count within the episode, times 10
        rollout.obs_next = rollout.obs_next + 100.0

    probe = DummyVectorEnv([lambda: CountingEnv(3)])
    store = EpisodeStore.create("hooks/step-v0", probe.single_observation_space, probe.single_action_space, root=tmp_path)
    probe.close()
    with make(backend, store=store, on_step_hook=hook) as collector:
        stats = collector.collect(n_episode=4, random=True, reset_before_collect=True)
        pending = collector.pending_transitions
    store.close()
    assert sum(len(ids) for ids in seen) == stats.n_collected_steps + pending  # every transition, once
    # returns in CollectStats are the hook's rewards too: 10 * (1 + ... + L)
    assert sorted(stats.returns.tolist()) == sorted(10.0 * length * (length + 1) / 2 for length in LENGTHS for _ in range(2))
    dataset = load_dataset("hooks/step-v0", root=tmp_path)
    assert len(dataset) >= 4
    for episode in dataset:
        steps = np.arange(1, len(episode.rewards) + 1)
        np.testing.assert_array_equal(episode.rewards, 10.0 * steps)
        np.testing.assert_array_equal(episode.observations[:, 0], np.r_[0.0, 100.0 + steps])  # reset obs not a step
        if backend == "record_infos":  # recorded infos and hook columns side by side
            np.testing.assert_array_equal(episode.infos["t"], np.r_[0, steps])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("request_kind", ["n_step", "n_episode"])
def test_counts_stay_exact_with_both_hooks_on(backend: str, request_kind: str) -> None:
    steps_seen = [0]
    episodes_seen = [0]

    def step_hook(rollout: StepRollout) -> None:
        steps_seen[0] += len(rollout.env_ids)

    def episode_hook(episode: Any) -> dict[str, np.ndarray]:
        episodes_seen[0] += 1
        return {"t": np.arange(len(episode.rewards))}

    with make(backend, on_step_hook=step_hook, on_episode_done_hook=episode_hook) as collector:
        collector.reset()
        total_steps = total_episodes = 0
        for target in (13, 7, 1):
            if request_kind == "n_step":
                stats = collector.collect(n_step=target, random=True)
                assert stats.n_collected_steps == target
            else:
                stats = collector.collect(n_episode=target, random=True)
                assert stats.n_collected_episodes == target
            total_steps += stats.n_collected_steps
            total_episodes += stats.n_collected_episodes
        assert steps_seen[0] == total_steps + collector.pending_transitions
        held_ends = int(collector._ledger.episode_ends.sum())
        assert episodes_seen[0] == total_episodes + held_ends


def test_a_hook_set_later_switches_block_staging_off_and_unset_back_on() -> None:
    rows = [0]

    def hook(rollout: StepRollout) -> None:
        rows[0] += len(rollout.env_ids)

    with make("blocks") as collector:
        collector.collect(n_step=20, random=True, reset_before_collect=True)
        collector.set_on_step_hook(hook)
        assert collector.get_on_step_hook() is hook
        before = collector.pending_transitions
        stats = collector.collect(n_step=20, random=True)
        assert rows[0] == stats.n_collected_steps - before + collector.pending_transitions  # each new transition
        collector.set_on_step_hook(None)
        seen = rows[0]
        assert collector.collect(n_step=20, random=True).n_collected_steps == 20
        assert rows[0] == seen


@pytest.mark.parametrize("which", ["episode", "step"])
def test_a_hook_that_raises_stops_the_call_and_every_episode_before_it_is_stored(which: str, tmp_path: Path) -> None:
    class Boom(Exception):
        pass

    calls = [0]

    def episode_hook(episode: Any) -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise Boom("third episode")

    def step_hook(rollout: StepRollout) -> None:
        calls[0] += 1
        if calls[0] == 8:  # a step of the third episode (3 steps each)
            raise Boom("eighth step")

    envs = DummyVectorEnv([lambda: CountingEnv(3)])
    store = EpisodeStore.create("hooks/boom-v0", envs.single_observation_space, envs.single_action_space, root=tmp_path)
    hooks: dict[str, Any] = {"on_episode_done_hook": episode_hook} if which == "episode" else {"on_step_hook": step_hook}
    collector = Collector(None, envs, store=store, seed=0, **hooks)
    with pytest.raises(Boom):
        collector.collect(n_episode=5, random=True, reset_before_collect=True)
    store.flush()
    assert len(load_dataset("hooks/boom-v0", root=tmp_path)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnfinishedEpisodesWarning)  # the step case leaves one running
        collector.close()
    store.close()


def test_an_episode_hook_returning_the_wrong_length_is_refused_naming_the_key() -> None:
    def hook(episode: Any) -> dict[str, np.ndarray]:
        return {"good": np.zeros(len(episode.rewards)), "short": np.zeros(len(episode.rewards) - 1)}

    short = pytest.raises(HookOutputError, match=r"'short' with shape \(2,\) .* of 3 steps")
    with make("dummy", on_episode_done_hook=hook) as collector, short:
        collector.collect(n_episode=1, random=True, reset_before_collect=True)
    not_a_dict = pytest.raises(HookOutputError, match="returned list")
    with make("dummy", on_episode_done_hook=lambda episode: [1, 2, 3]) as collector, not_a_dict:
        collector.collect(n_episode=1, random=True, reset_before_collect=True)
    wrong_rew = pytest.raises(HookOutputError, match=r"rew of shape \(5,\)")
    with make("dummy", on_step_hook=lambda r: setattr(r, "rew", np.zeros(5))) as collector, wrong_rew:
        collector.collect(n_step=2, random=True, reset_before_collect=True)


def test_a_long_episode_keeps_its_last_steps_extras_in_a_small_ring() -> None:
    """An episode longer than its ring: the ring keeps the hook's values of the steps it still holds."""
    envs = DummyVectorEnv([lambda: CountingEnv(10)])
    buffer = VectorRingBuffer(1, 4, envs.single_observation_space, envs.single_action_space)
    hook = EpisodeRolloutHookMCReturn(1.0)
    with Collector(None, envs, buffer, seed=0, on_episode_done_hook=hook) as collector:
        collector.collect(n_episode=1, random=True, reset_before_collect=True)
        column = collector.buffer.extras["mc_return_to_go"]
    # ring of 4 rows: the final observation (row 10 % 4 = 2) and the last 3 steps (rows 3, 0, 1) with to-go 3, 2, 1
    assert column[[3, 0, 1]].tolist() == [3.0, 2.0, 1.0]


def test_sampled_batches_carry_the_hooks_per_step_values() -> None:
    """ring.sample returns each episode-done hook column at the sampled rows: a CountingEnv(5) step at
    observation t has t + 1 steps to go, so its undiscounted return to go is 5 - t."""
    envs = DummyVectorEnv([lambda: CountingEnv(5)] * 2)
    with Collector(None, envs, seed=0, on_episode_done_hook=EpisodeRolloutHookMCReturn(1.0)) as collector:
        collector.collect(n_episode=4, random=True, reset_before_collect=True)
        batch = collector.buffer.sample(64)
    to_go = batch["extras"]["mc_return_to_go"]
    assert to_go.shape == (64,)
    np.testing.assert_array_equal(to_go, 5 - batch["observations"][:, 0])


def test_names_and_monte_carlo_returns_match_tianshou() -> None:
    """The real tianshou 2.0.1: the hook/counter/reset method names a Tianshou user calls exist here too, and
    EpisodeRolloutHookMCReturn gives Tianshou's Monte-Carlo returns for the same rewards."""
    ts_collector = pytest.importorskip("tianshou.data.collector")
    from tianshou.algorithm.algorithm_base import episode_mc_return_to_go

    for name in ("set_on_step_hook", "set_on_episode_done_hook", "get_on_step_hook", "get_on_episode_done_hook",
                 "reset", "reset_env", "reset_buffer", "reset_stat", "collect"):
        assert hasattr(ts_collector.Collector, name) and hasattr(Collector, name), name
    hook = EpisodeRolloutHookMCReturn(0.9)
    assert hook.MC_RETURN_TO_GO_KEY == ts_collector.EpisodeRolloutHookMCReturn.MC_RETURN_TO_GO_KEY
    rewards = np.random.default_rng(0).normal(size=37)
    envs = DummyVectorEnv([lambda: CountingEnv(3)])
    episode = VectorRingBuffer(1, 64, envs.single_observation_space, envs.single_action_space)
    envs.close()
    episode.start_episodes(np.array([0]), np.zeros((1, 1), np.float32))
    for r in rewards:
        episode.add(np.array([0]), np.array([0]), np.array([r]), np.array([False]), np.array([False]),
                    np.zeros((1, 1), np.float32))
    ours = hook(episode.episode(0))
    np.testing.assert_allclose(ours["mc_return_to_go"], episode_mc_return_to_go(rewards, 0.9))
    np.testing.assert_allclose(ours["full_episode_mc_return"], episode_mc_return_to_go(rewards, 0.9)[0])
