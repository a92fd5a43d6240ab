"""AsyncCollector: exact counts with uneven step times in real worker processes, per-env rings and policy
state, async resets, timeouts that lose nothing, worker faults; and the TransitionLedger it counts with."""

from __future__ import annotations

import functools
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.envs import CountingEnv, DyingEnv, FailingEnv, SlowEnv
from tests.replay import assert_replays
from tests.sinks import ListStore, StoredEpisode
from vcollect import Collector, DummyVectorEnv, SubprocVectorEnv
from vcollect.async_collector import AsyncCollector
from vcollect.collecting.ledger import TransitionLedger
from vcollect.errors import CollectorStateError, EnvWorkerError


class CountingSubproc(SubprocVectorEnv):
    """SubprocVectorEnv that counts the steps dispatched to it (to check that none is dispatched in excess)."""

    sent = 0

    def send(self, actions: Any, env_ids: Any = None) -> None:
        super().send(actions, env_ids)
        self.sent += self.num_envs if env_ids is None else len(env_ids)


def alternating_policy(obs: np.ndarray, state: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Action = (steps since the env's reset + 1) % 2, kept in a per-env state row."""
    count = np.ones((len(obs), 1), np.int64) if state is None else state + 1
    return (count[:, 0] % 2).astype(np.int64), count


class Alternating:
    """alternating_policy with reset_state: a restarted env's count starts again at 0."""

    __call__ = staticmethod(alternating_policy)

    @staticmethod
    def reset_state(state: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
        state = state.copy()
        state[env_ids] = 0
        return state


def replay(episode: StoredEpisode) -> None:
    """Replay a stored CartPole episode from its seed and actions in a fresh env; it must match exactly."""
    assert_replays(gym.make("CartPole-v1"), episode)
    assert episode.terminations[-1] or episode.truncations[-1]
    assert not (episode.terminations[:-1] | episode.truncations[:-1]).any()


def slow_fns(n: int) -> list:
    return [functools.partial(SlowEnv, fast_time=0.0002, slow_time=0.003, slow_prob=0.2)] * n


# --------------------------------------------------------------------------------------------------
# real processes, uneven step times


def test_exact_counts_never_over_dispatch_and_episodes_replay() -> None:
    envs = CountingSubproc(slow_fns(4), num_workers=4)
    store = ListStore()
    requested = [1, 7, 50, 333]
    with AsyncCollector(Alternating(), envs, store=store, seed=0) as collector:
        collector.reset()
        stats = [collector.collect(n_step=n) for n in requested]
        assert [s.n_collected_steps for s in stats] == requested
        # every dispatched step was received and counted in its own call: none in flight, none in excess
        assert envs.sent == sum(requested) == len(collector.buffer)
        assert collector.pending_transitions == 0
        by_episode = collector.collect(n_episode=10)
        assert by_episode.n_collected_episodes == 10
        assert collector.pending_transitions == 0
        assert envs.sent == sum(requested) + by_episode.n_collected_steps == len(collector.buffer)
    assert len(store.episodes) == sum(s.n_collected_episodes for s in [*stats, by_episode])
    last_call = store.episodes[-10:]
    per_env = np.bincount([e.env_id for e in last_call], minlength=4)
    assert per_env.min() >= 2 and per_env.max() <= 3  # quota: 10 // 4 or one more
    assert sorted(by_episode.lens.tolist()) == sorted(len(e.actions) for e in last_call)
    for episode in store.episodes:
        replay(episode)  # contiguous and the env's own trajectory, however the envs interleaved
        expected = (np.arange(1, len(episode.actions) + 1) % 2).astype(np.int64)
        np.testing.assert_array_equal(episode.actions, expected)  # per-env policy state


def test_wait_num_and_random_actions_keep_counts_exact() -> None:
    envs = SubprocVectorEnv(slow_fns(4), num_workers=4)
    store = ListStore()
    with AsyncCollector(None, envs, store=store, seed=1, wait_num=3) as collector:
        assert collector.collect(n_step=120, random=True, reset_before_collect=True).n_collected_steps == 120
        assert collector.collect(n_episode=5, random=True).n_collected_episodes == 5
    for episode in store.episodes:
        replay(episode)


@pytest.mark.timing
def test_async_beats_sync_on_heavy_tailed_step_times() -> None:
    """The point of the AsyncCollector: one slow step holds up only its own env (about 2-3x here)."""
    fns = [functools.partial(SlowEnv, fast_time=0.0005, slow_time=0.02, slow_prob=0.1)] * 4
    speeds = {}
    for cls in (Collector, AsyncCollector):
        with cls(None, SubprocVectorEnv(fns, num_workers=4), seed=0) as collector:
            speeds[cls.__name__] = collector.collect(n_step=400, random=True, reset_before_collect=True).collect_speed
    assert speeds["AsyncCollector"] > 1.3 * speeds["Collector"], speeds


@pytest.mark.timing
def test_slow_reset_does_not_block_other_envs() -> None:
    fns = [functools.partial(SlowEnv, slow_prob=0.0, reset_time=1.0)] + [functools.partial(SlowEnv, slow_prob=0.0)] * 3
    envs = SubprocVectorEnv(fns, num_workers=4)
    with AsyncCollector(None, envs, seed=0) as collector:
        collector.reset()  # env 0 takes 1 s here, the others no time
        stats = collector.collect(n_step=600, random=True)
        # env 0 finished an episode (random CartPole episodes are far shorter than 600 / 4 steps) and
        # its 1 s reset is still running: the 600 steps came from the others meanwhile.
        assert stats.n_collected_steps == 600
        assert 0 in envs.in_flight.tolist()
        assert collector.buffer.episode_lengths[0] < 150 and len(collector.buffer) == 600


@pytest.mark.timing
def test_timeout_names_envs_in_flight_and_loses_nothing() -> None:
    fns = [functools.partial(SlowEnv, fast_time=0.001, slow_prob=0.0), functools.partial(SlowEnv, fast_time=0.8, slow_prob=0.0)]
    envs = CountingSubproc(fns, num_workers=2)
    with AsyncCollector(None, envs, seed=0, timeout=0.3) as collector:
        collector.reset()
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"in flight: \[1\]") as info:
            collector.collect(n_step=40, random=True)
        assert time.monotonic() - started < 0.8  # it did not wait for env 1's step
        assert "collect() again" in str(info.value)
        assert envs.sent == 40  # env 0 took the 39 steps the slow env 1 could not
        assert collector.pending_transitions == 39
        collector.timeout = None
        stats = collector.collect(n_step=40, random=True)
        # the second call finishes the first one's work: nothing new was dispatched, nothing was lost
        assert stats.n_collected_steps == 40 and envs.sent == 40 and len(collector.buffer) == 40
        assert collector.collect(n_step=5, random=True).n_collected_steps == 5
        assert envs.sent == 45


@pytest.mark.timing
def test_reset_finishes_steps_in_flight_and_reports_them_later() -> None:
    fns = [functools.partial(SlowEnv, fast_time=0.001, slow_prob=0.0), functools.partial(SlowEnv, fast_time=0.5, slow_prob=0.0)]
    envs = CountingSubproc(fns, num_workers=2)
    with AsyncCollector(None, envs, seed=0, timeout=0.2) as collector:
        collector.reset()
        with pytest.raises(TimeoutError):
            collector.collect(n_step=20, random=True)
        collector.timeout = None
        collector.reset()  # waits for env 1's step; the 20 transitions are still owed to the caller
        assert envs.in_flight.size == 0 and collector.pending_transitions == 20
        stats = collector.collect(n_step=30, random=True)
        assert stats.n_collected_steps == 30 and envs.sent == 30


def test_worker_death_raises_env_worker_error_within_seconds() -> None:
    fns = [CountingEnv, functools.partial(DyingEnv, die_step=4), CountingEnv]
    with AsyncCollector(None, SubprocVectorEnv(fns, num_workers=3), seed=0) as collector:
        collector.reset()
        started = time.monotonic()
        with pytest.raises(EnvWorkerError) as info:
            collector.collect(n_step=1000, random=True)
        assert time.monotonic() - started < 5
        assert info.value.env_id == 1


def test_env_raising_mid_flight_names_env_and_keeps_traceback() -> None:
    fns = [CountingEnv, functools.partial(FailingEnv, fail_step=3)]
    with AsyncCollector(None, SubprocVectorEnv(fns, num_workers=2), seed=0) as collector:
        collector.reset()
        with pytest.raises(EnvWorkerError) as info:
            collector.collect(n_step=100, random=True)
        assert info.value.env_id == 1
        assert "FailingEnv exploded at step 3" in info.value.traceback_text


# --------------------------------------------------------------------------------------------------
# in-process: bad input and the count arithmetic


def counting_envs(lengths: list[int]) -> DummyVectorEnv:
    return DummyVectorEnv([functools.partial(CountingEnv, length) for length in lengths])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="wait_num"):
        AsyncCollector(None, counting_envs([3, 3]), wait_num=3)
    with pytest.raises(ValueError, match="wait_num"):
        AsyncCollector(None, counting_envs([3, 3]), wait_num=0)
    with pytest.raises(ValueError, match="timeout"):
        AsyncCollector(None, counting_envs([3, 3]), timeout=0)
    with AsyncCollector(None, counting_envs([3, 3])) as collector:
        with pytest.raises(CollectorStateError, match="before any reset"):
            collector.collect(n_step=3, random=True)
        with pytest.raises(ValueError, match="exactly one"):
            collector.collect(random=True)
    with pytest.raises(CollectorStateError, match="closed"):
        collector.collect(n_step=3, random=True, reset_before_collect=True)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    calls=st.lists(st.tuples(st.sampled_from(["step", "episode"]), st.integers(1, 25)), min_size=1, max_size=6),
    wait_num=st.integers(1, 4),
)
def test_counts_match_a_plain_model(lengths: list[int], calls: list[tuple[str, int]], wait_num: int) -> None:
    """Any sequence of calls reports exactly what was asked; per-env quotas; every stored episode whole."""
    store = ListStore()
    with AsyncCollector(None, counting_envs(lengths), store=store, seed=0, wait_num=min(wait_num, len(lengths))) as c:
        c.reset()
        reported_steps = reported_episodes = 0
        for kind, n in calls:
            if kind == "step":
                stats = c.collect(n_step=n, random=True)
                assert stats.n_collected_steps == n
            else:
                before = len(store.episodes)
                stats = c.collect(n_episode=n, random=True)
                assert stats.n_collected_episodes == n
                per_env = np.bincount([e.env_id for e in store.episodes[before:]], minlength=len(lengths))
                assert per_env.max() <= n // len(lengths) + 1
            assert all(length in lengths for length in stats.lens.tolist())  # whole episodes
            reported_steps += stats.n_collected_steps
            reported_episodes += stats.n_collected_episodes
        assert reported_steps + c.pending_transitions == len(c.buffer)
        assert reported_episodes == len(store.episodes)
    for episode in store.episodes:
        length = lengths[episode.env_id]
        np.testing.assert_array_equal(episode.observations[:, 0], np.arange(length + 1))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_ledger_matches_a_list_reference(data: st.DataObject) -> None:
    num_envs = data.draw(st.integers(1, 4))
    ledger = TransitionLedger(num_envs)
    model: list[tuple[int, bool, float]] = []  # (env id, ended, return) oldest first
    for _ in range(data.draw(st.integers(1, 12))):
        op = data.draw(st.sampled_from(["push", "push", "rows", "rows", "steps", "episodes"]))
        if op == "rows":  # push_rows: k steps, each of every env id but the skipped ones, in env id order
            k = data.draw(st.integers(1, 3))
            stepped = np.ones((k, num_envs), bool)
            ended = np.zeros((k, num_envs), bool)
            rets: list[float] = []
            for j in range(k):
                for e in range(num_envs):
                    stepped[j, e] = data.draw(st.booleans())
                    ended[j, e] = stepped[j, e] and data.draw(st.booleans())
                    ret = float(data.draw(st.integers(0, 99))) if ended[j, e] else 0.0
                    rets += [ret] if ended[j, e] else []
                    model += [(e, bool(ended[j, e]), ret)] if stepped[j, e] else []
            one_step = k == 1 and data.draw(st.booleans())  # a (num_envs,) step rather than a (1, num_envs) block
            ledger.push_rows(
                None if stepped.all() and data.draw(st.booleans()) else (stepped[0] if one_step else stepped),
                ended[0] if one_step else ended,
                np.asarray(rets, np.float64),
                np.asarray(rets, np.int64),
            )
        elif op == "push":
            ids = data.draw(st.permutations(range(num_envs)))[: data.draw(st.integers(0, num_envs))]
            ended = [data.draw(st.booleans()) for _ in ids]
            rets = [float(data.draw(st.integers(0, 99))) for e in ended if e]
            it = iter(rets)
            model += [(i, e, next(it) if e else 0.0) for i, e in zip(ids, ended)]
            ledger.push(np.asarray(ids, np.int64), np.asarray(ended, bool), rets, [int(r) for r in rets])
        elif op == "steps":
            n = data.draw(st.integers(0, 10))
            out_r: list[float] = []
            out_l: list[int] = []
            assert ledger.take_steps(n, out_r, out_l) == min(n, len(model))
            taken, model = model[:n], model[n:]
            assert out_r == [r for _, e, r in taken if e] and out_l == [int(r) for r in out_r]
        else:
            quota = np.asarray([data.draw(st.integers(0, 2)) for _ in range(num_envs)], np.int64)
            left = quota.copy()
            out_r, out_l = [], []
            steps, episodes = ledger.take_episodes(left, out_r, out_l)
            owed, kept, want_r = quota.copy(), [], []
            for env_id, ended, ret in model:
                if owed[env_id] > 0:
                    if ended:
                        owed[env_id] -= 1
                        want_r.append(ret)
                else:
                    kept.append((env_id, ended, ret))
            assert steps == len(model) - len(kept) and episodes == len(want_r)
            assert sorted(out_r) == sorted(want_r) and np.array_equal(left, owed)
            model = kept
        assert len(ledger) == len(model)
        if data.draw(st.booleans()):  # read only sometimes: push_rows() steps are counted in when read
            ends = np.bincount([i for i, e, _ in model if e], minlength=num_envs)
            assert np.array_equal(ledger.episode_ends, ends)
    ends = np.bincount([i for i, e, _ in model if e], minlength=num_envs)
    assert np.array_equal(ledger.episode_ends, ends)


@pytest.mark.parametrize("backend", ["subproc", "gymnasium"])
def test_async_collector_seeds_only_first_resets_when_asked(backend: str) -> None:
    """seed_every_reset=False reaches AsyncCollector's own reset path too (subprocess workers, and a
    gymnasium SyncVectorEnv reset through reset_mask): each env's first episode has a seed that replays
    it, every later one None."""
    if backend == "subproc":
        envs = SubprocVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2)
    else:
        from vcollect import make_vector

        envs = make_vector("CartPole-v1", 4, backend="gymnasium", vectorization_mode="sync")
    store = ListStore()
    with AsyncCollector(None, envs, store=store, seed=3, seed_every_reset=False) as collector:
        stats = collector.collect(n_episode=12, random=True, reset_before_collect=True)
    assert stats.n_collected_episodes == 12
    for env_id in range(4):
        episodes = [e for e in store.episodes if e.env_id == env_id]
        assert episodes[0].seed is not None and all(e.seed is None for e in episodes[1:])
        assert_replays(gym.make("CartPole-v1"), episodes[0])
