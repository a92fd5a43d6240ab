"""split_dataset takes episode counts or fractions summing to 1 (largest-remainder rounding, as the CLI's
percentages), and refuses anything else with TypeError or ValueError; no empty view unless asked for."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from vcollect.store import EpisodeStore, load_dataset, split_dataset
from vcollect.store.transforms import largest_remainder_counts, split_sizes


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=6), st.integers(1, 10_000))
def test_fractions_round_by_largest_remainder(weights: list[int], total: int) -> None:
    """Against the plain rule with exact fractions: floors, then one more for the largest remainders (shares
    whose exact remainders tie may take the extra episode in either order)."""
    if sum(weights) == 0:
        weights = [1, *weights[1:]]
    shares = [w / sum(weights) for w in weights]
    got = largest_remainder_counts(shares, total)
    exact = [Fraction(w, sum(weights)) * total for w in weights]
    floors = [int(e) for e in exact]
    assert sum(got) == total
    assert all(n - f in (0, 1) for n, f in zip(got, floors))
    bumped = [e - f for e, f, n in zip(exact, floors, got) if n > f]
    kept = [e - f for e, f, n in zip(exact, floors, got) if n == f]
    assert not bumped or not kept or min(bumped) >= max(kept)


@pytest.fixture(scope="module")
def ten(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("split")
    with EpisodeStore.create("s/ten-v0", spaces.Box(-1.0, 1.0, (1,), np.float32), spaces.Discrete(2),
                             root=root) as store:
        for seed in range(10):
            store.write_episode(np.zeros((3, 1), np.float32), np.zeros(2, np.int64), np.ones(2),
                                np.array([False, True]), np.zeros(2, bool), seed=seed, env_id=0)
    return root


def test_fractions_split_every_episode(ten: Path) -> None:
    ds = load_dataset("s/ten-v0", root=ten)
    parts = split_dataset(ds, [0.8, 0.2], seed=0)
    assert [len(p) for p in parts] == [8, 2]
    assert sorted(np.concatenate([p.episode_indices for p in parts]).tolist()) == list(range(10))
    assert [len(p) for p in split_dataset(ds, [0.5, 0.25, 0.25])] == [5, 3, 2]
    assert [len(p) for p in split_dataset(ds, np.array([7, 3]))] == [7, 3]
    assert [len(p) for p in split_dataset(ds, [3, 0])] == [3, 0]  # an empty part asked for by count
    assert split_sizes([0.25, 0.25, 0.5], 10) == [3, 2, 5]


@pytest.mark.parametrize(
    ("sizes", "error", "match"),
    [
        ([0.8, 0.1], ValueError, "sum to 1"),
        ([0.95, 0.05, 0.0], ValueError, "empty part"),
        ([0.99, 0.01], ValueError, "empty part"),
        ([8, 0.2], TypeError, "all be episode counts"),
        ([True, False], TypeError, "all be episode counts"),
        (["8", "2"], TypeError, "all be episode counts"),
        ([800.0, 200.0], TypeError, "fractions of the episodes"),
        ("82", TypeError, "sequence"),
        (8, TypeError, "sequence"),
        ([], TypeError, "all be episode counts"),
        ([-1, 2], ValueError, "non-negative"),
        ([6, 6], ValueError, "more than the 10 episodes"),
    ],
)
def test_bad_sizes_are_refused(ten: Path, sizes: object, error: type[Exception], match: str) -> None:
    ds = load_dataset("s/ten-v0", root=ten)
    with pytest.raises(error, match=match):
        split_dataset(ds, sizes)  # type: ignore[arg-type]
