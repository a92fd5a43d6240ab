"""Slices (windows of consecutive steps of one episode) from rings and datasets, against a brute-force
reference that lists every window of every episode held: contents, masks, timesteps, returns-to-go, frame
stacks, wrap-around rings, abandoned and running episodes, both ring kinds, datasets with and without
frame_stack and Zstandard, uniform and prioritized draws, and the bad inputs."""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.array_utils import byte_bounds

import vcollect
from vcollect.buffers.prioritized import PrioritizedVectorRingBuffer
from vcollect.buffers.ring import RingWriter, VectorRingBuffer, ring_columns
from vcollect.buffers.ring_slices import EpisodeTable
from vcollect.errors import CorruptShardError, EpisodeIndexError, SliceLengthError
from vcollect.slices import PADS, lowest_start, window_counts
from vcollect.store import EpisodeStore
from vcollect.store.read.dataset_index import DatasetIndex
from vcollect.store.read.reader import StoredDataset
from vcollect.store.read.shards import chunk_reader, shard_reader
from vcollect.store.read.shards.chunk_reader import ChunkTable
from vcollect.store.write.frame_stack import FrameStack

OBS = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
ACT = gym.spaces.Discrete(3)


# ------------------------------------------------------------------------------------------ ring reference
class RingModel:
    """A ring written step by step beside a plain log of every row each env wrote, oldest first."""

    def __init__(self, ring: VectorRingBuffer) -> None:
        self.ring = ring
        self.c = ring.capacity
        self.logs: list[list[dict[str, Any]]] = [[] for _ in range(ring.num_envs)]
        self.serial = 0
        self.counter = 0

    def _obs(self, env: int) -> np.ndarray:
        self.counter += 1
        return np.array([self.counter, env], np.float32)

    def start(self, envs: list[int]) -> None:
        if not envs:
            return
        obs = [self._obs(e) for e in envs]
        self.ring.start_episodes(np.array(envs), np.stack(obs))
        for e, o in zip(envs, obs):
            self.serial += 1
            self.logs[e].append({"episode": self.serial, "obs": o, "step": None})

    def step(self, envs: list[int], rng: np.random.Generator, p_end: float) -> None:
        actions = rng.integers(0, 3, len(envs))
        rewards = rng.integers(-3, 4, len(envs)).astype(np.float64)
        ends = rng.random(len(envs)) < p_end
        term = ends & (rng.random(len(envs)) < 0.5)
        trunc = ends & ~term
        obs = [self._obs(e) for e in envs]
        self.ring.add(np.array(envs), actions, rewards, term, trunc, np.stack(obs))
        for i, e in enumerate(envs):
            row = self.logs[e][-1]
            row["step"] = (int(actions[i]), float(rewards[i]), bool(term[i]), bool(trunc[i]))
            self.logs[e].append({"episode": row["episode"], "obs": obs[i], "step": None})
        self.start([e for e, end in zip(envs, ends) if end])

    def abandon(self, env: int) -> None:
        RingWriter(self.ring).abandon_episodes(np.array([env]))
        self.start([env])

    def episodes(self) -> list[dict[str, Any]]:
        """Every episode's steps the ring holds: runs of held step rows of one episode."""
        out = []
        for env, log in enumerate(self.logs):
            held0 = max(0, len(log) - self.c)
            run: list[int] = []
            for i in range(held0, len(log)):
                is_step = log[i]["step"] is not None
                if is_step and run and log[run[-1]]["episode"] == log[i]["episode"] and run[-1] == i - 1:
                    run.append(i)
                    continue
                if run:
                    out.append(self._episode(env, run))
                run = [i] if is_step else []
            if run:
                out.append(self._episode(env, run))
        return out

    def _episode(self, env: int, run: list[int]) -> dict[str, Any]:
        log = self.logs[env]
        last = log[run[-1]]["step"]
        return {"env": env, "rows": run, "id": env * self.c + run[0] % self.c, "partial": not (last[2] or last[3])}

    def flat(self, env: int, i: int) -> int:
        return env * self.c + i % self.c

    @staticmethod
    def _stack(log: list[dict[str, Any]], at: int, first: int, stack: int) -> np.ndarray:
        """The observation at log row ``at`` stacked ``stack`` deep, clamped to the episode's first row held."""
        obs = [log[max(at - m, first)]["obs"] for m in range(stack - 1, -1, -1)]
        return obs[0] if stack == 1 else np.stack(obs)

    def windows(self, length: int, pad: str, stack: int, gamma: float) -> dict[tuple[int, int], dict[str, Any]]:
        """Every window of every held episode, by (episode id, start), each row as the batch should hold it."""
        out = {}
        for ep in self.episodes():
            log, rows, env = self.logs[ep["env"]], ep["rows"], ep["env"]
            t_len = len(rows)
            rewards = [log[i]["step"][1] for i in rows]
            low = lowest_start(length, pad)
            for s in range(low, low + int(window_counts(np.array([t_len]), length, pad)[0])):
                win: dict[str, list[Any]] = {k: [] for k in ("obs", "next", "act", "rew", "term", "trunc", "idx",
                                                               "mask", "t", "rtg")}
                for j in range(length):
                    t = s + j
                    if not 0 <= t < t_len:
                        for key in win:
                            win[key].append(None)
                        win["mask"][-1] = False
                        continue
                    i = rows[t]
                    act, rew, term, trunc = log[i]["step"]
                    win["obs"].append(self._stack(log, i, rows[0], stack))
                    win["next"].append(self._stack(log, i + 1, rows[0], stack))
                    win["act"].append(act)
                    win["rew"].append(rew)
                    win["term"].append(term)
                    win["trunc"].append(trunc)
                    win["idx"].append(self.flat(env, i))
                    win["mask"].append(True)
                    win["t"].append(t)
                    win["rtg"].append(sum(r * gamma ** (u - t) for u, r in enumerate(rewards) if u >= t))
                win["partial"] = ep["partial"]  # type: ignore[assignment]
                out[(ep["id"], s)] = win
        return out


def check_window(batch: dict[str, Any], b: int, want: dict[str, Any], obs_shape: tuple[int, ...]) -> None:
    mask = np.array(want["mask"])
    assert np.array_equal(batch["mask"][b], mask)
    assert batch["partial"][b] == want["partial"]
    for j, real in enumerate(mask):
        if not real:
            assert not batch["observations"][b, j].any() and not batch["next_observations"][b, j].any()
            assert batch["actions"][b, j] == 0 and batch["rewards"][b, j] == 0 and batch["returns_to_go"][b, j] == 0
            assert batch["timesteps"][b, j] == 0 and not batch["terminations"][b, j]
            assert "indices" not in batch or batch["indices"][b, j] == -1
            continue
        assert batch["observations"][b, j].shape == obs_shape
        # np.array_equal and the tolerance written out: numpy's and pytest's assert helpers cost most of this
        # module's time, called once per row of every window of every batch
        assert np.array_equal(batch["observations"][b, j], want["obs"][j]), (b, j, "observations")
        assert np.array_equal(batch["next_observations"][b, j], want["next"][j]), (b, j, "next_observations")
        assert batch["actions"][b, j] == want["act"][j] and batch["rewards"][b, j] == want["rew"][j]
        assert batch["terminations"][b, j] == want["term"][j] and batch["truncations"][b, j] == want["trunc"][j]
        assert batch["timesteps"][b, j] == want["t"][j]
        rtg, want_rtg = float(batch["returns_to_go"][b, j]), want["rtg"][j]
        assert abs(rtg - want_rtg) <= max(1e-9 * abs(want_rtg), 1e-9), (b, j, rtg, want_rtg)
        if "indices" in want and "indices" in batch:
            assert batch["indices"][b, j] == want["idx"][j]
    if "indices" in batch:
        assert np.array_equal(batch["indices"][b][mask], np.array(want["idx"])[mask])


ops = st.lists(
    st.one_of(st.tuples(st.just("step"), st.integers(1, 7)), st.tuples(st.just("abandon"), st.integers(0, 2))),
    min_size=0, max_size=45,
)


def run_model(ring: VectorRingBuffer, operations: list[tuple[str, int]], seed: int, p_end: float) -> RingModel:
    model = RingModel(ring)
    rng = np.random.default_rng(seed)
    model.start(list(range(ring.num_envs)))
    for kind, arg in operations:
        if kind == "step":
            envs = [e for e in range(ring.num_envs) if arg >> e & 1] or [0]
            model.step(envs, rng, p_end)
        else:
            model.abandon(arg % ring.num_envs)
    return model


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_envs=st.integers(1, 3), capacity=st.integers(3, 11), operations=ops, seed=st.integers(0, 2**16),
       p_end=st.sampled_from([0.0, 0.15, 0.4]), length=st.integers(1, 5), stack=st.sampled_from([1, 2]),
       gamma=st.sampled_from([1.0, 0.9]), prioritized=st.booleans())
def test_ring_slices_match_every_window_held(num_envs: int, capacity: int, operations: list[tuple[str, int]],
                                              seed: int, p_end: float, length: int, stack: int, gamma: float,
                                              prioritized: bool) -> None:
    if prioritized:
        ring: VectorRingBuffer = PrioritizedVectorRingBuffer(num_envs, capacity, OBS, ACT, alpha=0.6, beta=0.4)
    else:
        ring = VectorRingBuffer(num_envs, capacity, OBS, ACT)
    model = run_model(ring, operations, seed, p_end)
    obs_shape = (2,) if stack == 1 else (stack, 2)
    for pad in PADS:
        want = model.windows(length, pad, stack, gamma)
        if not want:
            with pytest.raises(SliceLengthError):
                ring.sample_slices(4, length, pad=pad, seed=seed)
            continue
        batch = ring.sample_slices(30 * len(want) + 10, length, pad=pad, gamma=gamma, stack_num=stack, seed=seed)
        drawn = list(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist()))
        assert set(drawn) == set(want), "every window is drawn, and nothing else"
        for b, key in enumerate(drawn[:40]):
            check_window(batch, b, want[key], obs_shape)
        if prioritized:
            assert batch["weights"].shape == (len(drawn),) and batch["weights"].max() == pytest.approx(1.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_envs=st.integers(1, 3), capacity=st.integers(3, 11), operations=ops, seed=st.integers(0, 2**16),
       length=st.integers(1, 5), stack=st.sampled_from([1, 2, 3]), prioritized=st.booleans())
def test_ring_slices_as_views_equal_copies(num_envs: int, capacity: int, operations: list[tuple[str, int]],
                                           seed: int, length: int, stack: int, prioritized: bool) -> None:
    """``stacks="view"`` on both rings: the batch ``"copy"`` gives, element for element (wrap-around rings,
    abandoned and running episodes, stacks reaching back to an episode's first or oldest held row),
    observations read-only; unpadded, each window's length + stack_num rows gathered once and every stack and
    next observation a view over them; padded, materialised and read-only."""
    if prioritized:
        ring: VectorRingBuffer = PrioritizedVectorRingBuffer(num_envs, capacity, OBS, ACT, alpha=0.6, beta=0.4)
    else:
        ring = VectorRingBuffer(num_envs, capacity, OBS, ACT)
    model = run_model(ring, operations, seed, 0.15)
    for pad in PADS:
        if not model.windows(length, pad, stack, 1.0):
            continue
        copy = ring.sample_slices(20, length, pad=pad, gamma=0.9, stack_num=stack, seed=seed)
        view = ring.sample_slices(20, length, pad=pad, gamma=0.9, stack_num=stack, seed=seed, stacks="view")
        assert list(view) == list(copy)
        for key, value in copy.items():
            if key != "extras":
                np.testing.assert_array_equal(view[key], value, err_msg=key)
        obs, nxt = view["observations"], view["next_observations"]
        assert not obs.flags.writeable and not nxt.flags.writeable
        if view["mask"].all():
            assert np.shares_memory(obs, nxt) == (length + stack > 2)  # rows 0 .. L + k - 2 and 1 .. L + k - 1
            (low, _), (_, high) = byte_bounds(obs), byte_bounds(nxt)
            assert high - low == 20 * (length + stack) * OBS.shape[0] * obs.itemsize
    with pytest.raises(ValueError, match="stacks must be 'copy'"):
        ring.sample_slices(2, 1, pad="both", stacks="views")


@settings(max_examples=25, deadline=None)
@given(capacity=st.integers(4, 12), operations=ops, seed=st.integers(0, 2**16), length=st.integers(1, 4))
def test_ring_slices_by_episode_draw_each_episode(capacity: int, operations: list[tuple[str, int]], seed: int,
                                                  length: int) -> None:
    ring = VectorRingBuffer(2, capacity, OBS, ACT)
    model = run_model(ring, operations, seed, 0.3)
    want = model.windows(length, "end", 1, 1.0)
    if not want:
        return
    batch = ring.sample_slices(40 * len(want), length, pad="end", by="episode", seed=seed)
    drawn = set(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist()))
    assert drawn == set(want)


def test_ring_wraps_and_keeps_episodes_apart() -> None:
    """One env, capacity 6: a long episode wraps around the ring's end; the window never joins the episode
    that follows, whose rows come right after."""
    ring = VectorRingBuffer(1, 6, OBS, ACT)
    model = RingModel(ring)
    rng = np.random.default_rng(0)
    model.start([0])
    for _ in range(9):
        model.step([0], rng, 0.0)
    want = model.windows(3, "none", 1, 1.0)
    assert len(model.episodes()) == 1 and len(want) == 3  # 5 steps held, rows 4, 5, 0, 1, 2
    batch = ring.sample_slices(200, 3, seed=1)
    assert set(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist())) == set(want)
    assert (batch["indices"] % 6 == np.array([[4, 5, 0], [5, 0, 1], [0, 1, 2]])[batch["start_indices"]]).all()
    assert batch["partial"].all()  # the running episode: its returns-to-go run to its newest step
    for b, key in enumerate(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist())):
        check_window(batch, b, want[key], (2,))


def test_ring_partial_flag_and_returns_to_go() -> None:
    ring = VectorRingBuffer(2, 20, OBS, ACT)
    ring.start_episodes(np.array([0, 1]), np.zeros((2, 2), np.float32))
    for t in range(4):
        done = np.array([t == 3, False])
        ring.add(np.array([0, 1]), np.zeros(2, np.int64), np.array([1.0, 2.0]) * (t + 1), done, np.zeros(2, bool),
                 np.zeros((2, 2), np.float32))
    batch = ring.sample_slices(50, 4, seed=0)
    env = batch["episode_ids"] // 20
    assert (batch["partial"] == (env == 1)).all()
    rtg = np.where(env[:, None] == 0, [10.0, 9.0, 7.0, 4.0], [20.0, 18.0, 14.0, 8.0])
    np.testing.assert_array_equal(batch["returns_to_go"], rtg)
    discounted = ring.sample_slices(5, 2, seed=0, gamma=0.5, pad="end")
    r = np.where(discounted["mask"], discounted["rewards"], 0)
    # rtg[t] = r[t] + 0.5 * rtg[t + 1] inside the episode
    inside = discounted["mask"][:, 1]
    np.testing.assert_allclose(discounted["returns_to_go"][inside, 0],
                               r[inside, 0] + 0.5 * discounted["returns_to_go"][inside, 1])


def test_ring_slices_are_uniform_over_windows() -> None:
    """Episodes of 3, 10 and 25 steps: each window (not each episode) equally likely, a chi-square test at a
    fixed seed."""
    from scipy import stats  # only these tests use it: not imported where the file is only collected

    ring = VectorRingBuffer(1, 64, OBS, ACT)
    ring.start_episodes(np.array([0]), np.zeros((1, 2), np.float32))
    for steps in (3, 10, 25):
        for t in range(steps):
            ring.add(np.array([0]), np.array([0]), np.array([1.0]), np.array([t == steps - 1]), np.array([False]),
                     np.zeros((1, 2), np.float32))
        ring.start_episodes(np.array([0]), np.zeros((1, 2), np.float32))
    for pad, windows in (("none", 1 + 8 + 23), ("both", 3 + 10 + 25 + 3 * 2)):
        batch = ring.sample_slices(40_000, 3, pad=pad, seed=123)
        counts = Counter(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist()))
        assert len(counts) == windows
        assert stats.chisquare(list(counts.values())).pvalue > 1e-3
    episodes = Counter(ring.sample_slices(30_000, 3, by="episode", seed=5)["episode_ids"].tolist())
    assert len(episodes) == 3 and stats.chisquare(list(episodes.values())).pvalue > 1e-3


@pytest.mark.parametrize("priority", ["first", "max"])
@pytest.mark.parametrize("pad", ["none", "end", "both"])
def test_prioritized_slices_follow_the_priorities(priority: str, pad: str) -> None:
    from scipy import stats  # only these tests use it: not imported where the file is only collected

    ring = PrioritizedVectorRingBuffer(1, 32, OBS, ACT, alpha=1.0, beta=0.5)
    ring.start_episodes(np.array([0]), np.zeros((1, 2), np.float32))
    for steps in (6, 9):
        for t in range(steps):
            ring.add(np.array([0]), np.array([0]), np.array([1.0]), np.array([t == steps - 1]), np.array([False]),
                     np.zeros((1, 2), np.float32))
        ring.start_episodes(np.array([0]), np.zeros((1, 2), np.float32))
    rows = ring.sample(0)["indices"]
    priorities = np.arange(1, rows.size + 1, dtype=np.float64)
    ring.update_weight(rows, priorities)
    p = dict(zip(rows.tolist(), ring.priorities(rows).tolist()))
    batch = ring.sample_slices(60_000, 3, pad=pad, priority=priority, seed=7)
    keys = list(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist()))
    weight_of = {}
    for b, key in enumerate(keys[:2000]):
        real = batch["indices"][b][batch["mask"][b]]
        w = p[int(real[0])] if priority == "first" else max(p[int(r)] for r in real)
        weight_of[key] = w
    counts = Counter(keys)
    assert set(counts) == set(weight_of)
    expected = np.array([weight_of[k] for k in counts])
    assert stats.chisquare(list(counts.values()), expected / expected.sum() * len(keys)).pvalue > 1e-3
    w_all = np.array([weight_of[k] for k in keys])
    np.testing.assert_allclose(batch["weights"], (w_all / w_all.min()) ** -0.5)


def test_ring_slices_bad_input() -> None:
    ring = VectorRingBuffer(2, 10, OBS, ACT)
    with pytest.raises(SliceLengthError, match="no episodes"):
        ring.sample_slices(4, 2)
    model = run_model(ring, [("step", 3)] * 3, 0, 0.0)
    assert len(model.episodes()) == 2
    with pytest.raises(SliceLengthError, match=r"longest, env \d's episode from ring row 0, has 3; ask for length <= 3") as err:
        ring.sample_slices(4, 5)
    assert err.value.length == 5 and err.value.longest_steps == 3 and isinstance(err.value, ValueError)
    empty = ring.sample_slices(0, 5, stack_num=2)
    assert empty["observations"].shape == (0, 5, 2, 2) and empty["mask"].shape == (0, 5)
    assert empty["episode_ids"].shape == (0,) and empty["returns_to_go"].dtype == np.float64
    mask = ring.sample_slices(30, 5, pad="end", seed=0)["mask"]
    real = mask.sum(axis=1)  # padded past each episode's end only: the steps left from the start, then padding
    assert set(real.tolist()) == {1, 2, 3} and (mask == (np.arange(5) < real[:, None])).all()
    with pytest.raises(ValueError, match="pad must be one of"):
        ring.sample_slices(4, 2, pad="left")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="length must be >= 1"):
        ring.sample_slices(4, 0)
    with pytest.raises(ValueError, match="not both"):
        ring.sample_slices(4, 2, seed=1, rng=np.random.default_rng(1))
    with pytest.raises(ValueError, match="gamma"):
        ring.sample_slices(4, 2, gamma=1.5)
    prioritized = PrioritizedVectorRingBuffer(1, 10, OBS, ACT, alpha=0.6, beta=0.4)
    with pytest.raises(ValueError, match="by='window'"):
        prioritized.sample_slices(4, 2, by="episode")


def test_ring_index_follows_writes() -> None:
    """The episode table is kept between calls and rebuilt after any write."""
    ring = VectorRingBuffer(1, 8, OBS, ACT)
    model = run_model(ring, [("step", 1)] * 3, 0, 0.0)
    first = ring.sample_slices(20, 2, seed=0)
    assert set(first["start_indices"].tolist()) == {0, 1}
    model.step([0], np.random.default_rng(1), 0.0)
    assert set(ring.sample_slices(40, 2, seed=0)["start_indices"].tolist()) == {0, 1, 2}
    ring.reset()
    with pytest.raises(SliceLengthError):
        ring.sample_slices(2, 2)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_envs=st.integers(1, 3), capacity=st.integers(3, 9), operations=ops, seed=st.integers(0, 2**16),
       p_end=st.sampled_from([0.0, 0.2, 0.5]), length=st.integers(1, 4), pad=st.sampled_from(PADS),
       gamma=st.sampled_from([1.0, 0.9]), prioritized=st.booleans(), every=st.integers(1, 4))
def test_ring_slices_between_writes_match_every_window_held(
    num_envs: int, capacity: int, operations: list[tuple[str, int]], seed: int, p_end: float, length: int, pad: str,
    gamma: float, prioritized: bool, every: int
) -> None:
    """Samples taken between writes (the table caught up with the rows written since the last call, rings
    wrapping many times over) draw exactly the windows the brute-force reference lists at that moment."""
    if prioritized:
        ring: VectorRingBuffer = PrioritizedVectorRingBuffer(num_envs, capacity, OBS, ACT, alpha=0.6, beta=0.4)
    else:
        ring = VectorRingBuffer(num_envs, capacity, OBS, ACT)
    model = RingModel(ring)
    rng = np.random.default_rng(seed)
    model.start(list(range(num_envs)))
    for i, (kind, arg) in enumerate([*operations, *operations]):
        if kind == "step":
            model.step([e for e in range(num_envs) if arg >> e & 1] or [0], rng, p_end)
        else:
            model.abandon(arg % num_envs)
        if i % every:
            continue
        want = model.windows(length, pad, 1, gamma)
        if not want:
            with pytest.raises(SliceLengthError):
                ring.sample_slices(4, length, pad=pad, seed=seed)  # type: ignore[arg-type]
            continue
        batch = ring.sample_slices(30 * len(want) + 10, length, pad=pad, gamma=gamma, seed=seed)  # type: ignore[arg-type]
        drawn = list(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist()))
        assert set(drawn) == set(want), f"after operation {i}"
        for b, key in enumerate(drawn[:12]):
            check_window(batch, b, want[key], (2,))


def assert_same_slices(kept: dict[str, Any], fresh: dict[str, Any]) -> None:
    for key, value in fresh.items():
        if key == "returns_to_go":
            np.testing.assert_allclose(kept[key], value, rtol=1e-12, atol=1e-12)
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(kept[key], value, err_msg=key)


@pytest.mark.parametrize("prioritized", [False, True])
def test_ring_table_kept_through_block_writes_equals_one_built_afresh(prioritized: bool) -> None:
    """``add_all`` with restarts, ``add_steps`` blocks of 1 to capacity - 1 steps, ``start_episodes``, a preload
    and a reset between samples: each batch equals the one a table built from all rows gives, same seed."""
    num_envs, capacity = 3, 12
    if prioritized:
        ring: VectorRingBuffer = PrioritizedVectorRingBuffer(num_envs, capacity, OBS, ACT, alpha=0.6, beta=0.4)
    else:
        ring = VectorRingBuffer(num_envs, capacity, OBS, ACT)
    rng = np.random.default_rng(3)
    ids = np.arange(num_envs)
    ring.start_episodes(ids, rng.standard_normal((num_envs, 2)).astype(np.float32))
    pending = np.zeros(num_envs, dtype=bool)  # envs whose episode ended: they restart in their next step
    for round_ in range(60):
        k = int(rng.choice([1, 2, capacity // 2, capacity - 1]))
        if round_ % 3 == 0:
            restarts = np.zeros((k, num_envs), dtype=bool)
            restarts[0] = pending
            ends = rng.random((k, num_envs)) < 0.15
            ends[:-1] &= False  # an end needs its restart in the next step of the block: only the last ends
            restarts[1:] |= ends[:-1]
            terms = ends & (rng.random((k, num_envs)) < 0.5)
            RingWriter(ring).add_steps([rng.integers(0, 3, (k, num_envs))], rng.integers(-3, 4, (k, num_envs)) * 1.0,
                                       terms, ends & ~terms, [rng.standard_normal((k, num_envs, 2)).astype(np.float32)],
                                       restarts)
            pending = ends[-1] & ~restarts[-1]
        else:
            for _ in range(k):
                started = np.flatnonzero(pending)
                ends = (rng.random(num_envs) < 0.15) & ~pending
                ring.add_all(rng.integers(0, 3, num_envs), rng.integers(-3, 4, num_envs) * 1.0, ends, np.zeros(num_envs, bool),
                             rng.standard_normal((num_envs, 2)).astype(np.float32), started=started)
                pending = ends
        if round_ == 40:
            ring.reset()
            ring.start_episodes(ids, rng.standard_normal((num_envs, 2)).astype(np.float32))
            pending[:] = False
        for pad, gamma in (("none", 1.0), ("both", 0.9)):
            try:
                kept = ring.sample_slices(64, 3, pad=pad, gamma=gamma, seed=round_)  # type: ignore[arg-type]
            except SliceLengthError:
                continue
            table = ring._episodes
            ring._episodes = EpisodeTable(ring_columns(ring))  # the next call builds the table from all rows
            assert_same_slices(kept, ring.sample_slices(64, 3, pad=pad, gamma=gamma, seed=round_))  # type: ignore[arg-type]
            ring._episodes = table


# --------------------------------------------------------------------------------------- dataset reference
def dataset_windows(ds: vcollect.Dataset, length: int, pad: str, gamma: float) -> dict[tuple[int, int], dict[str, Any]]:
    out = {}
    for ep in ds.iterate_episodes():
        t_len = len(ep)
        low = lowest_start(length, pad)
        for s in range(low, low + int(window_counts(np.array([t_len]), length, pad)[0])):
            win: dict[str, Any] = {k: [] for k in ("obs", "next", "act", "rew", "term", "trunc", "mask", "t", "rtg")}
            for j in range(length):
                t = s + j
                real = 0 <= t < t_len
                win["mask"].append(real)
                if not real:
                    for key in ("obs", "next", "act", "rew", "term", "trunc", "t", "rtg"):
                        win[key].append(None)
                    continue
                win["obs"].append(ep.observations[t])
                win["next"].append(ep.observations[t + 1])
                win["act"].append(ep.actions[t])
                win["rew"].append(ep.rewards[t])
                win["term"].append(ep.terminations[t])
                win["trunc"].append(ep.truncations[t])
                win["t"].append(t)
                win["rtg"].append(float(np.sum(ep.rewards[t:] * gamma ** np.arange(t_len - t))))
            win["partial"] = False
            out[(ep.id, s)] = win
    return out


def reference_stacks(frames: np.ndarray, k: int) -> np.ndarray:
    """gymnasium's FrameStackObservation with reset padding: each observation the last k frames."""
    idx = np.maximum(np.arange(len(frames))[:, None] + np.arange(1 - k, 1), 0)
    return frames[idx]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, vcollect.Dataset]:
    root = tmp_path_factory.mktemp("slices")
    rng = np.random.default_rng(0)
    lengths = [1, 4, 9, 2, 6, 12, 3]
    out = {}
    plain = EpisodeStore.create("s/plain-v0", OBS, ACT, root=root, shard_steps=12)
    stacked_space = gym.spaces.Box(0, 255, (3, 6, 5), np.uint8)
    stacked = EpisodeStore.create("s/stacked-v0", stacked_space, ACT, root=root, frame_stack=3, shard_steps=12)
    zero = EpisodeStore.create("s/stacked-raw-v0", stacked_space, ACT, root=root, frame_stack=3, compression="none")
    zero_padded = EpisodeStore.create("s/stacked-zero-v0", stacked_space, ACT, root=root,
                                      frame_stack=FrameStack(3, "zero"), shard_steps=12)
    for i, t in enumerate(lengths):
        act, rew = rng.integers(0, 3, t), rng.integers(-2, 5, t).astype(np.float64)
        term = np.eye(1, t, t - 1, dtype=bool)[0] & (i % 2 == 0)
        trunc = np.eye(1, t, t - 1, dtype=bool)[0] & (i % 2 == 1)
        plain.write_episode(rng.normal(size=(t + 1, 2)).astype(np.float32), act, rew, term, trunc, seed=i, env_id=0)
        frames = rng.integers(0, 256, (t + 1, 6, 5), dtype=np.uint8)
        for store in (stacked, zero):
            store.write_episode(reference_stacks(frames, 3), act, rew, term, trunc, seed=i, env_id=1)
        zero_stacks = reference_stacks(np.concatenate([np.zeros((2, 6, 5), np.uint8), frames]), 3)[2:]
        zero_padded.write_episode(zero_stacks, act, rew, term, trunc, seed=i, env_id=1)
    for store in (plain, stacked, zero, zero_padded):
        store.close()
    for name in ("plain", "stacked", "stacked-raw", "stacked-zero"):
        out[name] = vcollect.load_dataset(f"s/{name}-v0", root=root)
    return out


@pytest.mark.parametrize("name", ["plain", "stacked", "stacked-raw", "stacked-zero"])
@pytest.mark.parametrize("pad", PADS)
@pytest.mark.parametrize("gamma", [1.0, 0.8])
@pytest.mark.parametrize("cache_bytes", [0, None])
def test_dataset_slices_match_every_window(datasets: dict[str, vcollect.Dataset], name: str, pad: str, gamma: float,
                                           cache_bytes: int | None) -> None:
    ds = datasets[name]
    length = 4
    want = dataset_windows(ds, length, pad, gamma)
    batch = ds.sample_slices(25 * len(want), length, pad=pad, gamma=gamma, seed=3, cache_bytes=cache_bytes)
    drawn = list(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist()))
    assert set(drawn) == set(want)
    shape = ds.observation_space.shape
    for b, key in enumerate(drawn[:60]):
        check_window(batch, b, want[key], shape)
    again = ds.slices_at(batch["episode_ids"][:60], batch["start_indices"][:60], length, gamma=gamma)
    for key, value in again.items():
        np.testing.assert_array_equal(value, batch[key][:60])


@pytest.mark.parametrize("name", ["plain", "stacked", "stacked-zero"])
def test_dataset_slices_read_each_windows_rows_once_and_next_observations_on_request(
    datasets: dict[str, vcollect.Dataset], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window of L steps reads its observations and next observations as one run of L + k stored rows (k
    frames of a stack), not 2 L k; ``next_observations=False`` leaves that key out and changes nothing else."""
    ds = datasets[name]
    index = ds._index
    read: list[int] = []
    gather = type(index).gather

    def counting(self: Any, column: str, dtype: Any, groups: Any, cache_bytes: int) -> np.ndarray:
        if column.startswith("observations"):
            read.append(len(groups.rows))
        return gather(self, column, dtype, groups, cache_bytes)

    monkeypatch.setattr(type(index), "gather", counting)
    stack = StoredDataset(ds).frame_stack
    k = 1 if stack is None else stack.k
    full = ds.sample_slices(40, 3, pad="both", seed=5, cache_bytes=0)
    assert read and sum(read) <= 40 * (3 + k)
    read.clear()
    lean = ds.sample_slices(40, 3, pad="both", seed=5, cache_bytes=0, next_observations=False)
    assert sum(read) <= 40 * (3 + k - 1)
    assert sorted(lean) == sorted(set(full) - {"next_observations"})
    for key, value in lean.items():
        np.testing.assert_array_equal(value, full[key], err_msg=key)
    again = ds.slices_at(full["episode_ids"], full["start_indices"], 3, next_observations=False)
    np.testing.assert_array_equal(again["observations"], full["observations"])
    assert "next_observations" not in again


@pytest.mark.parametrize("name", ["plain", "stacked", "stacked-raw", "stacked-zero"])
@pytest.mark.parametrize("pad", PADS)
@pytest.mark.parametrize("cache_bytes", [0, None])
def test_dataset_slices_as_views_match_every_window(datasets: dict[str, vcollect.Dataset], name: str, pad: str,
                                                    cache_bytes: int | None) -> None:
    """``stacks="view"``: the same windows as the reference (and as ``"copy"``), observations read-only; without
    padding each window's stored rows are read once into one array (L + k frames, k frames a stack), every stack
    and next observation a view over it; a batch holding a padded window is materialised, read-only as well."""
    ds = datasets[name]
    length = 4
    want = dataset_windows(ds, length, pad, 0.8)
    batch = ds.sample_slices(25 * len(want), length, pad=pad, gamma=0.8, seed=4, cache_bytes=cache_bytes,
                             stacks="view")
    drawn = list(zip(batch["episode_ids"].tolist(), batch["start_indices"].tolist()))
    assert set(drawn) == set(want)
    for b, key in enumerate(drawn):
        check_window(batch, b, want[key], ds.observation_space.shape)
    copies = ds.sample_slices(25 * len(want), length, pad=pad, gamma=0.8, seed=4, cache_bytes=cache_bytes)
    for key, value in copies.items():
        np.testing.assert_array_equal(batch[key], value, err_msg=key)
    obs, nxt = batch["observations"], batch["next_observations"]
    assert not obs.flags.writeable and not nxt.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        obs[0, 0] = 1
    stack = StoredDataset(ds).frame_stack
    k = 1 if stack is None else stack.k
    if pad == "none":
        assert np.shares_memory(obs, nxt)
        (low, _), (_, high) = byte_bounds(obs), byte_bounds(nxt)  # the memory both span: L + k rows a window
        row_bytes = int(np.prod(ds.observation_space.shape[(k > 1):])) * obs.itemsize
        assert high - low == obs.shape[0] * (length + k) * row_bytes
        lean = ds.sample_slices(30, length, seed=5, stacks="view", next_observations=False, cache_bytes=cache_bytes)
        assert "next_observations" not in lean
        np.testing.assert_array_equal(lean["observations"], ds.sample_slices(30, length, seed=5)["observations"])
    again = ds.slices_at(batch["episode_ids"][:40], batch["start_indices"][:40], length, gamma=0.8, stacks="view")
    for key, value in again.items():
        np.testing.assert_array_equal(value, batch[key][:40], err_msg=key)


def test_dataset_slices_are_uniform_and_by_episode(datasets: dict[str, vcollect.Dataset]) -> None:
    from scipy import stats  # only these tests use it: not imported where the file is only collected

    ds = datasets["plain"]
    counts = Counter(zip(*(ds.sample_slices(40_000, 3, seed=11)[k].tolist() for k in ("episode_ids", "start_indices"))))
    assert len(counts) == sum(max(t - 2, 0) for t in ds.episode_lengths)
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3
    episodes = Counter(ds.sample_slices(20_000, 3, by="episode", seed=12)["episode_ids"].tolist())
    assert set(episodes) == {int(i) for i in np.flatnonzero(ds.episode_lengths >= 3)}
    assert stats.chisquare(list(episodes.values())).pvalue > 1e-3


def test_dataset_slices_of_a_view(datasets: dict[str, vcollect.Dataset]) -> None:
    ds = datasets["plain"]
    view = ds.filter_episodes(lambda ep: len(ep) % 2 == 0)
    batch = view.sample_slices(500, 2, seed=0)
    assert set(batch["episode_ids"].tolist()) == {1, 3, 4, 5}
    with pytest.raises(EpisodeIndexError, match="episode 2 is not in this dataset"):
        view.slices_at([2], [0], 2)


def test_dataset_slices_bad_input(datasets: dict[str, vcollect.Dataset]) -> None:
    ds = datasets["plain"]
    with pytest.raises(SliceLengthError, match=r"the longest, episode 5, has 12; ask for length <= 12") as err:
        ds.sample_slices(8, 13)
    assert err.value.longest_steps == 12
    empty = ds.sample_slices(0, 13)
    assert empty["observations"].shape == (0, 13, 2) and empty["actions"].shape == (0, 13)
    assert empty["mask"].shape == (0, 13) and empty["start_indices"].shape == (0,)
    with pytest.raises(IndexError, match="holds no step"):
        ds.slices_at([0], [1], 3)  # episode 0 has one step
    with pytest.raises(IndexError, match="holds no step"):
        ds.slices_at([1], [-3], 3)
    with pytest.raises(ValueError, match="one start per episode"):
        ds.slices_at([1, 2], [0], 3)
    with pytest.raises(ValueError, match="stacks must be 'copy'.*or 'view'.*got 'frames'"):
        ds.sample_slices(8, 3, stacks="frames")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stacks must be"):
        ds.slices_at([1], [0], 3, stacks=None)  # type: ignore[arg-type]
    one = ds.slices_at(5, -1, 3)
    assert one["mask"].tolist() == [[False, True, True]] and one["timesteps"].tolist() == [[0, 0, 1]]


# ------------------------------------------------------------------------------------------- torch view
def test_torch_dataset_of_slices(datasets: dict[str, vcollect.Dataset]) -> None:
    torch = pytest.importorskip("torch")
    ds = datasets["stacked"]
    items = ds.as_torch_dataset("slices", length=3, pad="start")
    want = dataset_windows(ds, 3, "start", 1.0)
    assert len(items) == len(want) == ds.total_steps
    keys = [(int(items[i]["episode_ids"]), int(items[i]["start_indices"])) for i in range(len(items))]
    assert set(keys) == set(want) and len(set(keys)) == len(keys)
    loader = torch.utils.data.DataLoader(items, batch_size=7, shuffle=False)
    batches = list(loader)
    assert batches[0]["observations"].shape == (7, 3, 3, 6, 5) and batches[0]["mask"].dtype == torch.bool
    got = torch.cat([b["observations"] for b in batches]).numpy()
    assert np.array_equal(got, np.stack([items[i]["observations"] for i in range(len(items))]))
    with pytest.raises(ValueError, match="length"):
        ds.as_torch_dataset("slices")
    with pytest.raises(IndexError):
        items[len(items)]


def test_torch_slices_in_worker_processes(datasets: dict[str, vcollect.Dataset]) -> None:
    import multiprocessing

    torch = pytest.importorskip("torch")
    ds = datasets["plain"]
    items = ds.as_torch_dataset("slices", length=2)
    ds.sample_steps(4, cache_bytes=0)  # the parent holds open files a forked worker inherits
    loader = torch.utils.data.DataLoader(items, batch_size=5, num_workers=2, shuffle=False, timeout=120,
                                         multiprocessing_context=multiprocessing.get_context("fork"))
    got = torch.cat([b["returns_to_go"] for b in loader]).numpy()
    want = ds.slices_at(*zip(*[(items[i]["episode_ids"], items[i]["start_indices"]) for i in range(len(items))]), 2)
    np.testing.assert_array_equal(got, want["returns_to_go"])



@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, vcollect.Dataset]:
    """``frame_stack`` Zstandard datasets of 96x96 frames, three to a 32 KiB chunk: windows of slices long
    enough against a chunk have theirs decoded straight into the batch's array (a margin of two frames on
    either side of each window)."""
    root = tmp_path_factory.mktemp("chunked")
    rng = np.random.default_rng(7)
    space = gym.spaces.Box(0, 255, (3, 96, 96), np.uint8)
    stores = {"edge": EpisodeStore.create("s/chunked-edge-v0", space, ACT, root=root, frame_stack=3, shard_steps=50),
              "zero": EpisodeStore.create("s/chunked-zero-v0", space, ACT, root=root, frame_stack=FrameStack(3, "zero"),
                                          shard_steps=50)}
    for i, t in enumerate([30, 17, 45, 25, 9]):
        frames = rng.integers(0, 4, (t + 1, 96, 96), dtype=np.uint8) * 60
        act, rew = rng.integers(0, 3, t), rng.normal(size=t)
        term = np.eye(1, t, t - 1, dtype=bool)[0]
        stores["edge"].write_episode(reference_stacks(frames, 3), act, rew, term, ~term & False, seed=i, env_id=0)
        zero_stacks = reference_stacks(np.concatenate([np.zeros((2, 96, 96), np.uint8), frames]), 3)[2:]
        stores["zero"].write_episode(zero_stacks, act, rew, term, ~term & False, seed=i, env_id=0)
    out = {}
    for name, store in stores.items():
        store.close()
        out[name] = vcollect.load_dataset(f"s/chunked-{name}-v0", root=root)
    return out


@pytest.mark.parametrize("name", ["edge", "zero"])
def test_views_decoded_into_their_windows_equal_copies(chunked: dict[str, vcollect.Dataset], name: str) -> None:
    """Frames decoded chunk by chunk straight into each window's slot (whole chunks, the rows outside the
    window landing in margins beside it): every view equals the materialised stacks, windows at an episode's
    start included, with and without next observations, through sample_slices and slices_at."""
    ds = chunked[name]
    shard = sorted(ds.path.rglob("*.h5"))[0]
    frame_chunks: list[int] = []
    with h5py.File(shard, "r") as f:
        f.visititems(lambda _, d: frame_chunks.append(d.chunks[0])
                     if isinstance(d, h5py.Dataset) and d.shape[1:] == (96, 96) else None)
    assert frame_chunks and set(frame_chunks) == {3}  # three frames a chunk: a margin of 2 rows
    length, k, margin, row = 9, 3, 2, 96 * 96
    for nxt in (True, False):
        view = ds.sample_slices(40, length, seed=3, cache_bytes=0, stacks="view", next_observations=nxt)
        copy = ds.sample_slices(40, length, seed=3, cache_bytes=0, next_observations=nxt)
        assert view.keys() == copy.keys()
        for key, value in copy.items():
            np.testing.assert_array_equal(view[key], value, err_msg=key)
        rows = length + k - 1 + int(nxt)
        low, high = byte_bounds(view["observations"])[0], byte_bounds(view.get("next_observations",
                                                                                 view["observations"]))[1]
        assert high - low == ((40 - 1) * (rows + 2 * margin) + rows) * row
        # and every episode's first window, whose first stacks repeat (or zero) the episode's first frame
        episodes = np.concatenate([view["episode_ids"], np.arange(5)])
        starts = np.concatenate([view["start_indices"], np.zeros(5, dtype=np.int64)])
        again = ds.slices_at(episodes, starts, length, cache_bytes=0, stacks="view", next_observations=nxt)
        for key, value in ds.slices_at(episodes, starts, length, cache_bytes=0, next_observations=nxt).items():
            np.testing.assert_array_equal(again[key], value, err_msg=key)


def test_a_views_array_is_reused_only_once_nothing_refers_to_it(chunked: dict[str, vcollect.Dataset]) -> None:
    """The array behind a batch of views is filled again by a later call only when no view of it is left:
    a batch still held keeps its values (the next call gets an array of its own); once the batches are
    dropped, the next call writes into the last one's memory, with the right values; a loop holding one batch
    while drawing the next alternates between two arrays."""
    ds = chunked["edge"]
    first = ds.sample_slices(64, 9, seed=1, cache_bytes=0, stacks="view")
    kept = np.array(first["observations"])
    second = ds.sample_slices(64, 9, seed=2, cache_bytes=0, stacks="view")
    np.testing.assert_array_equal(first["observations"], kept)
    assert not np.shares_memory(first["observations"], second["observations"])
    where = byte_bounds(second["observations"])[0]
    del first, second
    third = ds.sample_slices(64, 9, seed=4, cache_bytes=0, stacks="view")
    assert byte_bounds(third["observations"])[0] == where
    np.testing.assert_array_equal(third["observations"],
                                  ds.sample_slices(64, 9, seed=4, cache_bytes=0)["observations"])
    np.testing.assert_array_equal(third["next_observations"],
                                  ds.sample_slices(64, 9, seed=4, cache_bytes=0)["next_observations"])
    # a loop that still holds the previous batch while drawing the next: every other call's memory again
    del third
    places, batch = [], None
    for seed in range(5, 9):
        batch = ds.sample_slices(64, 9, seed=seed, cache_bytes=0, stacks="view")
        places.append(byte_bounds(batch["observations"])[0])
        np.testing.assert_array_equal(batch["observations"],
                                      ds.sample_slices(64, 9, seed=seed, cache_bytes=0)["observations"])
    assert places[0] == places[2] != places[1] == places[3]


def test_views_decoded_by_several_threads_equal_copies(chunked: dict[str, vcollect.Dataset],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``$VCOLLECT_DECODE_THREADS=3``: a call's frames (megabytes per shard) decoded by the calling thread and
    two pool threads, the same batch as one thread's copies; a value that is no thread count is refused."""
    ds = chunked["edge"]
    monkeypatch.setenv("VCOLLECT_DECODE_THREADS", "3")
    view = ds.sample_slices(300, 9, seed=8, cache_bytes=0, stacks="view")
    assert any(t.name.startswith("vcollect-decode") for t in threading.enumerate())
    monkeypatch.setenv("VCOLLECT_DECODE_THREADS", "1")
    copy = ds.sample_slices(300, 9, seed=8, cache_bytes=0)
    for key, value in copy.items():
        np.testing.assert_array_equal(view[key], value, err_msg=key)
    monkeypatch.setenv("VCOLLECT_DECODE_THREADS", "all")
    with pytest.raises(ValueError, match=r"\$VCOLLECT_DECODE_THREADS is how many threads .* got 'all'"):
        ds.sample_slices(30, 9, seed=8, cache_bytes=0, stacks="view")


def test_decode_threads_default_to_two_where_two_cpus_are_usable(chunked: dict[str, vcollect.Dataset],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``$VCOLLECT_DECODE_THREADS``, two threads decode a call's frames where the process may run on two
    CPUs or more, the calling thread alone where it may run on one; the batch is the same either way."""
    monkeypatch.delenv("VCOLLECT_DECODE_THREADS", raising=False)
    counts = {}
    for cpus in (1, 2, 8):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, cpus=cpus: set(range(cpus)), raising=False)
        pool, threads = shard_reader._decoding_threads()
        counts[cpus] = (pool is not None, threads)
    assert counts == {1: (False, 1), 2: (True, 2), 8: (True, 2)}
    monkeypatch.setenv("VCOLLECT_DECODE_THREADS", "1")
    assert shard_reader._decoding_threads() == (None, 1)  # the variable still rules
    ds = chunked["edge"]
    one = ds.sample_slices(300, 9, seed=5, cache_bytes=0, stacks="view")
    monkeypatch.delenv("VCOLLECT_DECODE_THREADS")
    two = ds.sample_slices(300, 9, seed=5, cache_bytes=0, stacks="view")
    for key, value in one.items():
        np.testing.assert_array_equal(two[key], value, err_msg=key)


def collate_with_decode_threads(rows: Any) -> dict[str, Any]:
    """Default collate, plus how many threads this DataLoader worker's reads decode on, and how many decode
    pool threads run in it once it has read a batch of windows as views (each window's frames decoded into
    place, on the pool's threads too where there are several)."""
    from torch.utils.data import default_collate, get_worker_info

    batch = default_collate(rows)
    info = get_worker_info()
    assert info is not None
    batch["threads"] = shard_reader._decoding_threads()[1]
    info.dataset.dataset.sample_slices(64, 9, seed=1, cache_bytes=0, stacks="view")  # type: ignore[attr-defined]
    batch["pool_threads"] = sum(t.name.startswith("vcollect-decode") for t in threading.enumerate())
    return batch


@pytest.mark.parametrize(("variable", "threads"), [(None, 1), ("2", 2)])
def test_dataloader_workers_decode_on_one_thread_unless_told(chunked: dict[str, vcollect.Dataset],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             variable: str | None, threads: int) -> None:
    """In a torch DataLoader worker a read's frames decode on the worker's own thread by default (workers
    decode side by side already), where the same process outside a worker takes two threads;
    ``$VCOLLECT_DECODE_THREADS`` still rules there. The windows are the same."""
    torch = pytest.importorskip("torch")
    import multiprocessing

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    if variable is None:
        monkeypatch.delenv("VCOLLECT_DECODE_THREADS", raising=False)
        assert shard_reader._decoding_threads()[1] == 2  # outside a worker
    else:
        monkeypatch.setenv("VCOLLECT_DECODE_THREADS", variable)
    ds = chunked["edge"]
    items = ds.as_torch_dataset("slices", length=9, cache_bytes=0)
    loader = torch.utils.data.DataLoader(items, batch_size=64, num_workers=1, collate_fn=collate_with_decode_threads,
                                         multiprocessing_context=multiprocessing.get_context("fork"), timeout=120)
    batch = next(iter(loader))
    assert batch["observations"].numpy().nbytes > chunk_reader.PARALLEL_BYTES  # a read large enough for the pool
    assert batch["threads"] == threads
    assert batch["pool_threads"] == threads - 1
    want = ds.slices_at(*_first_windows(items, 64), 9, cache_bytes=0)
    np.testing.assert_array_equal(batch["observations"].numpy(), want["observations"])


def _first_windows(items: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The episodes and starts of a slices torch dataset's first ``count`` windows."""
    rows = [items[i] for i in range(count)]
    return np.array([r["episode_ids"] for r in rows]), np.array([r["start_indices"] for r in rows])


@pytest.mark.parametrize(("name", "threads"), [("edge", "1"), ("zero", "3")])
def test_views_decoded_by_the_stream_reader_equal_libzstds(chunked: dict[str, vcollect.Dataset], name: str,
                                                            threads: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where libzstd does not load, python-zstandard's stream reader decodes the windows' frames: the same
    batch as libzstd's one-shot calls, on one thread and on three (the frames then still decoding while the
    step columns are read, the rows before an episode's first zeroed after)."""
    ds = chunked[name]
    monkeypatch.setenv("VCOLLECT_DECODE_THREADS", threads)
    fast = ds.sample_slices(100, 9, seed=12, cache_bytes=0, stacks="view")
    fast = {key: np.array(value) for key, value in fast.items()}
    for module in (chunk_reader, shard_reader):
        monkeypatch.setattr(module, "library", lambda: None)
    slow = ds.sample_slices(100, 9, seed=12, cache_bytes=0, stacks="view")
    assert slow.keys() == fast.keys()
    for key, value in fast.items():
        np.testing.assert_array_equal(slow[key], value, err_msg=key)


def test_a_step_column_failing_while_frames_decode_leaves_no_thread_waiting(chunked: dict[str, vcollect.Dataset],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two decode threads, the step columns' read failing while the pool thread still decodes a call's frames:
    the error is the call's, the pool thread is stopped and free at once, and the next call is right."""
    ds = chunked["edge"]
    monkeypatch.setenv("VCOLLECT_DECODE_THREADS", "2")
    want = ds.sample_slices(100, 9, seed=21, cache_bytes=0)
    gather = DatasetIndex.gather

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the step columns could not be read")

    monkeypatch.setattr(DatasetIndex, "gather", failing)
    with pytest.raises(RuntimeError, match="step columns"):
        ds.sample_slices(100, 9, seed=21, cache_bytes=0, stacks="view")
    assert shard_reader._decode_pool is not None
    assert shard_reader._decode_pool[2].submit(lambda: "free").result(timeout=5) == "free"
    monkeypatch.setattr(DatasetIndex, "gather", gather)
    got = ds.sample_slices(100, 9, seed=21, cache_bytes=0, stacks="view")
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_damaged_frame_in_a_window_names_its_shard(tmp_path: Path, threads: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame chunk damaged in the middle of a shard: windows decoded as views over it raise CorruptShardError
    naming that shard (decoded by the caller or by a pool thread), and windows elsewhere still read."""
    monkeypatch.setenv("VCOLLECT_DECODE_THREADS", threads)
    rng = np.random.default_rng(3)
    space = gym.spaces.Box(0, 255, (3, 96, 96), np.uint8)
    with EpisodeStore.create("s/damaged-v0", space, ACT, root=tmp_path, frame_stack=3, shard_steps=60) as store:
        for i in range(4):
            frames = rng.integers(0, 4, (61, 96, 96), dtype=np.uint8) * 60
            term = np.eye(1, 60, 59, dtype=bool)[0]
            store.write_episode(reference_stacks(frames, 3), rng.integers(0, 3, 60), rng.normal(size=60), term,
                                np.zeros(60, bool), seed=i, env_id=0)
    ds = vcollect.load_dataset("s/damaged-v0", root=tmp_path)
    shard = sorted(ds.path.rglob("*.h5"))[-1]
    with h5py.File(shard, "r") as f:
        table = ChunkTable(f["observations"])
    k = len(table.offsets) // 2
    with open(shard, "r+b") as f:
        f.seek(int(table.offsets[k]) + int(table.sizes[k]) // 2)
        f.write(b"\xff" * 16)
    with pytest.raises(CorruptShardError, match=shard.name):
        ds.slices_at(np.arange(4), np.full(4, 0), 60, cache_bytes=0, stacks="view")
    within = ds.slices_at(np.array([0]), np.array([0]), 20, cache_bytes=0, stacks="view")
    np.testing.assert_array_equal(within["observations"], ds.slices_at(np.array([0]), np.array([0]), 20,
                                                                       cache_bytes=0)["observations"])
