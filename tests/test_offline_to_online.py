"""Offline-to-online: rings preloaded from a dataset hold exactly its episodes as step-by-step writes would,
dataset n-step targets equal a ring's, and MixedSampler mixes the two at the ratio asked, under the ring's keys."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import vcollect
from tests.small_datasets import ACT_SPACE, OBS_SPACE, make_dataset
from vcollect.buffers import PrioritizedVectorRingBuffer, VectorRingBuffer
from vcollect.buffers.ring import RingWriter, ring_columns
from vcollect.buffers.sampling import gather_transitions
from vcollect.errors import EpisodeIndexError, RingInUseError, SliceLengthError, SpaceMismatchError

LENGTHS = [5, 17, 3, 30, 8, 1, 12, 21, 9, 4, 26, 6]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> vcollect.Dataset:
    root = tmp_path_factory.mktemp("o2o")
    make_dataset(root, "o2o/data-v0", LENGTHS, episodes_per_shard=5)  # three shards
    return vcollect.load_dataset("o2o/data-v0", root=root)


def make_ring(prioritized: bool, capacity: int) -> VectorRingBuffer:
    if prioritized:
        return PrioritizedVectorRingBuffer(3, capacity, OBS_SPACE, ACT_SPACE, alpha=0.7, beta=0.5, seed=1)
    return VectorRingBuffer(3, capacity, OBS_SPACE, ACT_SPACE, seed=1)


def written_step_by_step(dataset: vcollect.Dataset, ids: list[int], prioritized: bool, capacity: int) -> VectorRingBuffer:
    """The reference: each episode started, stepped and given up, episode i in env ring i % 3."""
    ring = make_ring(prioritized, capacity)
    for i, episode in enumerate(dataset.iterate_episodes(ids)):
        env = np.array([i % 3])
        ring.start_episodes(env, episode.observations[:1])
        for t in range(len(episode)):
            ring.add(env, episode.actions[t : t + 1], episode.rewards[t : t + 1], episode.terminations[t : t + 1],
                     episode.truncations[t : t + 1], episode.observations[t + 1 : t + 2])
        RingWriter(ring).abandon_episodes(env)
    return ring


def rows_of(batch: dict, n: int) -> np.ndarray:
    """One float row per transition (observation, next observation, action, reward, flags), for set comparisons."""
    return np.column_stack([batch["observations"], batch["next_observations"], batch["actions"], batch["rewards"],
                            batch["terminations"], batch["truncations"]]).astype(np.float64)[:n]


def sorted_rows(rows: np.ndarray) -> np.ndarray:
    return rows[np.lexsort(rows.T[::-1])]


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize(("capacity", "ids"), [(80, None), (25, None), (60, [7, 0, 3, 11, 4])])
def test_a_preloaded_ring_equals_the_datasets_episodes_written_step_by_step(
    dataset: vcollect.Dataset, prioritized: bool, capacity: int, ids: list[int] | None
) -> None:
    ring = make_ring(prioritized, capacity)
    ring.extend_from(dataset, ids)
    ids = list(range(dataset.total_episodes)) if ids is None else ids
    reference = written_step_by_step(dataset, ids, prioritized, capacity)
    if isinstance(ring, PrioritizedVectorRingBuffer) and isinstance(reference, PrioritizedVectorRingBuffer):
        ring._sync()
        reference._sync()
        np.testing.assert_array_equal(ring._tree.leaves(), reference._tree.leaves())
    step_rows = ring_columns(reference).has
    np.testing.assert_array_equal(ring_columns(ring).has, step_rows)
    for name, value in reference._row_arrays().items():
        if name.startswith("act/") or name in ("rewards", "terminations", "truncations"):
            # a row holding no step keeps whatever step an earlier lap of the ring left there: not compared
            np.testing.assert_array_equal(ring._row_arrays()[name][step_rows], value[step_rows], err_msg=name)
        else:
            np.testing.assert_array_equal(ring._row_arrays()[name], value, err_msg=name)
    assert not ring.unfinished().size
    if capacity == 80:  # everything fits: the ring's transitions are the dataset's
        every = ring.sample(0)
        steps = dataset.steps_at(np.arange(dataset.total_steps))
        assert len(every["rewards"]) == dataset.total_steps
        np.testing.assert_array_equal(sorted_rows(rows_of(every, dataset.total_steps)),
                                      sorted_rows(rows_of(steps, dataset.total_steps)))


def test_preloading_refuses_other_spaces_running_episodes_and_what_is_no_dataset(dataset: vcollect.Dataset) -> None:
    other = VectorRingBuffer(3, 50, gym.spaces.Box(-1.0, 1.0, (4,), np.float32), ACT_SPACE)
    with pytest.raises(SpaceMismatchError, match=r"observation space Box\(-1.0, 1.0, \(3,\), float32\) differs from "
                       r"the ring's observation space Box\(-1.0, 1.0, \(4,\), float32\)"):
        other.extend_from(dataset)
    running = make_ring(False, 50)
    running.start_episodes(np.array([1]), np.zeros((1, 3), np.float32))
    with pytest.raises(RingInUseError, match=r"envs \[1\] have episodes running"):
        running.extend_from(dataset)
    with pytest.raises(TypeError, match="vcollect Dataset"):
        make_ring(False, 50).extend_from([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(EpisodeIndexError):
        make_ring(False, 50).extend_from(dataset, [99])
    unbound = VectorRingBuffer(3, total_size=300)  # a ring made without spaces takes the dataset's
    unbound.extend_from(dataset)
    assert unbound.observation_space == OBS_SPACE and len(unbound) == dataset.total_steps


def test_dataset_n_step_targets_equal_a_rings_on_the_same_transitions(dataset: vcollect.Dataset) -> None:
    ring = make_ring(False, 80)
    ring.extend_from(dataset)
    every = ring.sample(0)
    steps = dataset.steps_at(np.arange(dataset.total_steps), n_step=4, gamma=0.9)
    # the ring's rows in the dataset's order: matched by their (unique, random) observations
    ring_order = np.lexsort(every["observations"].T[::-1])
    data_order = np.lexsort(steps["observations"].T[::-1])
    rows = np.empty(dataset.total_steps, dtype=np.intp)
    rows[data_order] = every["indices"][ring_order]
    expected = gather_transitions(ring_columns(ring), rows, 1, 4, 0.9)
    np.testing.assert_array_equal(steps["observations"], expected["observations"])
    for key in ("n_step_returns", "n_step_next_observations", "n_step_discounts"):
        np.testing.assert_array_equal(steps[key], expected[key], err_msg=key)
    with pytest.raises(ValueError, match="n_step and gamma go together"):
        dataset.sample_steps(4, n_step=3)


@pytest.mark.parametrize("prioritized", [False, True])
def test_mixed_batches_have_the_rings_keys_and_shapes_and_real_rows_of_each_source(
    dataset: vcollect.Dataset, tmp_path: Path, prioritized: bool
) -> None:
    ring = make_ring(prioritized, 80)
    ring.extend_from(dataset, [0, 2, 4, 6, 8, 10])
    mixed = vcollect.MixedSampler(ring, dataset, ratio=0.5, seed=7)
    batch = mixed.sample(256, n_step=3, gamma=0.9)
    alone = ring.sample(256, n_step=3, gamma=0.9)
    assert sorted(batch) == sorted([*alone, "source"])
    for key, value in alone.items():
        if isinstance(value, np.ndarray):
            assert batch[key].shape == value.shape and batch[key].dtype == value.dtype, key
    online, offline = batch["source"] == 0, batch["source"] == 1
    assert online.any() and offline.any() and np.all(np.diff(batch["source"].astype(int)) >= 0)  # ring rows first
    assert (batch["indices"][offline] == -1).all()
    again = ring[batch["indices"][online]]
    np.testing.assert_array_equal(batch["observations"][online], again["observations"])
    every = rows_of(dataset.steps_at(np.arange(dataset.total_steps)), dataset.total_steps)
    known = {row.tobytes() for row in every}
    assert all(row.tobytes() in known for row in rows_of(batch, 256)[offline])
    np.testing.assert_array_equal(batch["dones"], batch["terminations"] | batch["truncations"])
    if prioritized:
        assert (batch["weights"][offline] == 1.0).all() and (batch["weights"][online] <= 1.0).all()
    same = vcollect.MixedSampler(ring, dataset, ratio=0.5, seed=7).sample(256, n_step=3, gamma=0.9)
    np.testing.assert_array_equal(same["n_step_returns"], batch["n_step_returns"])  # one seed, one batch


def test_the_offline_share_is_binomial_at_the_ratio_or_exact(dataset: vcollect.Dataset) -> None:
    ring = make_ring(False, 80)
    ring.extend_from(dataset, [1, 3, 5])
    mixed = vcollect.MixedSampler(ring, dataset, ratio=0.3, seed=11)
    counts = np.array([int(mixed.sample(256)["source"].sum()) for _ in range(200)])
    n = 256 * 200
    assert abs(counts.sum() - 0.3 * n) < 4 * np.sqrt(n * 0.3 * 0.7)  # total: Binomial(51200, 0.3)
    assert abs(counts.var() - 256 * 0.3 * 0.7) < 0.35 * 256 * 0.3 * 0.7  # per batch: Binomial(256, 0.3)'s spread
    exact = vcollect.MixedSampler(ring, dataset, ratio=0.3, exact=True, seed=11)
    assert {int(exact.sample(256)["source"].sum()) for _ in range(20)} == {77}
    only_ring = vcollect.MixedSampler(ring, dataset, ratio=0.0).sample(64)
    only_data = vcollect.MixedSampler(ring, dataset, ratio=1.0).sample(64)
    assert not only_ring["source"].any() and only_data["source"].all()
    assert only_data["observations"].shape == only_ring["observations"].shape == (64, 3)
    with pytest.raises(ValueError, match="ratio is the share of offline rows"):
        vcollect.MixedSampler(ring, dataset, ratio=1.5)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        mixed.sample(0)
    other = VectorRingBuffer(3, 50, OBS_SPACE, gym.spaces.Discrete(3))
    with pytest.raises(SpaceMismatchError, match=r"action space Discrete\(2\) differs from the ring's action space "
                       r"Discrete\(3\)"):
        vcollect.MixedSampler(other, dataset)


@pytest.mark.parametrize("prioritized", [False, True])
def test_mixed_slices_have_the_rings_slice_keys_and_real_windows_of_each_source(
    dataset: vcollect.Dataset, prioritized: bool
) -> None:
    ring = make_ring(prioritized, 80)
    ring.extend_from(dataset, [0, 2, 4, 6, 8, 10])
    mixed = vcollect.MixedSampler(ring, dataset, ratio=0.5, seed=7)
    batch = mixed.sample_slices(64, 4, pad="both", gamma=0.9)
    alone = ring.sample_slices(64, 4, pad="both", gamma=0.9)
    assert sorted(batch) == sorted([*alone, "source"])
    for key, value in alone.items():
        if isinstance(value, np.ndarray):
            assert batch[key].shape == value.shape and batch[key].dtype == value.dtype, key
    online, offline = batch["source"] == 0, batch["source"] == 1
    assert online.any() and offline.any() and np.all(np.diff(batch["source"].astype(int)) >= 0)  # ring first
    assert (batch["indices"][offline] == -1).all()
    np.testing.assert_array_equal(batch["dones"], batch["terminations"] | batch["truncations"])
    # each window is the one its source gives at (episode_ids, start_indices): the dataset's by slices_at, the
    # ring's by its rows (padded rows -1)
    again = dataset.slices_at(batch["episode_ids"][offline], batch["start_indices"][offline], 4, gamma=0.9)
    for key in ("observations", "next_observations", "actions", "rewards", "mask", "timesteps", "returns_to_go"):
        np.testing.assert_array_equal(batch[key][offline], again[key], err_msg=key)
    rows = batch["indices"][online]
    real = batch["mask"][online]
    assert ((rows >= 0) == real).all()
    np.testing.assert_array_equal(batch["observations"][online][real], ring[rows[real]]["observations"])
    if prioritized:
        assert (batch["weights"][offline] == 1.0).all() and (batch["weights"][online] <= 1.0).all()
    same = vcollect.MixedSampler(ring, dataset, ratio=0.5, seed=7).sample_slices(64, 4, pad="both", gamma=0.9)
    np.testing.assert_array_equal(same["returns_to_go"], batch["returns_to_go"])  # one seed, one batch


@pytest.mark.parametrize("prioritized", [False, True])
def test_mixed_slices_as_views_equal_copies(dataset: vcollect.Dataset, prioritized: bool) -> None:
    """``stacks="view"`` goes to both sources (no TypeError): the same batch as ``"copy"`` from the same seed,
    element for element, padded windows included, observations read-only."""
    ring = make_ring(prioritized, 80)
    ring.extend_from(dataset, [0, 2, 4, 6, 8, 10])
    for pad in ("none", "both"):
        copy = vcollect.MixedSampler(ring, dataset, ratio=0.5, seed=3).sample_slices(48, 4, pad=pad, gamma=0.9)
        view = vcollect.MixedSampler(ring, dataset, ratio=0.5, seed=3).sample_slices(48, 4, pad=pad, gamma=0.9,
                                                                                      stacks="view")
        assert list(view) == list(copy) and view["source"].any() and not view["source"].all()
        for key, value in copy.items():
            if key != "extras":
                np.testing.assert_array_equal(view[key], value, err_msg=key)
        assert not view["observations"].flags.writeable and not view["next_observations"].flags.writeable
        assert copy["observations"].flags.writeable


def test_mixed_slices_split_at_the_ratio_and_take_an_empty_batch(dataset: vcollect.Dataset) -> None:
    ring = make_ring(False, 80)
    ring.extend_from(dataset, [1, 3, 5])
    mixed = vcollect.MixedSampler(ring, dataset, ratio=0.3, seed=11)
    counts = np.array([int(mixed.sample_slices(64, 3, pad="end")["source"].sum()) for _ in range(200)])
    n = 64 * 200
    assert abs(counts.sum() - 0.3 * n) < 4 * np.sqrt(n * 0.3 * 0.7)  # total: Binomial(12800, 0.3)
    exact = vcollect.MixedSampler(ring, dataset, ratio=0.3, exact=True, seed=11)
    assert {int(exact.sample_slices(64, 3)["source"].sum()) for _ in range(10)} == {19}
    empty = mixed.sample_slices(0, 3)
    assert empty["observations"].shape == (0, 3, 3) and empty["source"].shape == (0,)
    only_data = vcollect.MixedSampler(VectorRingBuffer(3, 50, OBS_SPACE, ACT_SPACE), dataset, ratio=1.0)
    assert only_data.sample_slices(8, 2)["source"].all()  # the empty ring is asked for no window
    with pytest.raises(SliceLengthError, match="the longest"):
        mixed.sample_slices(8, 31)  # no episode of either source holds 31 steps
    with pytest.raises(TypeError):
        mixed.sample_slices(8, 2, stack_num=2)  # the dataset takes no stack_num


def test_slices_after_a_preload_see_the_preloaded_episodes(dataset: vcollect.Dataset) -> None:
    ring = make_ring(False, 80)
    ring.extend_from(dataset, [1])  # 17 steps in env ring 0
    assert set(ring.sample_slices(50, 2, seed=0)["episode_ids"].tolist()) == {0}
    ring.extend_from(dataset, [3, 10])  # 30 steps in env ring 0 after the first, 26 in env ring 1
    starts = ring.sample_slices(400, 20, seed=0)["episode_ids"]
    assert set(starts.tolist()) == {18, 80}  # the windows of 20 steps: only the two new episodes hold them
