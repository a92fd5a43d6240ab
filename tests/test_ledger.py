"""The TransitionLedger's open calls: transitions a call is certain to report are reported as they come
(exactly what one take at the end reports), so that one long collect call holds a bounded number of them,
on the all-env, block and async loops."""

from __future__ import annotations

import functools
import tracemalloc
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.envs import CountingEnv, FailingEnv
from tests.sinks import ListStore
from vcollect import Collector, make_vector
from vcollect.async_collector import AsyncCollector
from vcollect.collecting.ledger import TransitionLedger
from vcollect.policies import RandomPolicy

NEVER = 1 << 40  # a ledger that never reports early: the reference


def _draw_push(data: st.DataObject, num_envs: int, ledgers: list[TransitionLedger]) -> None:
    """One push() or push_rows() of random transitions, made to every ledger."""
    if data.draw(st.booleans()):  # push_rows: k steps, each of every env id but the skipped ones
        k = data.draw(st.integers(1, 3))
        stepped = np.asarray(data.draw(st.lists(st.booleans(), min_size=k * num_envs, max_size=k * num_envs)))
        stepped = stepped.reshape(k, num_envs)
        ended = stepped & np.asarray(data.draw(st.lists(st.booleans(), min_size=k * num_envs, max_size=k * num_envs))).reshape(k, num_envs)
        rets = np.asarray(data.draw(st.lists(st.integers(0, 99), min_size=int(ended.sum()), max_size=int(ended.sum()))), np.float64)
        mask = None if stepped.all() and data.draw(st.booleans()) else stepped
        for ledger in ledgers:  # each keeps the arrays: give each its own
            ledger.push_rows(None if mask is None else mask.copy(), ended.copy(), rets.copy(), rets.astype(np.int64))
    else:
        ids = np.asarray(data.draw(st.permutations(range(num_envs)))[: data.draw(st.integers(0, num_envs))], np.int64)
        ended = np.asarray([data.draw(st.booleans()) for _ in ids], bool)
        rets = [float(data.draw(st.integers(0, 99))) for _ in range(int(ended.sum()))]
        for ledger in ledgers:
            ledger.push(ids.copy(), ended.copy(), list(rets), [int(r) for r in rets])


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_an_open_call_reports_what_one_take_at_its_end_reports(data: st.DataObject) -> None:
    num_envs = data.draw(st.integers(1, 4))
    early = TransitionLedger(num_envs, settle_at=data.draw(st.integers(0, 6)))
    reference = TransitionLedger(num_envs, settle_at=NEVER)
    for _ in range(data.draw(st.integers(1, 4))):  # calls, each after some transitions carried into it
        for _ in range(data.draw(st.integers(0, 3))):
            _draw_push(data, num_envs, [early, reference])
        by_steps = data.draw(st.booleans())
        quota = np.asarray([data.draw(st.integers(0, 3)) for _ in range(num_envs)], np.int64)
        n_step = data.draw(st.integers(1, 30))
        out: list[tuple[list[float], list[int]]] = [([], []), ([], [])]
        for ledger, (rets, lens) in zip([early, reference], out):
            if by_steps:
                ledger.open_call(rets, lens, n_step=n_step)
            else:
                ledger.open_call(rets, lens, quota=quota)
        for _ in range(data.draw(st.integers(0, 12))):
            _draw_push(data, num_envs, [early, reference])
            assert len(early) == len(reference)
            if data.draw(st.booleans()):
                assert np.array_equal(early.episode_ends, reference.episode_ends)
        if data.draw(st.integers(0, 4)) == 0:  # the call fails: nothing taken
            steps, episodes = early.close_call()
            assert reference.close_call() == (0, 0)
            assert len(early) + steps == len(reference) and early.held == len(early)
            assert len(out[0][0]) == episodes and not out[1][0]
            if by_steps:  # what it reported early is the oldest transitions: the reference's first ones
                assert reference.take_steps(steps, [], []) == steps
                assert len(early) == len(reference)
                assert np.array_equal(early.episode_ends, reference.episode_ends)
            else:
                assert int(reference.episode_ends.sum()) == int(early.episode_ends.sum()) + episodes
                return
            continue
        left = [quota.copy(), quota.copy()]
        taken = []
        for ledger, (rets, lens), q in zip([early, reference], out, left):
            taken.append(ledger.take_steps(n_step, rets, lens) if by_steps else ledger.take_episodes(q, rets, lens))
            assert ledger.close_call() == (0, 0)
        assert taken[0] == taken[1] and out[0] == out[1] and np.array_equal(left[0], left[1])
        assert len(early) == len(reference) == early.held
        assert np.array_equal(early.episode_ends, reference.episode_ends)


def test_open_call_takes_one_request() -> None:
    ledger = TransitionLedger(2)
    with pytest.raises(ValueError, match="exactly one of n_step or quota"):
        ledger.open_call([], [], n_step=3, quota=np.ones(2, np.int64))
    with pytest.raises(ValueError, match="exactly one of n_step or quota"):
        ledger.open_call([], [])


def _entry_point_collector() -> Collector:
    envs = gym.make_vec("CartPole-v1", 64, vectorization_mode="vector_entry_point")
    return Collector(RandomPolicy(envs.single_action_space, seed=0), envs, seed=0)


def _largest_held(collector: Collector, collect: Any) -> int:
    """Run ``collect()`` and return the most transitions its ledger held one by one after any push."""
    ledger = collector.context.ledger
    largest = [ledger.held]
    push, push_rows = ledger.push, ledger.push_rows

    def watched_push(*args: Any) -> None:
        push(*args)
        largest[0] = max(largest[0], ledger.held)

    def watched_push_rows(*args: Any) -> None:
        push_rows(*args)
        largest[0] = max(largest[0], ledger.held)

    ledger.push, ledger.push_rows = watched_push, watched_push_rows  # type: ignore[method-assign]
    try:
        collect()
    finally:
        del ledger.push, ledger.push_rows
    return largest[0]


@pytest.mark.parametrize("stage_blocks", [True, False])
def test_a_long_call_on_an_all_env_backend_holds_a_bounded_ledger(stage_blocks: bool) -> None:
    envs = gym.make_vec("CartPole-v1", 16, vectorization_mode="vector_entry_point")
    with Collector(None, envs, seed=0, stage_blocks=stage_blocks) as collector:
        collector.reset()
        held = []
        for n in (12_000, 36_000):  # both far beyond the ledger's threshold (4,096 transitions)
            def call(n: int = n) -> None:
                stats = collector.collect(n_step=n, random=True, keep_episode_stats=False)
                assert stats.n_collected_steps == n
            held.append(_largest_held(collector, call))
        episodes = collector.collect(n_episode=1_000, random=True, keep_episode_stats=False)
        assert episodes.n_collected_episodes == 1_000
    ledger = collector.context.ledger
    assert held[1] <= ledger.settle_at + 64 * 16, held  # a block's worth beyond the threshold, not 60,000
    assert held[1] < 2 * held[0] + 1, held


def test_a_long_call_on_the_vector_entry_point_keeps_memory_flat() -> None:
    """tracemalloc's peak over collect(n_step) with keep_episode_stats=False: ten times the steps, not
    ten times the memory (the rings are allocated before)."""
    with _entry_point_collector() as collector:
        collector.reset()
        collector.collect(n_step=10_000, random=True)
        peaks = []
        for n in (25_000, 250_000):
            tracemalloc.start()
            try:
                stats = collector.collect(n_step=n, random=True, keep_episode_stats=False)
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            assert stats.n_collected_steps == n and stats.returns_moments is not None
            assert stats.returns_moments.count == stats.n_collected_episodes > 0
    assert peaks[1] < 2 * peaks[0], peaks


def test_a_long_async_call_holds_a_bounded_ledger() -> None:
    with AsyncCollector(None, make_vector("CartPole-v1", 8, backend="dummy"), seed=0) as collector:
        collector.reset()
        held = []
        for n in (8_000, 24_000):  # both far beyond the ledger's threshold (4,096 transitions)
            def call(n: int = n) -> None:
                assert collector.collect(n_step=n, random=True, keep_episode_stats=False).n_collected_steps == n
            held.append(_largest_held(collector, call))
        def episodes() -> None:
            assert collector.collect(n_episode=1_000, random=True, keep_episode_stats=False).n_collected_episodes == 1_000
        held.append(_largest_held(collector, episodes))
        assert collector.pending_transitions == 0
    settle_at = collector.context.ledger.settle_at
    assert max(held) <= settle_at + 8, held
    # what the ledger holds does not grow with the call: a call three times longer, or one counted in
    # episodes (about 22,000 steps), holds what the first held (one push more at most); without early
    # reporting each call would hold all of its transitions
    assert held[1] <= held[0] + 8 and held[2] <= held[0] + 8, held


@pytest.mark.parametrize("stage_blocks", [True, False])
def test_long_calls_report_every_stored_episode_once_in_order(stage_blocks: bool) -> None:
    """Calls far beyond the ledger's threshold, by steps and by episodes: the episodes reported, call after
    call and then drained, are the stored ones, each once; steps calls report them in the order they ended."""
    lengths = [3, 5, 7, 11, 13, 17, 19, 23]
    fns = [functools.partial(CountingEnv, n) for n in lengths]
    store = ListStore()
    reported: list[int] = []
    with Collector(None, SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP), store=store, seed=0,
                   stage_blocks=stage_blocks) as collector:
        collector.reset()
        assert 2 * collector.context.ledger.settle_at < 20_001
        for kind, n in [("n_step", 20_001), ("n_step", 9_000), ("n_episode", 1_000), ("n_step", 17), ("n_episode", 3)]:
            stats = collector.collect(**{kind: n}, random=True)
            assert (stats.n_collected_steps if kind == "n_step" else stats.n_collected_episodes) == n
            reported += stats.lens.tolist()
            if kind == "n_step" and n > 17:  # FIFO so far: the oldest stored episodes, in order
                assert reported == [len(e.rewards) for e in store.episodes[: len(reported)]]
        if collector.pending_transitions:
            reported += collector.collect(n_step=collector.pending_transitions, random=True).lens.tolist()
        assert collector.pending_transitions == 0
    assert sorted(reported) == sorted(len(e.rewards) for e in store.episodes)


def test_a_call_that_fails_after_reporting_early_counts_what_it_reported() -> None:
    """The transitions a failing call had reported early are counted in collect_step/collect_episode (and
    named on the error); what it still held is reported by later calls: nothing counted twice or lost."""
    fns = [functools.partial(CountingEnv, 5)] * 7 + [functools.partial(FailingEnv, fail_step=2_000, episode_length=10_000)]
    store = ListStore()
    with Collector(None, SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP), store=store, seed=0) as collector:
        collector.reset()
        with pytest.raises(Exception, match="FailingEnv exploded") as info:
            collector.collect(n_step=100_000, random=True)
        notes = "\n".join(getattr(info.value, "__notes__", []))
        counted, episodes = collector.collect_step, collector.collect_episode
        assert counted > 0 and episodes > 0
        if notes:
            assert f"counted {counted} steps and {episodes} episodes" in notes
        ledger = collector.context.ledger
        stored_steps = sum(len(e.rewards) for e in store.episodes)
        running = collector.buffer.unfinished()
        recorded = stored_steps + int(collector.buffer.episode_lengths[running].sum())
        assert counted + collector.pending_transitions == recorded
        assert collector.buffer.episode_lengths[7] == 1_999 and counted > ledger.settle_at
        assert episodes + int(ledger.episode_ends.sum()) == len(store.episodes)
