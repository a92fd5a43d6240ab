"""ListStore: an in-memory EpisodeSink for collector tests, keeping a copy of every episode it is given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vcollect.spaces import flatten_batch, unflatten_batch


class AnySpace:
    """Stands for 'the envs' spaces, whatever they are' in a test sink that stores any episode."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


@dataclass
class StoredEpisode:
    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    seed: int | None
    env_id: int
    options: dict[str, Any] | None
    infos: Any = None


class ListStore:
    """The EpisodeSink protocol over a list: each batch of episodes is cut into copies of its episodes.

    ``spaces`` (observation, action): the spaces it claims to store; by default any (AnySpace), with the
    episodes cut by the spaces of the first collector that writes (given to ``bind`` by the test, or
    taken from a nested structure when none is bound: flat spaces only)."""

    def __init__(self, observation_space: Any = None, action_space: Any = None) -> None:
        self.observation_space = AnySpace() if observation_space is None else observation_space
        self.action_space = AnySpace() if action_space is None else action_space
        self.episodes: list[StoredEpisode] = []
        self.batches = 0
        self.flushes = 0

    def write_episodes(self, observations, actions, rewards, terminations, truncations, lengths, *, seeds,
                       env_ids, options=None, infos=None) -> None:
        self.batches += 1
        obs_leaves = _leaves(observations)
        act_leaves = _leaves(actions)
        row = step = 0
        for i, length in enumerate(np.asarray(lengths).tolist()):
            self.episodes.append(
                StoredEpisode(
                    _rebuild(observations, [leaf[row : row + length + 1].copy() for leaf in obs_leaves]),
                    _rebuild(actions, [leaf[step : step + length].copy() for leaf in act_leaves]),
                    np.array(rewards[step : step + length]),
                    np.array(terminations[step : step + length]),
                    np.array(truncations[step : step + length]),
                    seeds[i],
                    int(env_ids[i]),
                    None if options is None else options[i],
                    None if infos is None else infos[i],
                )
            )
            row += length + 1
            step += length

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        self.flush()


def _leaves(value: Any) -> list[np.ndarray]:
    """The arrays of a batch (dict/tuple nested or a plain array), depth first, dict keys in order."""
    if isinstance(value, dict):
        return [leaf for key in value for leaf in _leaves(value[key])]
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [np.asarray(value)]


def _rebuild(like: Any, leaves: list[np.ndarray]) -> Any:
    """``like``'s structure with ``leaves`` in place of its arrays."""
    it = iter(leaves)

    def build(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: build(value[key]) for key in value}
        if isinstance(value, tuple):
            return tuple(build(item) for item in value)
        return next(it)

    return build(like)


__all__ = ["AnySpace", "ListStore", "StoredEpisode", "flatten_batch", "unflatten_batch"]
