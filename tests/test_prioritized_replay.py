"""SumTree against a cumulative-sum reference; PrioritizedVectorRingBuffer: proportional draws, importance
weights as Tianshou normalises them, new rows at the largest priority, stale indices ignored."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gs
from hypothesis import given, settings
from hypothesis import strategies as st

import vcollect
from vcollect.buffers import PrioritizedVectorRingBuffer
from vcollect.buffers.ring import ring_columns
from vcollect.buffers.sum_tree import SumTree

OBS = gs.Box(-np.inf, np.inf, (2,), dtype=np.float64)
ACT = gs.Discrete(2)


@settings(max_examples=80, deadline=None)
@given(
    size=st.integers(1, 70),
    updates=st.lists(st.lists(st.tuples(st.integers(0, 69), st.integers(0, 9)), max_size=12), min_size=1, max_size=5),
    queries=st.lists(st.floats(0.0, 1.0, exclude_min=True), min_size=1, max_size=20),
    data=st.data(),
)
def test_sum_tree_prefix_search_matches_cumulative_sums(
    size: int, updates: list[list[tuple[int, int]]], queries: list[float], data: st.DataObject
) -> None:
    fanout = data.draw(st.integers(2, 5), label="fanout")  # several gathered levels even for few leaves
    top_max = data.draw(st.integers(1, 80), label="top_max")  # cumulative sums at the top, levels below it
    tree, plain = SumTree(size, fanout=fanout, top_max=top_max), np.zeros(size)
    for batch in updates:  # integer-valued leaves: every sum is exact, so the answers must be equal
        idx = np.array([i % size for i, _ in batch], dtype=np.intp)
        values = np.array([float(v) for _, v in batch])
        tree.set(idx, values)
        plain[idx] = values  # numpy's last-wins, like the tree's
        np.testing.assert_array_equal(tree.leaves(), plain)
        assert tree.total == plain.sum()
    total = plain.sum()
    if total == 0:
        return
    v = np.array(queries) * total
    want = np.searchsorted(np.cumsum(plain), v, side="left")  # smallest i with prefix_i >= v
    got = tree.find(v)
    np.testing.assert_array_equal(got, want)
    assert (plain[got] > 0).all()
    # sample searches the values sorted and puts the leaves back in the order of the uniforms given
    drawn, leaf = tree.sample(np.array(queries))
    np.testing.assert_array_equal(drawn, want)
    np.testing.assert_array_equal(leaf, plain[want])


def test_sum_tree_tiny_values_beside_large_ones_are_found_and_zeros_never() -> None:
    """At the default layout (groups of 16 under a top of cumulative sums), leaves 2**-28 beside leaves
    2**16 in the same group and in the top's: every sum is exact in float64, so the search must land on
    the tiny leaf for exactly its share of (0, total] and never on the zeros around it."""
    size = 100_000
    tree, plain = SumTree(size), np.zeros(size)
    big, tiny = 2.0**16, 2.0**-28  # sums and quarter-tiny offsets within 53 bits: exact
    for i in (0, 5, 31, 32, 4_000, 99_999):
        plain[i] = big
    for i in (1, 6, 33, 4_001, 99_998):  # right after a big leaf, zeros between some of them
        plain[i] = tiny
    tree.set(np.arange(size), plain)
    cum = np.cumsum(plain)
    assert tree.total == cum[-1]
    for i in np.flatnonzero(plain == tiny):
        before = cum[i] - tiny
        queries = np.array([before + tiny / 4, before + tiny, np.nextafter(before + tiny, np.inf)])
        got = tree.find(queries)
        np.testing.assert_array_equal(got[:2], [i, i])
        assert got[2] == i + 1 + np.flatnonzero(plain[i + 1 :])[0]  # past it: the next nonzero leaf, no zero
    uniform = np.linspace(1.0, 1e-6, 2_000)  # decreasing: the leaves come back in this order, not sorted
    drawn, leaf = tree.sample(uniform.copy())
    np.testing.assert_array_equal(drawn, np.searchsorted(cum, uniform * cum[-1]))
    assert (leaf > 0).all() and (np.diff(drawn) <= 0).all()


def test_sum_tree_bad_size() -> None:
    with pytest.raises(ValueError, match="at least one leaf"):
        SumTree(0)
    with pytest.raises(ValueError, match="fanout"):
        SumTree(8, fanout=1)
    with pytest.raises(ValueError, match="top_max"):
        SumTree(8, top_max=0)
    assert SumTree(100_000).levels == 2 and SumTree(100).levels == 1 and SumTree(10**6).levels == 3


def prio_ring(alpha: float = 1.0, beta: float = 0.5, capacity: int = 8, seed: int = 0, **kw: object
              ) -> PrioritizedVectorRingBuffer:
    ring = PrioritizedVectorRingBuffer(2, capacity, OBS, ACT, alpha=alpha, beta=beta, seed=seed, **kw)  # type: ignore[arg-type]
    ring.start_episodes(np.arange(2), np.zeros((2, 2)))
    return ring


def step(ring: PrioritizedVectorRingBuffer, value: float, done: bool = False) -> None:
    ids = np.arange(2)
    ring.add(ids, np.zeros(2, np.int64), np.ones(2), np.full(2, done), np.zeros(2, bool), np.full((2, 2), value))
    if done:
        ring.start_episodes(ids, np.full((2, 2), value + 0.5))


def test_draws_are_proportional_to_priority_power_alpha() -> None:
    ring = prio_ring(alpha=0.6, capacity=8)
    for t in range(5):
        step(ring, t + 1.0, done=t == 2)  # an episode end: its final row holds no step, never drawn
    first = ring.sample(10)
    rows = np.flatnonzero(ring_columns(ring).has)
    assert set(first["indices"].tolist()) <= set(rows.tolist())
    priorities = np.arange(1, rows.size + 1, dtype=np.float64)
    ring.sample(rows.size * 50)  # every row sampled, so the update below is fresh for all
    assert ring.update_weight(rows, priorities).all()
    n = 200_000
    counts = np.bincount(ring.sample(n)["indices"], minlength=ring_columns(ring).has.size)
    assert counts[~ring_columns(ring).has].sum() == 0
    p = (priorities + np.finfo(np.float32).eps) ** 0.6
    expected = n * p / p.sum()
    # each count within 5 standard deviations of its binomial expectation
    sd = np.sqrt(expected * (1 - p / p.sum()))
    assert (np.abs(counts[rows] - expected) < 5 * sd).all(), (counts[rows], expected)


def test_weights_normalised_by_the_batch_maximum_as_tianshou() -> None:
    ring = prio_ring(alpha=0.7, beta=0.4)
    for t in range(4):
        step(ring, float(t))
    rows = np.flatnonzero(ring_columns(ring).has)
    ring.sample(400)
    ring.update_weight(rows, np.linspace(0.5, 3.0, rows.size))
    batch = ring.sample(64)
    leaf = ring.priorities(batch["indices"])
    np.testing.assert_allclose(batch["weights"], (leaf / leaf.min()) ** -0.4)
    assert batch["weights"].max() == 1.0
    unnormalised = prio_ring(alpha=0.7, beta=0.4, weight_norm=False)
    for t in range(4):
        step(unnormalised, float(t))
    b = unnormalised.sample(16)  # equal priorities: N * P_j = 1
    np.testing.assert_allclose(b["weights"], np.ones(16))


def test_new_rows_get_the_largest_priority_and_stale_indices_are_ignored() -> None:
    ring = prio_ring(alpha=1.0, capacity=4)
    step(ring, 1.0)
    step(ring, 2.0)
    batch = ring.sample(50)
    rows = np.unique(batch["indices"])
    assert rows.size == 4  # 2 steps x 2 envs
    eps = np.finfo(np.float32).eps
    applied = ring.update_weight(rows, np.full(rows.size, 5.0))
    assert applied.all() and ring.max_priority == pytest.approx(5.0 + eps)
    step(ring, 3.0)  # new rows: priority 5 (the largest so far), not 1
    new = np.flatnonzero(ring_columns(ring).has & ~np.isin(np.arange(8), rows))
    np.testing.assert_allclose(ring.priorities(new), 5.0 + eps)
    # sample, then the collector moves on and overwrites the oldest rows (capacity 4)
    sampled = ring.sample(200)["indices"]
    rows_now = np.unique(sampled)
    step(ring, 4.0)
    step(ring, 5.0)
    before = ring.priorities(rows_now)
    applied = ring.update_weight(rows_now, np.full(rows_now.size, 0.25))
    rewritten = np.array([r % 4 in (0, 1) for r in rows_now])  # ring rows 0 and 1 were written again
    np.testing.assert_array_equal(applied, ~rewritten)
    after = ring.priorities(rows_now)
    np.testing.assert_allclose(after[applied], 0.25 + eps)
    np.testing.assert_array_equal(after[~applied], before[~applied])
    # a reset ring: every earlier index is stale
    ring.reset()
    assert not ring.update_weight(rows_now, np.ones(rows_now.size)).any()
    with pytest.raises(ValueError, match="no transitions"):
        ring.sample(1)


def test_update_weight_bad_input_and_torch_priorities() -> None:
    torch = pytest.importorskip("torch")
    ring = prio_ring()
    step(ring, 1.0)
    idx = ring.sample(4)["indices"]
    with pytest.raises(ValueError, match="one per index"):
        ring.update_weight(idx, np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        ring.update_weight(idx, np.full(4, np.nan))
    with pytest.raises(IndexError, match="flat row ids"):
        ring.update_weight(np.array([99]), np.ones(1))
    td = torch.tensor([-2.0, 2.0, 2.0, 2.0], requires_grad=True) * 1.0
    assert ring.update_weight(idx, td).all()
    np.testing.assert_allclose(ring.priorities(idx), 2.0 + np.finfo(np.float32).eps)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedVectorRingBuffer(2, 8, OBS, ACT, alpha=0.0, beta=0.5)
    with pytest.raises(ValueError, match="beta"):
        ring.set_beta(-1.0)


def test_prioritized_ring_with_a_collector_and_stacks() -> None:
    ring = PrioritizedVectorRingBuffer(total_size=800, num_envs=4, alpha=0.6, beta=0.4, seed=1)
    envs = vcollect.make_vector("CartPole-v1", 4, backend="dummy")
    with vcollect.Collector(None, envs, ring, seed=0) as collector:
        collector.collect(n_step=300, random=True, reset_before_collect=True)
    batch = ring.sample(32, stack_num=3)
    assert batch["observations"].shape == (32, 3, 4) and batch["weights"].shape == (32,)
    np.testing.assert_array_equal(batch["observations"][:, -1], ring_columns(ring).obs[0][batch["indices"]])
    assert np.all(ring.priorities(batch["indices"]) == 1.0)  # all new rows at the initial max priority


@pytest.mark.parametrize("mode", ["dummy", "same-step", "next-step"])
def test_every_write_path_gives_step_rows_priority_and_other_rows_none(mode: str) -> None:
    """add (subset loop), add_all (SAME_STEP) and add_steps (NEXT_STEP blocks): after collection wrapping
    the rings many times, a row has priority exactly when it holds a step, the newest at the max."""
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    fns = [lambda: gym.make("CartPole-v1") for _ in range(3)]
    envs = (
        vcollect.DummyVectorEnv(fns) if mode == "dummy"
        else SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP if mode == "same-step" else AutoresetMode.NEXT_STEP)
    )
    ring = PrioritizedVectorRingBuffer(3, 16, alpha=0.5, beta=0.4, seed=0)
    with vcollect.Collector(None, envs, ring, seed=0) as collector:
        collector.collect(n_step=150, random=True, reset_before_collect=True)
        batch = ring.sample(64)
        ring.update_weight(batch["indices"], np.full(64, 4.0))
        collector.collect(n_step=120, random=True)
        leaves = ring.priorities(np.arange(48))
        np.testing.assert_array_equal(leaves > 0, ring_columns(ring).has)
        # 120 steps over 3 rings of 16 rows rewrote every row since the update: all at the new max
        np.testing.assert_allclose(leaves[ring_columns(ring).has], (4.0 + np.finfo(np.float32).eps) ** 0.5)
        assert ring._tree.total == pytest.approx(leaves.sum())
