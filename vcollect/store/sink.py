"""EpisodeSink: what a collector hands finished episodes to.

A typed protocol rather than a duck-typed object, so a wrapper that forwards only part of it (and would
silently take the collector off its batched path) is refused when the collector is built, not found out
after the data is gone. ``EpisodeStore`` implements it; so does any sink that forwards all of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

__all__ = ["AcceptsEnvSpec", "EpisodeSink", "TakesEpisodes", "check_sink"]


@runtime_checkable
class EpisodeSink(Protocol):
    """Takes finished episodes in batches, commits them on ``flush`` and for good on ``close``.

    ``observation_space`` / ``action_space`` are the spaces the sink stores; a collector refuses a sink
    whose spaces differ from its envs'.
    """

    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]

    def write_episodes(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        lengths: Sequence[int] | np.ndarray,
        *,
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None] | None = None,
        infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Take several finished episodes at once.

        Args:
            observations: The episodes' observations concatenated in order (T+1 rows each).
            actions: Their actions concatenated (T rows each).
            rewards: Their rewards concatenated.
            terminations: Their terminations concatenated.
            truncations: Their truncations concatenated.
            lengths: The steps T of each episode.
            seeds: The seed of each episode's reset (None: unseeded).
            env_ids: The env that ran each episode.
            options: The reset options of each episode (or None for all).
            infos: The info tree of each episode (or None for all).
        """
        ...

    def flush(self) -> None:
        """Commit what was written so far."""
        ...

    def close(self) -> None:
        """Commit what is left and release the sink."""
        ...


@runtime_checkable
class AcceptsEnvSpec(Protocol):
    """What a sink may offer besides EpisodeSink: to record the env its episodes come from. A collector
    offers its envs' EnvSpec once, when it is built, to a sink that has this method."""

    def record_env_spec(self, spec: EnvSpec) -> bool:
        """Record ``spec`` as the env of the dataset unless one is recorded already.

        Args:
            spec: The envs' spec.

        Returns:
            True when it was recorded.
        """
        ...


@runtime_checkable
class TakesEpisodes(Protocol):
    """What a sink may offer besides EpisodeSink: to take episode arrays handed over. A collector hands
    over the fresh arrays it gathered from its rings (it never reads or writes them again), so a sink with
    this method may keep them without copying them; any other sink gets ``write_episodes``."""

    def take_episodes(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        lengths: Sequence[int] | np.ndarray,
        *,
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None] | None = None,
        infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """``write_episodes`` for arrays the caller hands over."""
        ...


def check_sink(sink: object, observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> EpisodeSink:
    """``sink`` as an EpisodeSink for envs of these spaces: TypeError if it does not implement the protocol,
    ValueError (naming both sides) if it stores other spaces."""
    if not isinstance(sink, EpisodeSink):
        missing = [
            name
            for name in ("write_episodes", "flush", "close", "observation_space", "action_space")
            if not hasattr(sink, name)
        ]
        raise TypeError(
            f"store must be an EpisodeSink (write_episodes, flush, close, observation_space, action_space), e.g. "
            f"vcollect.EpisodeStore; {type(sink).__name__} lacks {', '.join(missing)}"
        )
    for what, stored, envs in (
        ("observation", sink.observation_space, observation_space),
        ("action", sink.action_space, action_space),
    ):
        if stored != envs:
            raise ValueError(
                f"the store holds {what} space {stored} but the envs have {what} space {envs}: make the "
                "store (or dataset) with the envs' spaces, or collect into another dataset"
            )
    return sink
