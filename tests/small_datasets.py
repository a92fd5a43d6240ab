"""Tiny real datasets for the namespace, spec and episode-metadata tests: CartPole-shaped, several shards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vcollect.store import EpisodeStore

OBS_SPACE = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT_SPACE = spaces.Discrete(2)


def make_dataset(
    root: Path,
    dataset_id: str,
    lengths: list[int],
    *,
    episodes_per_shard: int = 2,
    metadata: dict[str, Any] | None = None,
    with_env_spec: bool = True,
    episode_metadata: bool = True,
) -> None:
    """Write episodes of the given lengths (seed 100+i, options on odd ones, ``tag`` metadata), committing a
    shard every ``episodes_per_shard`` episodes."""
    spec = gym.spec("CartPole-v1") if with_env_spec else None
    store = EpisodeStore.create(dataset_id, OBS_SPACE, ACT_SPACE, root=root, env_spec=spec, metadata=metadata)
    rng = np.random.default_rng(len(lengths))
    for i, steps in enumerate(lengths):
        store.write_episode(
            rng.uniform(-1, 1, (steps + 1, 3)).astype(np.float32),
            rng.integers(0, 2, steps),
            np.full(steps, float(i)),
            np.eye(1, steps, steps - 1, dtype=bool)[0],
            np.zeros(steps, dtype=bool),
            seed=100 + i,
            env_id=0,
            options={"level": i} if i % 2 else None,
            metadata={"tag": f"ep{i}"} if episode_metadata else None,
        )
        if (i + 1) % episodes_per_shard == 0:
            store.flush()
    store.close()
