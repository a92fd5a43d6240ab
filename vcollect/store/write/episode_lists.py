"""Episodes given as per-step lists (the fields of Minari's EpisodeBuffer): made into arrays of the dataset's
spaces, all checked before anything is written, then written through an EpisodeStore."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from vcollect.spaces import batch_contains, flatten_batch, leaves
from vcollect.store.write.writer import EpisodeStore

__all__ = ["CheckedEpisode", "EpisodeLists", "append_episode_lists", "check_episode_lists", "write_episode_lists"]


class EpisodeLists(Protocol):
    """One episode as per-step lists: T+1 observations and T actions (Dict/Tuple spaces as dicts and tuples
    of lists), T rewards, terminations and truncations, the infos (one row per reset and step), and the
    reset's id, seed and options."""

    @property
    def id(self) -> int | None: ...

    @property
    def seed(self) -> int | None: ...

    @property
    def options(self) -> dict[str, Any] | None: ...

    @property
    def observations(self) -> Any: ...

    @property
    def actions(self) -> Any: ...

    @property
    def rewards(self) -> Sequence[Any]: ...

    @property
    def terminations(self) -> Sequence[Any]: ...

    @property
    def truncations(self) -> Sequence[Any]: ...

    @property
    def infos(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class CheckedEpisode:
    """An episode whose observations and actions are arrays of the spaces, checked against them.

    Attributes:
        observations: The T+1 observations, nested as the observation space.
        actions: The T actions, nested as the action space.
        lists: The episode it was made from (rewards, flags, infos, seed, options).
    """

    observations: Any
    actions: Any
    lists: EpisodeLists


def _as_batch(space: gym.Space[Any], tree: Any) -> Any:
    """An episode's nested lists as the nested arrays of ``space`` (Dict -> dict, Tuple -> tuple)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _as_batch(sub, tree[k]) for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_as_batch(sub, part) for sub, part in zip(space.spaces, tree))
    if isinstance(space, gym.spaces.Text):
        return np.asarray(tree, dtype=str)
    return np.asarray(tree, dtype=space.dtype)


def check_episode_lists(
    episodes: Sequence[EpisodeLists], observation_space: gym.Space[Any], action_space: gym.Space[Any]
) -> list[CheckedEpisode]:
    """Each episode as arrays, checked against the spaces before anything is written.

    Args:
        episodes: The episodes, in order.
        observation_space: The dataset's observation space.
        action_space: The dataset's action space.

    Returns:
        One CheckedEpisode per episode, in order.

    Raises:
        ValueError: An episode holds no step, does not match the spaces, has a column of the wrong length or
            values outside their space; the message names the episode (its position and id).
    """
    checked = []
    for i, buf in enumerate(episodes):
        steps = len(buf.rewards)
        where = f"episode {i} (id {buf.id})"
        if steps == 0 or buf.observations is None or buf.actions is None:
            raise ValueError(f"{where} holds no step: add a reset's step data, then one per env step")
        try:
            obs = _as_batch(observation_space, buf.observations)
            act = _as_batch(action_space, buf.actions)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"{where} does not match the spaces: {type(exc).__name__}: {exc}") from exc
        for what, batch, space, rows in (("observations", obs, observation_space, steps + 1),
                                         ("actions", act, action_space, steps)):
            parts = flatten_batch(space, batch)
            for leaf, part in zip(leaves(space), parts):
                if len(part) != rows:
                    raise ValueError(f"{where}: {what}{leaf.name and '/' + leaf.name} has {len(part)} rows, expected {rows}")
            bad = batch_contains(space, batch)
            if bad is not None:
                raise ValueError(f"{where}: {what} outside their space: {bad}")
        if not (len(buf.terminations) == len(buf.truncations) == steps):
            raise ValueError(f"{where}: {steps} rewards but {len(buf.terminations)} terminations and "
                             f"{len(buf.truncations)} truncations")
        checked.append(CheckedEpisode(obs, act, buf))
    return checked


def _info_arrays(tree: Any) -> Any:
    """An episode's info lists as arrays (one row per reset and step), dicts kept."""
    if isinstance(tree, dict):
        return {str(k): _info_arrays(v) for k, v in tree.items()}
    return np.asarray(tree)


def write_episode_lists(store: EpisodeStore, episodes: Sequence[CheckedEpisode]) -> None:
    """Write checked episodes to ``store`` (as env 0, with each episode's seed, options and infos).

    Args:
        store: An open EpisodeStore with the spaces the episodes were checked against.
        episodes: What :func:`check_episode_lists` returned.
    """
    for episode in episodes:
        buf = episode.lists
        store.write_episode(episode.observations, episode.actions, np.asarray(buf.rewards, dtype=np.float64),
                            np.asarray(buf.terminations, dtype=bool), np.asarray(buf.truncations, dtype=bool),
                            seed=buf.seed, env_id=0, options=buf.options,
                            infos=_info_arrays(buf.infos) if buf.infos else None)


def append_episode_lists(
    path: Path,
    dataset_id: str,
    root: Path,
    episodes: Sequence[EpisodeLists],
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
) -> None:
    """Append episodes to an existing dataset, all checked first, committed as one shard.

    Args:
        path: The dataset's folder.
        dataset_id: Its id.
        root: The datasets root it lies in.
        episodes: The episodes to append.
        observation_space: The dataset's observation space.
        action_space: The dataset's action space.

    Raises:
        ValueError: An episode does not fit the spaces (see :func:`check_episode_lists`); nothing is written.
    """
    checked = check_episode_lists(episodes, observation_space, action_space)
    with EpisodeStore.open_at(path, dataset_id, root) as store:
        write_episode_lists(store, checked)
