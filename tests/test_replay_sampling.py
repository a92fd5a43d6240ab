"""Replay sampling from the rings: seeded draws, indices, frame stacks against a plain reference (episode
edges, ring wrap-around), Tianshou's stacking, spaceless rings bound by a Collector."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gs
from hypothesis import given, settings
from hypothesis import strategies as st

import vcollect
from vcollect.buffers import PrioritizedVectorRingBuffer, VectorRingBuffer
from vcollect.buffers.ring import ring_columns
from vcollect.buffers.sampling import gather_transitions
from vcollect.errors import BufferNotReadyError

OBS = gs.Box(-np.inf, np.inf, (2,), dtype=np.float64)
ACT = gs.Discrete(3)


class RefRing:
    """Plain reference: every row each env ever wrote, in order, as (obs value, episode number, is a step)."""

    def __init__(self, num_envs: int, capacity: int) -> None:
        self.capacity = capacity
        self.rows: list[list[list]] = [[] for _ in range(num_envs)]  # [obs, episode, step]
        self.episodes = 0

    def start(self, env: int, obs: float) -> None:
        self.episodes += 1
        self.rows[env].append([obs, self.episodes, False])

    def add(self, env: int, obs: float) -> None:
        self.rows[env][-1][2] = True
        self.rows[env].append([obs, self.rows[env][-1][1], False])

    def write_number(self, env: int, pos: int) -> int:
        """The write number of the row now at ring position ``pos`` of ``env``."""
        total = len(self.rows[env])
        last_pos = (total - 1) % self.capacity
        return total - 1 - (last_pos - pos) % self.capacity

    def stack(self, env: int, w: int, k: int) -> list[float]:
        """Observations w-k+1 .. w, clamped to the episode's first row still in the ring."""
        rows = self.rows[env]
        oldest = max(0, len(rows) - self.capacity)
        first = w
        while first - 1 >= oldest and rows[first - 1][1] == rows[w][1]:
            first -= 1
        return [rows[max(w - j, first)][0] for j in range(k - 1, -1, -1)]


@settings(max_examples=60, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    capacity=st.integers(2, 7),
    ops=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=40),
    data=st.data(),
)
def test_stacks_match_reference_at_episode_edges_and_wrap_around(
    num_envs: int, capacity: int, ops: list[tuple[int, bool]], data: st.DataObject
) -> None:
    ring = VectorRingBuffer(num_envs, capacity, OBS, ACT, seed=0)
    ref = RefRing(num_envs, capacity)
    counter = 0
    for env in range(num_envs):
        counter += 1
        ring.start_episodes(np.array([env]), np.full((1, 2), counter, np.float64))
        ref.start(env, counter)
    for env, done in ops:
        env %= num_envs
        counter += 1
        ring.add(np.array([env]), np.array([counter % 3]), np.array([1.0]), np.array([done]), np.array([False]),
                 np.full((1, 2), counter, np.float64))
        ref.add(env, counter)
        if done:
            counter += 1
            ring.start_episodes(np.array([env]), np.full((1, 2), counter, np.float64))
            ref.start(env, counter)
    steps = np.flatnonzero(ring_columns(ring).has)
    if steps.size == 0:
        with pytest.raises(ValueError, match="no transitions"):
            ring.sample(4)
        return
    k = data.draw(st.integers(1, capacity), label="stack_num")
    batch = gather_transitions(ring_columns(ring), steps, k)  # every step row at once
    assert np.array_equal(batch["indices"], steps)
    obs, nxt = batch["observations"], batch["next_observations"]
    assert obs.shape == nxt.shape == ((len(steps), k, 2) if k > 1 else (len(steps), 2))
    for i, row in enumerate(steps.tolist()):
        env, pos = divmod(row, capacity)
        w = ref.write_number(env, pos)
        assert ref.rows[env][w][2]  # the ring's step rows are the reference's steps still in the ring
        want, want_next = ref.stack(env, w, k), ref.stack(env, w + 1, k)
        got = obs[i].reshape(k, 2)[:, 0] if k > 1 else obs[i][:1]
        got_next = nxt[i].reshape(k, 2)[:, 0] if k > 1 else nxt[i][:1]
        assert got.tolist() == want, (row, k)
        assert got_next.tolist() == want_next, (row, k)
    # and every step row of the reference still in the ring is a step row of the ring
    in_ring = sum(
        1 for env in range(num_envs) for r in ref.rows[env][-capacity:][:-1] if r[2]
    )
    assert in_ring == len(steps) == len(ring)
    # sample(0): every step still in the ring, env by env, each env's in the order it was written
    every = ring.sample(0)
    want = [r[0] for env in range(num_envs) for r in ref.rows[env][-capacity:][:-1] if r[2]]
    assert every["observations"][:, 0].tolist() == want


def filled_ring(num_envs: int = 2, capacity: int = 16, steps: int = 40, seed: int | None = 0) -> VectorRingBuffer:
    """A ring of episodes of 5 steps per env, observations numbered (env * 1000 + write number)."""
    ring = VectorRingBuffer(num_envs, capacity, OBS, ACT, seed=seed)
    ids = np.arange(num_envs)
    ring.start_episodes(ids, np.stack([np.full(2, e * 1000.0) for e in ids]))
    for t in range(1, steps + 1):
        done = np.full(num_envs, t % 5 == 0)
        ring.add(ids, np.zeros(num_envs, np.int64), np.ones(num_envs), done, np.zeros(num_envs, bool),
                 np.stack([np.full(2, e * 1000.0 + 2 * t - 1) for e in ids]))
        if done[0]:
            ring.start_episodes(ids, np.stack([np.full(2, e * 1000.0 + 2 * t) for e in ids]))
    return ring


def test_sample_uses_the_rings_seeded_generator_unless_one_is_given() -> None:
    a, b, c = filled_ring(seed=7), filled_ring(seed=7), filled_ring(seed=8)
    first = a.sample(64)
    assert np.array_equal(first["indices"], b.sample(64)["indices"])
    assert not np.array_equal(first["indices"], c.sample(64)["indices"])
    assert not np.array_equal(first["indices"], a.sample(64)["indices"])  # the generator moves on
    given_rng = a.sample(64, np.random.default_rng(3))["indices"]
    assert np.array_equal(given_rng, c.sample(64, np.random.default_rng(3))["indices"])
    batch = a.sample(32)
    rows = batch["indices"]
    cols = ring_columns(a)
    np.testing.assert_array_equal(batch["observations"], cols.obs[0][rows])
    np.testing.assert_array_equal(batch["next_observations"], cols.obs[0][cols.next_rows[rows]])
    assert batch["dones"].any() and not batch["dones"].all()


@pytest.mark.parametrize("capacity", [16, 400, 5000])  # full; a tenth full; under 1/32 full (listed)
def test_uniform_draws_over_step_rows(capacity: int) -> None:
    """Redrawn candidates keep the draw uniform over the step rows (chi-square over all of them)."""
    ring = filled_ring(num_envs=3, capacity=capacity, steps=40)
    steps = np.flatnonzero(ring_columns(ring).has)
    n = 60_000
    counts = np.bincount(ring.sample(n)["indices"], minlength=ring_columns(ring).has.size)
    assert counts[~ring_columns(ring).has].sum() == 0
    expected = n / steps.size
    chi2 = float(((counts[steps] - expected) ** 2 / expected).sum())
    dof = steps.size - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof), chi2


def test_bad_stack_num_and_batch_size() -> None:
    ring = filled_ring(capacity=8)
    for bad in (0, -1, 9):
        with pytest.raises(ValueError, match="stack_num"):
            ring.sample(4, stack_num=bad)
    for bad in (-1, 2.5):
        with pytest.raises(ValueError, match="batch_size"):
            ring.sample(bad)  # type: ignore[arg-type]
    assert ring.sample(4, stack_num=8)["observations"].shape == (4, 8, 2)


def test_observation_stacks_equal_tianshous() -> None:
    """Tianshou's ReplayBuffer(stack_num=k) holding the same episodes stacks the same observations."""
    ts = pytest.importorskip("tianshou.data")
    k, lengths = 4, [1, 2, 6, 3, 5]
    ring = VectorRingBuffer(1, 64, OBS, ACT)
    buf = ts.ReplayBuffer(64, stack_num=k)
    counter, rows = 0, []
    for length in lengths:
        ring.start_episodes(np.array([0]), np.full((1, 2), float(counter)))
        for t in range(length):
            done = t == length - 1
            rows.append(int(ring_columns(ring).last_rows[0]))
            buf.add(ts.Batch(obs=np.full(2, float(counter)), act=0, rew=1.0, terminated=done, truncated=False,
                             obs_next=np.full(2, counter + 1.0), info={}))
            ring.add(np.array([0]), np.array([0]), np.array([1.0]), np.array([done]), np.array([False]),
                     np.full((1, 2), counter + 1.0))
            counter += 1
        counter += 1
    ours = gather_transitions(ring_columns(ring), np.array(rows), k)
    theirs = buf[np.arange(len(rows))]
    np.testing.assert_array_equal(ours["observations"], theirs.obs)
    np.testing.assert_array_equal(ours["dones"], theirs.done)


def test_spaceless_ring_gets_the_collectors_spaces() -> None:
    ring = VectorRingBuffer(total_size=1001, num_envs=4, seed=0)
    assert ring.capacity == 251 and not ring.has_spaces  # ceil(total_size / num_envs), as Tianshou
    with pytest.raises(BufferNotReadyError, match="without spaces"):
        ring.sample(4)
    with pytest.raises(BufferNotReadyError, match="bind_spaces"):
        len(ring)
    with pytest.raises(ValueError, match="exactly one"):
        VectorRingBuffer(4, 10, total_size=40)
    with pytest.raises(ValueError, match="both"):
        VectorRingBuffer(4, 10, OBS)
    envs = vcollect.make_vector("CartPole-v1", 4, backend="dummy")
    with vcollect.Collector(None, envs, ring, seed=0) as collector:
        collector.collect(n_step=200, random=True, reset_before_collect=True)
        assert ring.observation_space == envs.single_observation_space
        assert len(ring) > 0 and ring.sample(8)["observations"].shape == (8, 4)
    with pytest.raises(ValueError, match="already has its spaces"):
        ring.bind_spaces(OBS, ACT)


@pytest.mark.parametrize("prioritized", [False, True])
def test_every_use_of_a_spaceless_ring_but_its_binding_says_it_needs_spaces(prioritized: bool) -> None:
    """Writes, reads and checkpoints of a ring (plain or prioritized) made without spaces raise
    BufferNotReadyError naming what to do, whichever of its storage they touch first."""
    ring = (PrioritizedVectorRingBuffer(total_size=40, num_envs=4, alpha=0.6, beta=0.4) if prioritized
            else VectorRingBuffer(total_size=40, num_envs=4))
    ids, obs, flags = np.arange(4), np.zeros((4, 2)), np.zeros(4, bool)
    uses = [
        lambda: len(ring), lambda: ring.sample(2), lambda: ring.sample(0), lambda: ring.sample_slices(2, 3),
        lambda: ring.start_episodes(ids, obs), lambda: ring.add(ids, np.zeros(4, np.int64), np.ones(4), flags, flags, obs),
        lambda: ring.add_all(np.zeros(4, np.int64), np.ones(4), flags, flags, obs), lambda: ring.episode(0),
        lambda: ring.reset(), lambda: ring.extras,
    ]
    if prioritized:
        assert isinstance(ring, PrioritizedVectorRingBuffer)
        uses += [lambda: ring.priorities(np.arange(2)), lambda: ring.update_weight(np.arange(2), np.ones(2))]
    for use in uses:
        with pytest.raises(BufferNotReadyError, match="without spaces.*bind_spaces"):
            use()
    ring.bind_spaces(gs.Box(-1, 1, (2,)), gs.Discrete(2))
    ring.start_episodes(ids, obs)
    ring.add_all(np.zeros(4, np.int64), np.ones(4), flags, flags, obs)
    assert len(ring) == 4 and ring.episode_lengths.tolist() == [1] * 4


def test_async_collector_binds_a_spaceless_ring_too() -> None:
    ring = VectorRingBuffer(total_size=400, num_envs=2)
    envs = vcollect.make_vector("CartPole-v1", 2, backend="dummy")
    with vcollect.AsyncCollector(None, envs, ring, seed=0) as collector:
        stats = collector.collect(n_step=50, random=True, reset_before_collect=True)
    assert stats.n_collected_steps == 50 and len(ring) == 50
    assert isinstance(ring.action_space, gym.spaces.Discrete)


def test_sample_zero_is_every_transition_in_tianshous_order() -> None:
    """sample(0) gives every stored transition, as Tianshou's sample(0) (what its on-policy updates read):
    the same transitions in the same order as its VectorReplayBuffer holding them, and with weights from
    the prioritized ring."""
    ts = pytest.importorskip("tianshou.data")
    num_envs, rng = 3, np.random.default_rng(0)
    ring = VectorRingBuffer(num_envs, 64, OBS, ACT)
    prioritized = vcollect.PrioritizedVectorRingBuffer(num_envs, 64, OBS, ACT, alpha=0.6, beta=0.4)
    theirs = ts.VectorReplayBuffer(num_envs * 64, num_envs)
    with pytest.raises(ValueError, match="no transitions"):
        ring.sample(0)
    obs = np.arange(num_envs, dtype=np.float64) * 1000
    for buffer in (ring, prioritized):
        buffer.start_episodes(np.arange(num_envs), np.repeat(obs[:, None], 2, axis=1))
    for t in range(1, 30):
        env = int(rng.integers(num_envs))  # one env steps at a time, in a random interleaving
        done = bool(rng.random() < 0.2)
        nxt = obs[env] + 1
        for buffer in (ring, prioritized):
            buffer.add(np.array([env]), np.array([t % 3]), np.array([float(t)]), np.array([done]), np.array([False]),
                       np.full((1, 2), nxt))
        theirs.add(ts.Batch(obs=np.full((1, 2), obs[env]), act=[t % 3], rew=[float(t)], terminated=[done],
                            truncated=[False], obs_next=np.full((1, 2), nxt), info=[{}]), buffer_ids=[env])
        obs[env] = nxt + 1 if done else nxt
        if done:
            for buffer in (ring, prioritized):
                buffer.start_episodes(np.array([env]), np.full((1, 2), obs[env]))
    want, _ = theirs.sample(0)
    for buffer in (ring, prioritized):
        got = buffer.sample(0)
        np.testing.assert_array_equal(got["observations"], want.obs)
        np.testing.assert_array_equal(got["next_observations"], want.obs_next)
        np.testing.assert_array_equal(got["rewards"], want.rew)
        np.testing.assert_array_equal(got["actions"], want.act)
    assert np.all(prioritized.sample(0)["weights"] == 1.0)  # fresh rows: every priority the same


def test_indexing_gives_the_sampled_transitions_and_refuses_rows_without_one() -> None:
    """ring[batch["indices"]] (Tianshou's buffer[indices]) gives the same transitions the batch holds; a
    row holding no transition, or an index outside the ring, is a clear IndexError."""
    ring = filled_ring(capacity=8)
    batch = ring.sample(16, stack_num=1)
    again = ring[batch["indices"]]
    for key in ("observations", "actions", "rewards", "next_observations", "terminations", "truncations", "indices"):
        np.testing.assert_array_equal(again[key], batch[key], err_msg=key)
    newest = int(ring_columns(ring).last_rows[0])  # the env's newest observation: no transition from it yet
    with pytest.raises(IndexError, match=rf"rows \[{newest}\] hold no transition"):
        ring[np.array([int(batch["indices"][0]), newest])]
    for bad in (np.array([-1]), np.array([ring.num_envs * ring.capacity]), np.array([0.5])):
        with pytest.raises(IndexError, match="flat row ids"):
            ring[bad]
