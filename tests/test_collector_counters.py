"""Collector counters and resets with Tianshou's names: collect_step / collect_episode / collect_time,
reset_stat, reset_env, reset_buffer, reset(reset_buffer=..., reset_stats=...), and
collect(reset_before_collect=True) keeping the buffer as Tianshou 2.0.1 does."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests.envs import CountingEnv
from vcollect import AsyncCollector, Collector, DummyVectorEnv, VectorRingBuffer
from vcollect import stats as stats_module
from vcollect.buffers.ring import ring_columns
from vcollect.stats import CollectStats, EpisodeValues

BACKENDS = ["dummy", "blocks", "async"]


def make(backend: str, length: int = 5, capacity: int = 200) -> Collector:
    fns = [lambda: CountingEnv(length) for _ in range(2)]
    envs: Any = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP) if backend == "blocks" else DummyVectorEnv(fns)
    buffer = VectorRingBuffer(2, capacity, envs.single_observation_space, envs.single_action_space)
    kind: type[Collector] = AsyncCollector if backend == "async" else Collector
    return kind(None, envs, buffer, seed=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_counters_are_the_sums_of_the_collect_stats(backend: str) -> None:
    with make(backend) as collector:
        collector.reset()
        assert (collector.collect_step, collector.collect_episode, collector.collect_time) == (0, 0, 0.0)
        all_stats = [collector.collect(n_step=7, random=True), collector.collect(n_episode=3, random=True),
                     collector.collect(n_step=1, random=True)]
        assert collector.collect_step == sum(s.n_collected_steps for s in all_stats)
        assert collector.collect_episode == sum(s.n_collected_episodes for s in all_stats)
        assert collector.collect_time == pytest.approx(sum(s.collect_time for s in all_stats))
        assert collector.collect_episode >= 3 and collector.collect_step >= 8

        collector.reset(reset_stats=False)  # counters kept
        assert collector.collect_step == sum(s.n_collected_steps for s in all_stats)
        collector.reset_stat()
        assert (collector.collect_step, collector.collect_episode, collector.collect_time) == (0, 0, 0.0)
        collector.collect(n_step=4, random=True)
        collector.reset()  # reset_stats=True by default, as Tianshou's
        assert collector.collect_step == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_before_collect_keeps_the_buffer(backend: str) -> None:
    """Tianshou's collect(reset_before_collect=True) calls reset(reset_buffer=False): a replay loop that resets
    before each collect keeps its data."""
    with make(backend) as collector:
        first = collector.collect(n_episode=4, random=True, reset_before_collect=True)
        held = len(collector.buffer)
        assert held >= first.n_collected_steps == 20  # 4 episodes of 5 steps, in the rings
        rewards_before = ring_columns(collector.buffer).rewards.copy()
        second = collector.collect(n_episode=2, random=True, reset_before_collect=True)
        assert len(collector.buffer) >= held + second.n_collected_steps
        kept = rewards_before != 0
        np.testing.assert_array_equal(ring_columns(collector.buffer).rewards[kept], rewards_before[kept])  # rows not written over
        assert collector.collect_episode == 2  # the counters were reset, as Tianshou's reset does


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_env_keeps_buffer_and_counters_and_reset_buffer_empties_it(backend: str) -> None:
    with make(backend) as collector:
        collector.reset_buffer()  # before any reset: just the buffer
        collector.collect(n_step=10, random=True, reset_before_collect=True)
        held, steps = len(collector.buffer), collector.collect_step
        collector.reset_env()
        assert (len(collector.buffer), collector.collect_step) == (held, steps)
        collector.reset_buffer()
        assert len(collector.buffer) == 0
        assert collector.collect_step == steps  # reset_buffer does not touch the counters
        stats = collector.collect(n_step=10, random=True)  # collecting goes on after it
        assert stats.n_collected_steps == 10
        assert len(collector.buffer) >= 10


def test_reset_buffer_false_keeps_the_buffer_and_true_empties_it() -> None:
    with make("dummy") as collector:
        collector.collect(n_step=10, random=True, reset_before_collect=True)
        collector.reset(reset_buffer=False)
        assert len(collector.buffer) == 10
        collector.reset()
        assert len(collector.buffer) == 0
        with pytest.raises(TypeError, match="first argument of vcollect's reset is the seed"):
            collector.reset(False)  # Tianshou's positional reset_buffer


def cartpole(backend: str) -> Collector:
    fns = [lambda: gym.make("CartPole-v1") for _ in range(3)]
    envs: Any = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP) if backend == "blocks" else DummyVectorEnv(fns)
    kind: type[Collector] = AsyncCollector if backend == "async" else Collector
    return kind(None, envs, seed=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_episode_stats_not_kept_are_summarised_in_bounded_memory(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """collect(keep_episode_stats=False) keeps no per-episode array, only running moments folded in every
    FOLD_EVERY episodes; its summary is numpy's over the episodes the same call keeps by default."""
    monkeypatch.setattr(stats_module, "FOLD_EVERY", 8)
    most_held = [0]
    extend = EpisodeValues.extend

    def spy(self: EpisodeValues, values: Any) -> None:
        extend(self, values)
        if not self.keep:
            most_held[0] = max(most_held[0], self.held)

    monkeypatch.setattr(EpisodeValues, "extend", spy)
    with cartpole(backend) as kept_collector, cartpole(backend) as summarised_collector:
        kept = kept_collector.collect(n_episode=100, random=True, reset_before_collect=True)
        summarised = summarised_collector.collect(n_episode=100, random=True, reset_before_collect=True,
                                                  keep_episode_stats=False)
        assert summarised_collector.collect_episode == 100
    assert kept.returns.size == kept.lens.size == 100 and kept.returns_moments is None
    assert summarised.returns.size == summarised.lens.size == 0  # no array of one value per episode
    assert most_held[0] < 8  # after every report of finished episodes, fewer than FOLD_EVERY held as they are
    assert (summarised.n_collected_episodes, summarised.n_collected_steps) == (100, kept.n_collected_steps)
    assert summarised.returns_moments is not None and summarised.returns_moments.count == 100
    for summary, values in ((summarised.returns_stat, kept.returns), (summarised.lens_stat, kept.lens)):
        assert summary is not None
        assert (summary.mean, summary.std) == pytest.approx((values.mean(), values.std()), rel=1e-12)
        assert (summary.min, summary.max) == (values.min(), values.max())

    merged = CollectStats.merge([kept, summarised])  # a part without arrays: the merge keeps moments only
    both = np.concatenate([kept.returns, kept.returns])
    assert merged.n_collected_episodes == 200 and merged.returns.size == 0
    assert merged.returns_stat is not None
    assert (merged.returns_stat.mean, merged.returns_stat.std) == pytest.approx((both.mean(), both.std()), rel=1e-12)
    assert CollectStats.merge([kept, kept]).returns.size == 200  # arrays everywhere: kept, as before
