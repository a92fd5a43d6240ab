"""n-step returns in replay sampling (``sample(..., n_step=n, gamma=g)``) against a plain reference that walks
forward through what each env recorded (episode ends, ring wrap-around, the newest unfinished step, n past
the episode's end), for both rings and both write paths, and for Collectors' rings (Dict observations);
equal to Tianshou's compute_nstep_return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces as gs
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.envs import DictObsEnv
from vcollect import AsyncCollector, Collector, DummyVectorEnv
from vcollect.buffers import PrioritizedVectorRingBuffer, VectorRingBuffer
from vcollect.buffers.ring import ring_columns
from vcollect.buffers.sampling import gather_transitions
from vcollect.hooks import StepRollout

OBS = gs.Box(-np.inf, np.inf, (2,), dtype=np.float64)
ACT = gs.Discrete(3)
NSTEP_KEYS = ("n_step_returns", "n_step_next_observations", "n_step_discounts")
# what each op does to an env: a step that goes on, terminates, truncates; or a new episode mid-episode
GO, TERMINATE, TRUNCATE, ABANDON = range(4)


def make_ring(prioritized: bool, num_envs: int, capacity: int) -> VectorRingBuffer:
    if prioritized:
        return PrioritizedVectorRingBuffer(num_envs, capacity, OBS, ACT, alpha=0.6, beta=0.4, seed=0)
    return VectorRingBuffer(num_envs, capacity, OBS, ACT, seed=0)


@dataclass
class Row:
    obs: float
    episode: int
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    step: bool = False  # a transition was taken from this row


@dataclass
class Recorded:
    """Every row each env ever wrote, in write order (the ring holds each env's last ``capacity`` of them)."""

    num_envs: int
    capacity: int
    rows: list[list[Row]] = field(default_factory=list)
    episodes: int = 0

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.num_envs)]

    def start(self, env: int, obs: float) -> None:
        self.episodes += 1
        self.rows[env].append(Row(obs, self.episodes))

    def add(self, env: int, reward: float, terminated: bool, truncated: bool, obs: float) -> None:
        last = self.rows[env][-1]
        last.reward, last.terminated, last.truncated, last.step = reward, terminated, truncated, True
        self.rows[env].append(Row(obs, last.episode))

    def write_number(self, flat_row: int) -> tuple[int, int]:
        """(env, index into its rows) of the row now at a flat ring row."""
        env, pos = divmod(flat_row, self.capacity)
        total = len(self.rows[env])
        return env, total - 1 - ((total - 1) % self.capacity - pos) % self.capacity

    def stack(self, env: int, w: int, k: int) -> list[float]:
        """Observations of rows w-k+1 .. w, clamped to the episode's first row still in the ring."""
        rows = self.rows[env]
        first, oldest = w, max(0, len(rows) - self.capacity)
        while first - 1 >= oldest and rows[first - 1].episode == rows[w].episode:
            first -= 1
        return [rows[max(w - j, first)].obs for j in range(k - 1, -1, -1)]

    def nstep(self, env: int, w: int, n: int, gamma: float, k: int) -> tuple[float, list[float], float]:
        """(return, stacked bootstrap observations, discount) walking forward from row w, one step at a time."""
        rows, total, m, j = self.rows[env], 0.0, 0, w
        while True:
            total += gamma**m * rows[j].reward
            m += 1
            if rows[j].terminated or rows[j].truncated or m == n or not rows[j + 1].step:
                break
            j += 1
        return total, self.stack(env, j + 1, k), 0.0 if rows[j].terminated else gamma**m


def check_against_reference(
    ring: VectorRingBuffer, ref: Recorded, batch: dict, n: int, gamma: float, k: int
) -> None:
    size = len(batch["indices"])
    assert batch["n_step_returns"].dtype == batch["n_step_discounts"].dtype == np.float64
    assert batch["n_step_returns"].shape == batch["n_step_discounts"].shape == (size,)
    assert batch["n_step_next_observations"].shape == batch["next_observations"].shape
    for i, row in enumerate(batch["indices"].tolist()):
        env, w = ref.write_number(row)
        assert ref.rows[env][w].step
        want_return, want_obs, want_discount = ref.nstep(env, w, n, gamma, k)
        got_obs = batch["n_step_next_observations"][i].reshape(k, 2)[:, 0]
        assert batch["n_step_returns"][i] == pytest.approx(want_return, rel=1e-12, abs=1e-12), (row, n)
        assert got_obs.tolist() == want_obs, (row, n, k)
        assert batch["n_step_discounts"][i] == pytest.approx(want_discount, rel=1e-12, abs=0.0), (row, n)


def sample_both_ways(ring: VectorRingBuffer, ref: Recorded, n: int, gamma: float, k: int) -> None:
    """Every step row at once (gather_transitions) and a drawn batch (sample), both against the reference;
    the usual keys equal to those of the same draw without n_step."""
    steps = np.flatnonzero(ring_columns(ring).has)
    if steps.size == 0:
        return
    check_against_reference(ring, ref, gather_transitions(ring_columns(ring), steps, k, n, gamma), n, gamma, k)
    batch = ring.sample(16, np.random.default_rng(1), stack_num=k, n_step=n, gamma=gamma)
    check_against_reference(ring, ref, batch, n, gamma, k)
    plain = ring.sample(16, np.random.default_rng(1), stack_num=k)
    assert not set(NSTEP_KEYS) & set(plain)
    assert set(batch) - set(plain) == set(NSTEP_KEYS)
    for key in ("observations", "actions", "rewards", "next_observations", "terminations", "truncations",
                "dones", "indices"):
        np.testing.assert_array_equal(batch[key], plain[key])


def reward_of(counter: int) -> float:
    return float((counter * 37) % 11) - 4.5


@settings(max_examples=80, deadline=None)
@given(
    prioritized=st.booleans(),
    num_envs=st.integers(1, 3),
    capacity=st.integers(2, 7),
    ops=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([GO, GO, GO, TERMINATE, TRUNCATE, ABANDON])),
                 min_size=1, max_size=40),
    n=st.integers(1, 6),
    gamma=st.floats(0.0, 1.0),
    data=st.data(),
)
def test_nstep_matches_reference_with_add_and_start_episodes(
    prioritized: bool, num_envs: int, capacity: int, ops: list[tuple[int, int]], n: int, gamma: float,
    data: st.DataObject,
) -> None:
    ring, ref = make_ring(prioritized, num_envs, capacity), Recorded(num_envs, capacity)
    counter = 0
    for env in range(num_envs):
        counter += 1
        ring.start_episodes(np.array([env]), np.full((1, 2), counter, np.float64))
        ref.start(env, counter)
    for env, kind in ops:
        env %= num_envs
        counter += 1
        if kind != ABANDON:
            term, trunc = kind == TERMINATE, kind == TRUNCATE
            ring.add(np.array([env]), np.array([counter % 3]), np.array([reward_of(counter)]), np.array([term]),
                     np.array([trunc]), np.full((1, 2), counter, np.float64))
            ref.add(env, reward_of(counter), term, trunc, counter)
            if not (term or trunc):
                continue
            counter += 1
        ring.start_episodes(np.array([env]), np.full((1, 2), counter, np.float64))
        ref.start(env, counter)
    k = data.draw(st.integers(1, capacity), label="stack_num")
    sample_both_ways(ring, ref, n, gamma, k)


@settings(max_examples=60, deadline=None)
@given(
    prioritized=st.booleans(),
    num_envs=st.integers(1, 3),
    capacity=st.integers(2, 7),
    ops=st.lists(st.lists(st.sampled_from([GO, GO, GO, TERMINATE, TRUNCATE]), min_size=3, max_size=3),
                 min_size=1, max_size=30),
    n=st.integers(1, 6),
    gamma=st.floats(0.0, 1.0),
    data=st.data(),
)
def test_nstep_matches_reference_with_add_all_restarts(
    prioritized: bool, num_envs: int, capacity: int, ops: list[list[int]], n: int, gamma: float,
    data: st.DataObject,
) -> None:
    """add_all steps every env and restarts those that ended on their next step (an all-env backend)."""
    ring, ref = make_ring(prioritized, num_envs, capacity), Recorded(num_envs, capacity)
    ids = np.arange(num_envs)
    ring.start_episodes(ids, np.stack([np.full(2, float(e)) for e in ids]))
    for env in ids.tolist():
        ref.start(env, float(env))
    ended = np.zeros(num_envs, dtype=bool)
    for t, kinds in enumerate(ops, start=1):
        kind = np.array(kinds[:num_envs])
        term, trunc = kind == TERMINATE, kind == TRUNCATE
        obs = [float(100 * t + e) for e in ids]
        rewards = np.array([reward_of(100 * t + e) for e in ids])
        started = np.flatnonzero(ended)
        ring.add_all(np.zeros(num_envs, np.int64), rewards, term, trunc, np.stack([np.full(2, o) for o in obs]),
                     started if started.size else None)
        for env in ids.tolist():
            if ended[env]:
                ref.start(env, obs[env])
            else:
                ref.add(env, float(rewards[env]), bool(term[env]), bool(trunc[env]), obs[env])
        ended = (term | trunc) & ~ended
    k = data.draw(st.integers(1, capacity), label="stack_num")
    sample_both_ways(ring, ref, n, gamma, k)


@pytest.mark.parametrize("backend", ["dummy", "blocks", "async"])
def test_nstep_of_a_collectors_ring_with_dict_observations(backend: str) -> None:
    """A Collector fills a small ring (episodes of 3 to 12 steps in rings of 9 rows, Dict observations); a
    step hook gives every step a reward of its own and notes, per env in order, what was recorded. Each
    sampled step is found by its reward and walked forward through those notes."""
    notes: list[list[tuple[float, bool, bool, int, float]]] = [[], [], []]  # reward, term, trunc, count, x
    where: dict[float, tuple[int, int]] = {}  # reward -> (env, index into notes[env])

    def hook(rollout: StepRollout) -> None:
        rollout.rew = np.arange(len(where), len(where) + len(rollout.env_ids)) * 0.25 - 7.0
        for i, env in enumerate(rollout.env_ids.tolist()):
            where[float(rollout.rew[i])] = (env, len(notes[env]))
            notes[env].append((float(rollout.rew[i]), bool(rollout.terminated[i]), bool(rollout.truncated[i]),
                               int(rollout.obs_next["count"][i]), float(rollout.obs_next["position"][i][0])))

    fns = [lambda: DictObsEnv(3, 12)] * 3
    envs: Any = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP) if backend == "blocks" else DummyVectorEnv(fns)
    ring = VectorRingBuffer(3, 9, seed=0)
    with (AsyncCollector if backend == "async" else Collector)(None, envs, ring, seed=0, on_step_hook=hook) as collector:
        collector.collect(n_step=150, random=True, reset_before_collect=True)
    n, gamma = 4, 0.8
    batch = gather_transitions(ring_columns(ring), np.flatnonzero(ring_columns(ring).has), 1, n, gamma)
    ends = 0
    for i, reward in enumerate(batch["rewards"].tolist()):
        env, k = where[reward]
        steps, total, m = notes[env], 0.0, 0
        while True:
            total += gamma**m * steps[k + m][0]
            m += 1
            if steps[k + m - 1][1] or steps[k + m - 1][2] or m == n or k + m == len(steps):
                break
        last = steps[k + m - 1]
        ends += m < n
        assert batch["n_step_returns"][i] == pytest.approx(total, rel=1e-12, abs=1e-12)
        assert batch["n_step_discounts"][i] == pytest.approx(0.0 if last[1] else gamma**m, rel=1e-12, abs=0.0)
        assert batch["n_step_next_observations"]["count"][i] == last[3]
        assert batch["n_step_next_observations"]["position"][i][0] == np.float32(last[4])
    assert ends > 5 and len(batch["rewards"]) > 12  # episode ends were walked into, not only whole n-step runs


def two_episodes() -> VectorRingBuffer:
    """One env: a 3-step episode cut by its time limit, then 2 steps of one still running."""
    ring = VectorRingBuffer(1, 16, OBS, ACT, seed=0)
    env = np.array([0])
    ring.start_episodes(env, np.zeros((1, 2)))
    for t, (term, trunc) in enumerate([(False, False), (False, False), (False, True)], start=1):
        ring.add(env, np.array([0]), np.array([float(t)]), np.array([term]), np.array([trunc]), np.full((1, 2), t))
    ring.start_episodes(env, np.full((1, 2), 10.0))
    for t in (11, 12):
        ring.add(env, np.array([0]), np.array([float(t)]), np.array([False]), np.array([False]), np.full((1, 2), t))
    return ring


def test_nstep_one_is_the_one_step_target_and_truncation_bootstraps() -> None:
    ring = two_episodes()
    steps = np.flatnonzero(ring_columns(ring).has)  # rows 0, 1, 2 (episode 1) and 4, 5 (episode 2)
    one = gather_transitions(ring_columns(ring), steps, 1, 1, 0.5)
    np.testing.assert_array_equal(one["n_step_returns"], one["rewards"])
    np.testing.assert_array_equal(one["n_step_next_observations"], one["next_observations"])
    np.testing.assert_array_equal(one["n_step_discounts"], 0.5 * ~one["terminations"])
    three = gather_transitions(ring_columns(ring), steps, 1, 3, 0.5)
    np.testing.assert_allclose(three["n_step_returns"], [1 + 1 + 0.75, 2 + 1.5, 3, 11 + 6, 12])
    np.testing.assert_array_equal(three["n_step_next_observations"][:, 0], [3, 3, 3, 12, 12])
    np.testing.assert_array_equal(three["n_step_discounts"], [0.125, 0.25, 0.5, 0.25, 0.5])


def test_termination_gives_no_bootstrap() -> None:
    ring = VectorRingBuffer(1, 8, OBS, ACT, seed=0)
    env = np.array([0])
    ring.start_episodes(env, np.zeros((1, 2)))
    for t, term in ((1, False), (2, True)):
        ring.add(env, np.array([0]), np.array([1.0]), np.array([term]), np.array([False]), np.full((1, 2), t))
    batch = gather_transitions(ring_columns(ring), np.array([0, 1]), 1, 4, 0.9)
    np.testing.assert_allclose(batch["n_step_returns"], [1.9, 1.0])
    np.testing.assert_array_equal(batch["n_step_discounts"], [0.0, 0.0])
    np.testing.assert_array_equal(batch["n_step_next_observations"][:, 0], [2, 2])


@pytest.mark.parametrize("prioritized", [False, True])
def test_bad_nstep_arguments_say_what_to_pass(prioritized: bool) -> None:
    ring = make_ring(prioritized, 1, 16)
    ring.start_episodes(np.array([0]), np.zeros((1, 2)))
    ring.add(np.array([0]), np.array([0]), np.array([1.0]), np.array([False]), np.array([False]), np.ones((1, 2)))
    with pytest.raises(ValueError, match="n_step and gamma go together: pass both"):
        ring.sample(4, n_step=3)
    with pytest.raises(ValueError, match="n_step and gamma go together: pass both"):
        ring.sample(4, gamma=0.99)
    for bad in (0, -2):
        with pytest.raises(ValueError, match=r"n_step must be >= 1"):
            ring.sample(4, n_step=bad, gamma=0.9)
    with pytest.raises(ValueError, match="n_step must be an int"):
        ring.sample(4, n_step=2.5, gamma=0.9)  # type: ignore[arg-type]
    for bad_gamma in (-0.1, 1.5, float("nan"), "0.9", True):
        with pytest.raises(ValueError, match=r"gamma must be .* in \[0, 1\]"):
            ring.sample(4, n_step=3, gamma=bad_gamma)  # type: ignore[arg-type]
    assert ring.sample(4, n_step=3, gamma=np.float32(0.5))["n_step_discounts"].tolist() == [0.5] * 4


@pytest.mark.parametrize(("n", "gamma", "capacity"), [(3, 0.9, 12), (5, 0.99, 7), (1, 0.5, 9)])
def test_nstep_targets_equal_tianshous_compute_nstep_return(n: int, gamma: float, capacity: int) -> None:
    """The same transitions written into Tianshou's VectorReplayBuffer and a ring (both wrapping around, the
    ring's transitions a subset of Tianshou's): vcollect's target equals Tianshou's returns exactly."""
    torch = pytest.importorskip("torch")
    ts = pytest.importorskip("tianshou.data")
    from tianshou.algorithm.algorithm_base import Algorithm

    num_envs, rng = 3, np.random.default_rng(n)
    ring = VectorRingBuffer(num_envs, capacity, OBS, ACT, seed=0)
    buf = ts.VectorReplayBuffer(num_envs * capacity, num_envs)
    to_tianshou: dict[int, int] = {}  # ring row -> Tianshou index of the transition last written there
    obs = rng.normal(size=(num_envs, 2))
    ring.start_episodes(np.arange(num_envs), obs)
    for _ in range(60):
        env = int(rng.integers(num_envs))
        nxt, reward = rng.normal(size=2), float(rng.normal())
        end = rng.random()
        term, trunc = bool(end < 0.08), bool(0.08 <= end < 0.14)
        row = int(ring_columns(ring).last_rows[env])
        ring.add(np.array([env]), np.array([0]), np.array([reward]), np.array([term]), np.array([trunc]), nxt[None])
        ptr, *_ = buf.add(ts.Batch(obs=obs[env][None], act=[0], rew=[reward], terminated=[term], truncated=[trunc],
                                   obs_next=nxt[None], info=[{}]), buffer_ids=[env])
        to_tianshou[row] = int(ptr[0])
        obs[env] = nxt
        if term or trunc:
            obs[env] = rng.normal(size=2)
            ring.start_episodes(np.array([env]), obs[env][None])
    weights = np.array([0.7, -1.3])

    def target_q(buffer: object, indices: np.ndarray) -> object:
        return torch.as_tensor(buffer[indices].obs_next @ weights)  # type: ignore[index]

    rows = np.flatnonzero(ring_columns(ring).has)
    assert rows.size >= 12
    ours = gather_transitions(ring_columns(ring), rows, 1, n, gamma)
    ours_target = ours["n_step_returns"] + ours["n_step_discounts"] * (ours["n_step_next_observations"] @ weights)
    indices = np.array([to_tianshou[r] for r in rows.tolist()])
    np.testing.assert_array_equal(buf[indices].rew, ours["rewards"])  # the mapping pairs the same transitions
    theirs = Algorithm.compute_nstep_return(buf[indices], buf, indices, target_q, gamma=gamma, n_step=n)
    np.testing.assert_array_equal(ours_target, theirs.returns.numpy().reshape(-1))
