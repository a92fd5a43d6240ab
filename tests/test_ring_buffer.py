"""Tests of VectorRingBuffer against a plain-Python list-of-rows reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gs
from hypothesis import event, given, settings
from hypothesis import strategies as st

from vcollect.buffers import EpisodeSlice, VectorRingBuffer
from vcollect.buffers.ring import RingWriter, ring_columns
from vcollect.held_rows import HeldRows
from vcollect.spaces import flatten_batch, leaves, unflatten_batch

# ------------------------------------------------------------------------------------ configurations
# Observations are made from a global counter, so every observation is unique and a sampled
# transition can be matched exactly against the reference.


@dataclass(frozen=True)
class Config:
    name: str
    obs_space: gym.Space
    act_space: gym.Space

    def obs_leaves(self, c: int) -> list[np.ndarray]:
        if self.name == "plain":
            return [np.array([c, -c, 0.5 * c, 1.0], np.float32)]
        return [  # in leaves() order
            np.array(c, np.int64),  # "u": Discrete(10**9): the unique part
            np.array(c % 7 - 3, np.int64),  # "t/0": Discrete(7, start=-3)
            np.array([c % 2, (c // 2) % 2], np.int8),  # "t/1": MultiBinary(2)
            np.array([c % 3, c % 4], np.int64),  # "t/2": MultiDiscrete([3, 4])
            np.array([c, -c], np.float64),  # "pos"
        ]

    def act_leaves(self, a: int) -> list[np.ndarray]:
        if self.name == "plain":
            return [np.array(a % 2, np.int64)]
        return [
            np.array(a % 3 + 1, np.int64),
            np.array([a % 2, a % 3], np.int64),
            np.array([a / 100], np.float32),
        ]


PLAIN = Config("plain", gs.Box(-np.inf, np.inf, (4,), dtype=np.float32), gs.Discrete(2))
NESTED = Config(
    "nested",
    gs.Dict(
        [
            ("u", gs.Discrete(10**9)),
            (
                "t",
                gs.Tuple((gs.Discrete(7, start=-3), gs.MultiBinary(2), gs.MultiDiscrete([3, 4]))),
            ),
            ("pos", gs.Box(-np.inf, np.inf, (2,), dtype=np.float64)),
        ]
    ),
    gs.Tuple((gs.Discrete(3, start=1), gs.MultiDiscrete([2, 3]), gs.Box(-1.0, 1.0, (1,), dtype=np.float32))),
)


def batch_of(space: gym.Space, rows: list[list[np.ndarray]]) -> Any:
    """Nested batch (leading axis = len(rows)) from per-row leaf lists."""
    return unflatten_batch(space, [np.stack([r[i] for r in rows]) for i in range(len(leaves(space)))])


# -------------------------------------------------------------------------------------- reference


@dataclass
class Row:
    obs: list[np.ndarray]
    step: tuple[list[np.ndarray], float, bool, bool] | None = None


@dataclass
class RefEnv:
    rows: list[Row] = field(default_factory=list)
    start: int | None = None  # index in rows of the current episode's first row


class Reference:
    """Every row ever written per env, in order; the ring keeps the last `capacity` of them."""

    def __init__(self, num_envs: int, capacity: int, keep_overflow: bool) -> None:
        self.capacity, self.keep_overflow = capacity, keep_overflow
        self.envs = [RefEnv() for _ in range(num_envs)]

    def start(self, env: int, obs: list[np.ndarray]) -> None:
        ref = self.envs[env]
        ref.rows.append(Row(obs))
        ref.start = len(ref.rows) - 1

    def add(
        self, env: int, act: list[np.ndarray], rew: float, term: bool, trunc: bool, obs: list[np.ndarray]
    ) -> None:
        ref = self.envs[env]
        ref.rows[-1].step = (act, rew, term, trunc)
        ref.rows.append(Row(obs))

    def in_ring(self, env: int) -> list[Row]:
        return self.envs[env].rows[-self.capacity :]

    def transitions(self) -> list[tuple[Row, Row]]:
        out = []
        for env in range(len(self.envs)):
            rows = self.in_ring(env)
            out += [(rows[i], rows[i + 1]) for i in range(len(rows) - 1) if rows[i].step is not None]
        return out

    def episode(self, env: int) -> tuple[list[Row], bool]:
        ref = self.envs[env]
        assert ref.start is not None
        whole = ref.rows[ref.start :]
        if self.keep_overflow or len(whole) <= self.capacity:
            return whole, False
        return whole[-self.capacity :], True


def key(leaf_values: list[np.ndarray]) -> tuple:
    return tuple(np.asarray(v).tobytes() for v in leaf_values)


def check_against_reference(
    buf: VectorRingBuffer, ref: Reference, cfg: Config, rng: np.random.Generator
) -> None:
    transitions = ref.transitions()
    assert len(buf) == len(transitions)
    for env, renv in enumerate(ref.envs):
        if renv.start is None:
            with pytest.raises(ValueError):
                buf.episode(env)
            continue
        rows, truncated = ref.episode(env)
        ep = buf.episode(env)
        assert isinstance(ep, EpisodeSlice)
        steps = rows[:-1]
        assert all(r.step is not None for r in steps) and rows[-1].step is None
        obs = flatten_batch(cfg.obs_space, ep.observations)
        for i, arr in enumerate(obs):
            np.testing.assert_array_equal(arr, np.stack([r.obs[i] for r in rows]))
        acts = flatten_batch(cfg.act_space, ep.actions)
        for i, arr in enumerate(acts):
            assert arr.shape[0] == len(steps)
            if steps:
                np.testing.assert_array_equal(arr, np.stack([r.step[0][i] for r in steps]))  # type: ignore[index]
        np.testing.assert_array_equal(ep.rewards, np.array([r.step[1] for r in steps], np.float64))  # type: ignore[index]
        np.testing.assert_array_equal(ep.terminations, np.array([r.step[2] for r in steps], bool))  # type: ignore[index]
        np.testing.assert_array_equal(ep.truncations, np.array([r.step[3] for r in steps], bool))  # type: ignore[index]
        assert ep.rewards.dtype == np.float64 and ep.terminations.dtype == bool
        assert RingWriter(buf).episode_truncated_in_ring(env) == truncated
        whole = renv.rows[renv.start :]
        assert buf.episode_lengths[env] == len(whole) - 1
        expected_return = 0.0
        for r in whole[:-1]:
            expected_return += r.step[1]  # type: ignore[index]
        assert buf.episode_returns[env] == expected_return
        last = flatten_batch(cfg.obs_space, RingWriter(buf).last_obs(np.array([env])))
        assert key([a[0] for a in last]) == key(renv.rows[-1].obs)

    if not transitions:
        with pytest.raises(ValueError):
            buf.sample(4, rng)
        return
    allowed = {
        (key(a.obs), key(a.step[0]), a.step[1], a.step[2], a.step[3], key(b.obs))  # type: ignore[index]
        for a, b in transitions
    }
    batch = buf.sample(16, rng)
    assert set(batch) == {
        "observations",
        "actions",
        "rewards",
        "next_observations",
        "terminations",
        "truncations",
        "dones",
        "indices",
        "extras",
    }
    assert batch["extras"] == {}  # no episode-done hook wrote any
    np.testing.assert_array_equal(batch["dones"], batch["terminations"] | batch["truncations"])
    obs = flatten_batch(cfg.obs_space, batch["observations"])
    nxt = flatten_batch(cfg.obs_space, batch["next_observations"])
    acts = flatten_batch(cfg.act_space, batch["actions"])
    for j in range(16):
        got = (
            key([a[j] for a in obs]),
            key([a[j] for a in acts]),
            batch["rewards"][j],
            batch["terminations"][j],
            batch["truncations"][j],
            key([a[j] for a in nxt]),
        )
        assert got in allowed


# --------------------------------------------------------------------------------- property test


def draw_steps(data: st.DataObject, cfg: Config, n: int) -> tuple[list[Any], list[float], list[bool], list[bool]]:
    """Action rows, rewards, terminations and truncations for n env ids."""
    act_rows = [cfg.act_leaves(data.draw(st.integers(0, 50), label="action")) for _ in range(n)]
    rewards = data.draw(st.lists(st.floats(-10, 10, allow_nan=False), min_size=n, max_size=n), label="r")
    terms = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="term")
    truncs = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="trunc")
    return act_rows, rewards, terms, truncs


def numbered_obs(cfg: Config, first: int, n: int) -> list[Any]:
    """n observation rows numbered first, first + 1, ... (every row of a test distinct)."""
    return [cfg.obs_leaves(first + i) for i in range(n)]

# Mostly steps, so that episodes often outgrow the tiny rings (several times over) before restarting.
op = st.tuples(
    st.sampled_from(["add"] * 24 + ["start"] * 5 + ["reset"]),
    st.permutations([0, 1, 2]).flatmap(lambda p: st.integers(1, 3).map(lambda k: p[:k])),
)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    cfg=st.sampled_from([PLAIN, NESTED]),
    num_envs=st.integers(1, 3),
    capacity=st.integers(2, 6),
    keep_overflow=st.booleans(),
    ops=st.lists(op, min_size=15, max_size=50),
)
def test_ring_buffer_matches_list_of_rows_reference(
    data: st.DataObject, cfg: Config, num_envs: int, capacity: int, keep_overflow: bool, ops: list
) -> None:
    buf = VectorRingBuffer(num_envs, capacity, cfg.obs_space, cfg.act_space, keep_overflow=keep_overflow)
    ref = Reference(num_envs, capacity, keep_overflow)
    rng = np.random.default_rng(0)
    counter = longest = 0
    for kind, ids in ops:
        ids = [e for e in ids if e < num_envs]
        if kind == "reset":
            buf.reset()
            ref = Reference(num_envs, capacity, keep_overflow)
            check_against_reference(buf, ref, cfg, rng)
            continue
        if kind == "add":
            ids = [e for e in ids if ref.envs[e].start is not None]
        if not ids:
            continue
        obs_rows = numbered_obs(cfg, counter + 1, len(ids))
        counter += len(ids)
        if kind == "start":
            buf.start_episodes(np.array(ids), batch_of(cfg.obs_space, obs_rows))
            for e, o in zip(ids, obs_rows):
                ref.start(e, o)
        else:
            act_rows, rewards, terms, truncs = draw_steps(data, cfg, len(ids))
            buf.add(
                np.array(ids),
                batch_of(cfg.act_space, act_rows),
                np.array(rewards, np.float64),
                np.array(terms, bool),
                np.array(truncs, bool),
                batch_of(cfg.obs_space, obs_rows),
            )
            for e, a, r, te, tr, o in zip(ids, act_rows, rewards, terms, truncs, obs_rows):
                ref.add(e, a, r, te, tr, o)
        check_against_reference(buf, ref, cfg, rng)
        longest = max(longest, *(len(r.rows) - r.start for r in ref.envs if r.start is not None))
    event("episode outgrew the ring" if longest > capacity else "episodes fit the ring")
    event(f"keep_overflow={keep_overflow}, longest episode > 2 rings: {longest > 2 * capacity}")


all_op = st.tuples(
    st.sampled_from(["all"] * 20 + ["add"] * 3 + ["start"] * 3 + ["reset"]),
    st.lists(st.booleans(), min_size=3, max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    cfg=st.sampled_from([PLAIN, NESTED]),
    num_envs=st.integers(1, 3),
    capacity=st.integers(2, 6),
    keep_overflow=st.booleans(),
    pass_mask=st.booleans(),
    ops=st.lists(all_op, min_size=15, max_size=50),
)
def test_add_all_matches_list_of_rows_reference(
    data: st.DataObject,
    cfg: Config,
    num_envs: int,
    capacity: int,
    keep_overflow: bool,
    pass_mask: bool,
    ops: list,
) -> None:
    """add_all (every env steps, the `started` ones restart instead) against the reference's add/start per
    env, mixed with per-subset add and start_episodes; with and without the optional `stepped` mask."""
    buf = VectorRingBuffer(num_envs, capacity, cfg.obs_space, cfg.act_space, keep_overflow=keep_overflow)
    ref = Reference(num_envs, capacity, keep_overflow)
    rng = np.random.default_rng(0)
    counter = 0
    for kind, flags in ops:
        picked = [e for e in range(num_envs) if flags[e]]
        if kind == "reset":
            buf.reset()
            ref = Reference(num_envs, capacity, keep_overflow)
            check_against_reference(buf, ref, cfg, rng)
            continue
        if kind == "add":
            picked = [e for e in picked if ref.envs[e].start is not None]
        if kind == "all":  # envs without an episode must start one; `picked` ones restart
            picked = [e for e in range(num_envs) if flags[e] or ref.envs[e].start is None]
            ids = list(range(num_envs))
        else:
            ids = picked
        if not ids:
            continue
        obs_rows = numbered_obs(cfg, counter + 1, len(ids))
        counter += len(ids)
        if kind == "start":
            buf.start_episodes(np.array(ids), batch_of(cfg.obs_space, obs_rows))
            for e, o in zip(ids, obs_rows):
                ref.start(e, o)
            check_against_reference(buf, ref, cfg, rng)
            continue
        act_rows, rewards, terms, truncs = draw_steps(data, cfg, len(ids))
        batch = (
            batch_of(cfg.act_space, act_rows),
            np.array(rewards, np.float64),
            np.array(terms, bool),
            np.array(truncs, bool),
            batch_of(cfg.obs_space, obs_rows),
        )
        if kind == "add":
            buf.add(np.array(ids), *batch)
        else:
            started = np.array(picked, dtype=np.int64)
            stepped = np.ones(num_envs, bool)
            stepped[started] = False
            buf.add_all(*batch, started=started, stepped=stepped if pass_mask else None)
        for i, e in enumerate(ids):
            if kind == "all" and e in picked:
                ref.start(e, obs_rows[i])
            else:
                ref.add(e, act_rows[i], rewards[i], terms[i], truncs[i], obs_rows[i])
        check_against_reference(buf, ref, cfg, rng)


# ------------------------------------------------------------------------------ example-based tests


def plain_buffer(num_envs: int = 2, capacity: int = 5, keep_overflow: bool = False) -> VectorRingBuffer:
    return VectorRingBuffer(num_envs, capacity, PLAIN.obs_space, PLAIN.act_space, keep_overflow=keep_overflow)


def step_all(buf: VectorRingBuffer, ids: np.ndarray, value: float, done: bool = False) -> None:
    k = len(ids)
    buf.add(
        ids,
        np.zeros(k, np.int64),
        np.full(k, value),
        np.full(k, done),
        np.zeros(k, bool),
        np.full((k, 4), value, np.float32),
    )


def test_invalid_construction() -> None:
    with pytest.raises(ValueError, match="capacity"):
        plain_buffer(capacity=1)
    with pytest.raises(ValueError, match="num_envs"):
        plain_buffer(num_envs=0)
    with pytest.raises(TypeError):
        VectorRingBuffer(1, 4, gs.Sequence(gs.Discrete(3)), gs.Discrete(2))


def test_contiguous_episode_is_a_view_and_wrapped_one_a_copy() -> None:
    buf = plain_buffer(num_envs=1, capacity=5)
    ids = np.array([0])
    buf.start_episodes(ids, np.zeros((1, 4), np.float32))
    step_all(buf, ids, 1.0)
    step_all(buf, ids, 2.0, done=True)
    ep = buf.episode(0)
    cols = ring_columns(buf)
    assert np.shares_memory(ep.observations, cols.obs[0]) and np.shares_memory(ep.rewards, cols.rewards)
    np.testing.assert_array_equal(ep.observations[:, 0], [0.0, 1.0, 2.0])
    # The next episode starts in row 3 and wraps after row 4.
    buf.start_episodes(ids, np.full((1, 4), 10.0, np.float32))
    step_all(buf, ids, 11.0)
    step_all(buf, ids, 12.0)
    ep = buf.episode(0)
    np.testing.assert_array_equal(ep.observations[:, 0], [10.0, 11.0, 12.0])
    np.testing.assert_array_equal(ep.rewards, [11.0, 12.0])
    assert not np.shares_memory(ep.observations, cols.obs[0])
    assert len(buf) == 3  # row 0 (first step of the first episode) was overwritten by obs 12; row 1 remains


def test_keep_overflow_returns_whole_long_episode_and_drops_it_on_restart() -> None:
    cap = 4
    buf = plain_buffer(num_envs=2, capacity=cap, keep_overflow=True)
    short = plain_buffer(num_envs=2, capacity=cap, keep_overflow=False)
    ids = np.array([1, 0])
    for b in (buf, short):
        b.start_episodes(ids, np.zeros((2, 4), np.float32))
    n = 3 * cap + 2
    for t in range(1, n + 1):
        for b in (buf, short):
            step_all(b, ids, float(t), done=t == n)
    for env in (0, 1):
        ep = buf.episode(env)
        np.testing.assert_array_equal(ep.observations[:, 0], np.arange(n + 1, dtype=np.float32))
        np.testing.assert_array_equal(ep.rewards, np.arange(1, n + 1, dtype=np.float64))
        np.testing.assert_array_equal(ep.terminations, np.arange(1, n + 1) == n)
        assert not RingWriter(buf).episode_truncated_in_ring(env)
        cut = short.episode(env)
        np.testing.assert_array_equal(cut.observations[:, 0], np.arange(n + 1 - cap, n + 1, dtype=np.float32))
        np.testing.assert_array_equal(cut.rewards, np.arange(n + 2 - cap, n + 1, dtype=np.float64))
        assert RingWriter(short).episode_truncated_in_ring(env)
        assert buf.episode_lengths[env] == short.episode_lengths[env] == n
        assert buf.episode_returns[env] == short.episode_returns[env] == sum(range(1, n + 1))
    assert set(buf._overflow) == {0, 1}
    buf.start_episodes(np.array([0]), np.full((1, 4), -1.0, np.float32))
    assert set(buf._overflow) == {1}
    np.testing.assert_array_equal(buf.episode(0).observations[:, 0], [-1.0])
    assert buf.episode_lengths[0] == 0 and buf.episode_returns[0] == 0.0
    assert len(buf.episode(1).rewards) == n  # env 1 keeps its finished episode


def test_errors_for_envs_without_episode_and_empty_buffer() -> None:
    buf = plain_buffer()
    with pytest.raises(ValueError, match="no episode"):
        buf.episode(0)
    with pytest.raises(IndexError):
        buf.episode(5)
    with pytest.raises(ValueError, match="no episode"):
        RingWriter(buf).last_obs(np.array([0]))
    with pytest.raises(ValueError, match="no transitions"):
        buf.sample(3, np.random.default_rng(0))
    buf.start_episodes(np.array([1]), np.ones((1, 4), np.float32))
    assert len(buf) == 0
    with pytest.raises(ValueError, match="no transitions"):
        buf.sample(3, np.random.default_rng(0))
    step_all(buf, np.array([1]), 2.0)
    assert len(buf) == 1
    s = buf.sample(5, np.random.default_rng(0))
    np.testing.assert_array_equal(s["observations"][:, 0], np.ones(5))
    np.testing.assert_array_equal(s["next_observations"][:, 0], np.full(5, 2.0))
    buf.reset()
    assert len(buf) == 0 and buf.episode_lengths[1] == 0
    with pytest.raises(ValueError):
        buf.episode(1)


def test_cartpole_episodes_match_a_recorded_rollout() -> None:
    num_envs, cap = 4, 64
    envs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    buf = VectorRingBuffer(num_envs, cap, envs[0].observation_space, envs[0].action_space, keep_overflow=True)
    rng = np.random.default_rng(3)
    ids = np.arange(num_envs)
    first = np.stack([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    buf.start_episodes(ids, first)
    recorded: list[dict[str, list]] = [{"obs": [first[i]], "act": [], "rew": []} for i in range(num_envs)]
    finished = 0
    while finished < 12:
        acts = rng.integers(0, 2, num_envs)
        results = [env.step(int(a)) for env, a in zip(envs, acts)]
        nobs = np.stack([r[0] for r in results])
        rews = np.array([r[1] for r in results], np.float64)
        terms = np.array([r[2] for r in results])
        truncs = np.array([r[3] for r in results])
        buf.add(ids, acts, rews, terms, truncs, nobs)
        for i in range(num_envs):
            recorded[i]["obs"].append(nobs[i])
            recorded[i]["act"].append(acts[i])
            recorded[i]["rew"].append(rews[i])
        done = np.flatnonzero(terms | truncs)
        for i in done:
            ep = buf.episode(int(i))
            np.testing.assert_array_equal(ep.observations, np.stack(recorded[i]["obs"]))
            np.testing.assert_array_equal(ep.actions, np.array(recorded[i]["act"]))
            np.testing.assert_array_equal(ep.rewards, np.array(recorded[i]["rew"]))
            assert ep.terminations[-1] or ep.truncations[-1]
            assert buf.episode_lengths[i] == len(recorded[i]["act"])
            finished += 1
        if done.size:
            fresh = np.stack([envs[i].reset()[0] for i in done])
            buf.start_episodes(done, fresh)
            for j, i in enumerate(done):
                recorded[i] = {"obs": [fresh[j]], "act": [], "rew": []}
    for env in envs:
        env.close()


@settings(max_examples=80, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    capacity=st.integers(2, 8),
    episodes=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 9)), min_size=1, max_size=14),
)
def test_gather_episodes_equals_the_episode_slices_while_their_rows_are_in_the_ring(
    num_envs: int, capacity: int, episodes: list[tuple[int, int]]
) -> None:
    """Episodes run one after another on random envs; every finished episode whose rows are still in its
    ring (its env wrote at most capacity - T - 1 rows since) is gathered in one call and compared with the
    copy of episode() taken when it finished (a plain reference: per-episode slicing)."""
    buf = VectorRingBuffer(num_envs, capacity, PLAIN.obs_space, PLAIN.act_space)
    written = [0] * num_envs  # rows each env has written so far
    finished = []  # (env, ref, rows written at finish, episode copy)
    value = 0.0
    for env, steps in episodes:
        env %= num_envs
        ids = np.array([env])
        value += 1
        buf.start_episodes(ids, np.full((1, 4), value, np.float32))
        written[env] += 1
        for t in range(steps):
            value += 1
            buf.add(ids, np.array([t % 2]), np.array([value]), np.array([t == steps - 1]), np.array([False]),
                    np.full((1, 4), value, np.float32))
            written[env] += 1
        ref = RingWriter(buf).episode_ref(env)
        assert (ref is None) == (steps + 1 > capacity)
        if ref is not None:
            ep = buf.episode(env)
            copy = (ep.observations.copy(), ep.actions.copy(), ep.rewards.copy(), ep.terminations.copy())
            finished.append((env, ref, written[env], copy))
    safe = [f for f in finished if written[f[0]] - f[2] <= capacity - f[1][1] - 1]
    if not safe:
        return
    obs, acts, rew, term, trunc = RingWriter(buf).gather_episodes(
        np.array([f[0] for f in safe]), np.array([f[1][0] for f in safe]), np.array([f[1][1] for f in safe])
    )
    np.testing.assert_array_equal(obs[0], np.concatenate([f[3][0] for f in safe]))
    np.testing.assert_array_equal(acts[0], np.concatenate([f[3][1] for f in safe]))
    np.testing.assert_array_equal(rew, np.concatenate([f[3][2] for f in safe]))
    np.testing.assert_array_equal(term, np.concatenate([f[3][3] for f in safe]))
    assert not trunc.any()


# ------------------------------------------------------------------------------- add_steps (blocks)


def ring_state(buf: VectorRingBuffer) -> list[np.ndarray]:
    """Every array that makes up a ring buffer's contents and positions."""
    cols = ring_columns(buf)
    return [
        *cols.obs, *cols.act, cols.rewards, cols.terminations, cols.truncations, cols.has, cols.last_rows, cols.has_episode,
        buf.episode_lengths, buf.episode_returns,
    ]


@settings(max_examples=120, deadline=None)
@given(
    data=st.data(),
    cfg=st.sampled_from([PLAIN, NESTED]),
    num_envs=st.integers(1, 4),
    capacity=st.integers(2, 7),
    keep_overflow=st.booleans(),
    blocks=st.integers(1, 6),
    held=st.booleans(),
)
def test_add_steps_equals_add_all_step_by_step(
    data: st.DataObject, cfg: Config, num_envs: int, capacity: int, keep_overflow: bool, blocks: int, held: bool
) -> None:
    """add_steps(k steps) leaves the buffer exactly as k add_all calls do (wrapping rings, env positions
    aligned or not, nested spaces) and reports the episodes that ended as they end step by step: env id,
    the episode_ref handle (last row, steps) and its return. Integer rewards, so that every sum is exact.
    ``held``: the observations come as HeldRows (a backend's own arrays, one per step) instead of stacked."""
    blocked = VectorRingBuffer(num_envs, capacity, cfg.obs_space, cfg.act_space, keep_overflow=keep_overflow)
    stepwise = VectorRingBuffer(num_envs, capacity, cfg.obs_space, cfg.act_space, keep_overflow=keep_overflow)
    counter = 0
    all_ids = np.arange(num_envs)
    first = numbered_obs(cfg, counter, num_envs)
    counter += num_envs
    for buf in (blocked, stepwise):
        buf.start_episodes(all_ids, batch_of(cfg.obs_space, first))
    done_before = np.zeros(num_envs, bool)
    for _ in range(blocks):
        late = sorted(data.draw(st.sets(st.integers(0, num_envs - 1)), label="restarted apart"))
        if late:  # some envs start an episode on their own: their rows move out of line with the others'
            obs = numbered_obs(cfg, counter, len(late))
            counter += len(late)
            for buf in (blocked, stepwise):
                buf.start_episodes(np.array(late), batch_of(cfg.obs_space, obs))
            done_before[late] = False
        k = data.draw(st.integers(1, capacity), label="k")
        if k >= capacity:  # more steps than a ring holds at once
            event("add_steps refused: k too large")
            no_steps = np.zeros((k, num_envs), bool)
            with pytest.raises(ValueError, match="capacity - 1"):
                RingWriter(blocked).add_steps([], np.zeros((k, num_envs)), no_steps, no_steps, [], no_steps)
            continue
        acts = [[cfg.act_leaves(data.draw(st.integers(0, 50))) for _ in range(num_envs)] for _ in range(k)]
        rewards = np.array(data.draw(st.lists(st.integers(-9, 9), min_size=k * num_envs, max_size=k * num_envs)), np.float64)
        rewards = rewards.reshape(k, num_envs)
        # ends and extra restarts are rare enough that episodes outgrow small rings (keep_overflow spills)
        rare = st.sampled_from([False, False, False, False, True])
        terms = np.array(data.draw(st.lists(rare, min_size=k * num_envs, max_size=k * num_envs))).reshape(k, num_envs)
        truncs = np.array(data.draw(st.lists(rare, min_size=k * num_envs, max_size=k * num_envs))).reshape(k, num_envs)
        extra = np.array(data.draw(st.lists(rare, min_size=k * num_envs, max_size=k * num_envs))).reshape(k, num_envs)
        # an env that was done restarts in the next step (NEXT_STEP); others may restart too
        restarts = extra.copy()
        restarts[0] |= done_before
        restarts[1:] |= (terms | truncs)[:-1]
        done_before = (terms | truncs)[-1]
        obs = [numbered_obs(cfg, counter + j * num_envs, num_envs) for j in range(k)]
        counter += k * num_envs
        expected = []  # (step, env id, last row, steps, return) as add_all leaves them
        ended_data: list[list[np.ndarray]] = []  # keep_overflow: each ended episode's data, whole
        for j in range(k):
            started = np.flatnonzero(restarts[j])
            stepwise.add_all(
                batch_of(cfg.act_space, acts[j]), rewards[j], terms[j], truncs[j], batch_of(cfg.obs_space, obs[j]),
                started=started,
            )
            for e in np.flatnonzero((terms[j] | truncs[j]) & ~restarts[j]).tolist():
                ref = RingWriter(stepwise).episode_ref(e)
                last_row, steps = (int(ring_columns(stepwise).last_rows[e]), int(stepwise.episode_lengths[e])) if ref is None else ref
                expected.append((j, e, last_row, steps, float(stepwise.episode_returns[e])))
                if keep_overflow:  # whole, however long: what the block must hand over for it
                    ended_data.append(episode_leaves(cfg, stepwise.episode(e)))
        cols = ring_columns(blocked).last_rows % capacity
        event("env rows in line" if (cols == cols[0]).all() else "env rows out of line")
        act_block = [
            np.stack([flatten_batch(cfg.act_space, batch_of(cfg.act_space, acts[j]))[i] for j in range(k)])
            for i in range(len(leaves(cfg.act_space)))
        ]
        obs_rows = [
            [np.array(flatten_batch(cfg.obs_space, batch_of(cfg.obs_space, obs[j]))[i]) for j in range(k)]
            for i in range(len(leaves(cfg.obs_space)))
        ]
        obs_block = [HeldRows(rows) if held else np.stack(rows) for rows in obs_rows]
        ends = RingWriter(blocked).add_steps(act_block, rewards, terms, truncs, obs_block, restarts)
        got = list(
            zip(ends.steps.tolist(), ends.env_ids.tolist(), ends.last_rows.tolist(), ends.lengths.tolist(), ends.returns.tolist())
        )
        assert got == expected
        np.testing.assert_array_equal(ends.mask, (terms | truncs) & ~restarts)
        for a, b in zip(ring_state(blocked), ring_state(stepwise)):
            np.testing.assert_array_equal(a, b)
        if keep_overflow:
            # every ended episode is whole: the spilled steps the block hands over, then its rows in the ring
            if ends.spilled:
                event("an episode that ended in the block had spilled")
            for i, want in enumerate(ended_data):
                env, last_row, steps = int(ends.env_ids[i]), int(ends.last_rows[i]), int(ends.lengths[i])
                chunks = ends.spilled.get(i)
                if chunks is None:
                    got_data = RingWriter(blocked).gather_episodes(np.array([env]), np.array([last_row]), np.array([steps]))
                else:
                    got_data = RingWriter(blocked).gather_spilled_episode(env, last_row, steps - ends.spilled_steps(i), chunks)
                assert_leaves_equal(flat_data(got_data), want)
            for e in range(num_envs):  # and so is every episode still running
                if ring_columns(blocked).has_episode[e] and ring_columns(stepwise).has_episode[e]:
                    assert_leaves_equal(episode_leaves(cfg, blocked.episode(e)), episode_leaves(cfg, stepwise.episode(e)))


def flat_data(data: tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]) -> list[np.ndarray]:
    obs, acts, rew, term, trunc = data
    return [*obs, *acts, rew, term, trunc]


def episode_leaves(cfg: Config, episode: Any) -> list[np.ndarray]:
    """An EpisodeSlice's arrays, copied, in gather_episodes' flat order."""
    return [
        *(np.array(a) for a in flatten_batch(cfg.obs_space, episode.observations)),
        *(np.array(a) for a in flatten_batch(cfg.act_space, episode.actions)),
        np.array(episode.rewards), np.array(episode.terminations), np.array(episode.truncations),
    ]


def assert_leaves_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_add_steps_refuses_an_end_without_its_restart() -> None:
    """add_steps' contract: an env done in step j restarts in step j + 1 (NEXT_STEP); anything else is a
    clear error, not a silently lost episode end."""
    buf = plain_buffer(num_envs=2, capacity=6)
    buf.start_episodes(np.arange(2), np.zeros((2, 4), np.float32))
    k = 3
    terms = np.zeros((k, 2), bool)
    terms[0, 1] = True
    with pytest.raises(ValueError, match="restart"):
        RingWriter(buf).add_steps(
            [np.zeros((k, 2), np.int64)], np.zeros((k, 2)), terms, np.zeros((k, 2), bool),
            [np.zeros((k, 2, 4), np.float32)], np.zeros((k, 2), bool),
        )


def test_add_steps_gives_spilled_steps_only_to_the_episode_they_belong_to() -> None:
    """Regression (found by the property test): env 0's episode spills, is dropped by a restart of its own
    (no end) and a new episode ends in the same block. The new episode is handed over alone; the spilled
    steps of the dropped one go nowhere, as add_all step by step leaves them."""
    n, c, k = 2, 5, 3
    blocked = plain_buffer(num_envs=n, capacity=c, keep_overflow=True)
    stepwise = plain_buffer(num_envs=n, capacity=c, keep_overflow=True)
    obs_id = iter(range(1000))

    def obs(rows: int) -> np.ndarray:
        return np.array([[[next(obs_id)] * 4 for _ in range(n)] for _ in range(rows)], np.float32)

    first = obs(1)[0]
    for buf in (blocked, stepwise):
        buf.start_episodes(np.arange(n), first)
    no = np.zeros((k, n), bool)
    for steps, truncs, restarts in (
        (2, np.zeros((2, n), bool), np.zeros((2, n), bool)),  # env 0: 2 steps, the block after spills them
        (k, np.array([[0, 0], [0, 0], [1, 0]], bool), np.array([[0, 0], [1, 0], [0, 0]], bool)),
    ):
        o, acts, rew = obs(steps), np.zeros((steps, n), np.int64), np.ones((steps, n))
        for j in range(steps):
            stepwise.add_all(acts[j], rew[j], no[j], truncs[j], o[j], started=np.flatnonzero(restarts[j]))
        ends = RingWriter(blocked).add_steps([acts], rew, no[:steps], truncs, [o], restarts)
    assert ends.env_ids.tolist() == [0] and ends.lengths.tolist() == [1] and ends.spilled == {}
    got = RingWriter(blocked).gather_episodes(ends.env_ids, ends.last_rows, ends.lengths)
    np.testing.assert_array_equal(got[0][0], np.asarray(stepwise.episode(0).observations))


def test_unfinished_names_the_envs_whose_episode_has_steps_and_has_not_ended() -> None:
    ring = VectorRingBuffer(6, 8, observation_space=gs.Box(-1, 1, (2,), np.float32), action_space=gs.Discrete(2))
    obs = np.zeros((5, 2), np.float32)
    ring.start_episodes(np.arange(5), obs)  # env 5 never starts
    one = np.zeros(1, np.float32)
    step = {"actions": np.zeros(1, np.int64), "rewards": one, "next_obs": np.zeros((1, 2), np.float32)}
    no, yes = np.zeros(1, bool), np.ones(1, bool)
    ring.add(np.array([0]), terminations=no, truncations=no, **step)  # running, one step
    ring.add(np.array([2]), terminations=yes, truncations=no, **step)  # ended by termination
    ring.add(np.array([3]), terminations=no, truncations=yes, **step)  # ended by truncation
    ring.add(np.array([4]), terminations=yes, truncations=no, **step)
    ring.start_episodes(np.array([4]), obs[:1])  # ended, then restarted: no step yet
    assert ring.unfinished().tolist() == [0]  # env 1: started, no step; env 5: no episode
    ring.add(np.array([4]), terminations=no, truncations=no, **step)
    assert ring.unfinished().tolist() == [0, 4]
