"""Small real datasets for the dataset-page tests: a CartPole-shaped one, one of image observations (so an
episode's video comes from its stored frames) and one without a namespace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gymnasium import spaces
from small_datasets import make_dataset

from vcollect.store import EpisodeStore

#: Episode lengths of each dataset.
CARTPOLE_ID, CARTPOLE_LENGTHS = "cartpole/small-v0", [5, 9, 3, 12, 7, 9]
FRAMES_ID, FRAMES_LENGTHS = "pixels/frames-v0", [20, 8, 14]
LOOSE_ID, LOOSE_LENGTHS = "loose-v0", [4, 4]
FRAME_SHAPE = (24, 32, 3)


def frames_returns() -> list[float]:
    """The returns of FRAMES_ID's episodes (rewards 0.5 * step index)."""
    return [float(0.5 * np.arange(length).sum()) for length in FRAMES_LENGTHS]


def make_view_root(root: Path) -> Path:
    """Write the three datasets under ``root``; returns it."""
    make_dataset(root, CARTPOLE_ID, CARTPOLE_LENGTHS, episodes_per_shard=2)
    make_dataset(root, LOOSE_ID, LOOSE_LENGTHS, with_env_spec=False)
    rng = np.random.default_rng(0)
    with EpisodeStore.create(FRAMES_ID, spaces.Box(0, 255, FRAME_SHAPE, np.uint8), spaces.Discrete(3), root=root,
                             metadata={"author": "view tests"}) as store:
        for i, steps in enumerate(FRAMES_LENGTHS):
            store.write_episode(
                rng.integers(0, 256, (steps + 1, *FRAME_SHAPE), dtype=np.uint8),
                rng.integers(0, 3, steps),
                0.5 * np.arange(steps, dtype=np.float64),
                np.arange(steps) == steps - 1,
                np.zeros(steps, dtype=bool),
                seed=10 + i,
                env_id=0,
            )
    return root
