"""Collector hooks, named as Tianshou 2.0.1 names them: a step hook and an episode-done hook.

``on_step_hook(rollout)`` is called once per recorded step with a :class:`StepRollout` of the stepped env
ids' arrays, before anything is checked or recorded: assigning new ``rew`` / ``obs_next`` arrays (same
shape) changes what the rings and the store receive. ``on_episode_done_hook(episode)`` is called with each
finished episode (an :class:`~vcollect.buffers.EpisodeSlice`) and may return per-step arrays (name ->
array of the episode's length), stored with that episode: extra ring columns (``VectorRingBuffer.extras``)
and, with a store, per-step info columns (``EpisodeData.infos[name]``).

Tianshou passes ``(action_batch, rollout_batch)`` Batches to a step hook and an episode Batch (``rew``) to
an episode hook; vcollect has no Batch: a step hook gets one plain object with Tianshou's field names
(``act``, ``obs_next``, ``rew``, ``terminated``, ``truncated``) and the env ids, an episode hook the
EpisodeSlice (``rewards``, ``observations``, ...). Unlike Tianshou's, an episode hook may return arrays in
``n_step`` collection too.

A Collector with a hook set steps a blocks backend step by step (block staging off: a hook sees every step
before it is recorded); counts stay exact. A hook that raises stops the call with its exception, every
episode finished before it stored; reset the collector before collecting again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from vcollect.buffers import EpisodeSlice
from vcollect.errors import HookOutputError

__all__ = [
    "EpisodeRolloutHook",
    "EpisodeRolloutHookMCReturn",
    "StepHook",
    "StepRollout",
    "check_episode_extras",
]


@dataclass
class StepRollout:
    """One recorded step of the envs ``env_ids`` (ascending): what a step hook sees and may replace.

    One row per env id. Replace ``rew`` / ``obs_next`` by assigning new arrays of the same shape (or write
    into them): the rings and the store receive what the hook leaves.

    Attributes:
        env_ids: The stepped env ids, ascending.
        act: The actions taken (batched, nested for Dict/Tuple spaces).
        obs_next: The observations that followed (batched, nested for Dict/Tuple spaces).
        rew: The rewards (float).
        terminated: The terminations (bool).
        truncated: The truncations (bool).
    """

    env_ids: np.ndarray
    act: Any
    obs_next: Any
    rew: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class StepHook(Protocol):
    """``hook(rollout) -> None``, called once per recorded step (see :class:`StepRollout`)."""

    def __call__(self, rollout: StepRollout) -> None:
        """See one recorded step, and replace its rewards or next observations if it likes.

        Args:
            rollout: The step's arrays.
        """
        ...


class EpisodeRolloutHook(Protocol):
    """``hook(episode) -> dict[str, np.ndarray] | None``: per-step arrays stored with the finished episode."""

    def __call__(self, episode: EpisodeSlice) -> Mapping[str, np.ndarray] | None:
        """Compute per-step arrays for a finished episode.

        Args:
            episode: The finished episode.

        Returns:
            Name -> array with one row per step, stored with the episode; or None for nothing.
        """
        ...


class EpisodeRolloutHookMCReturn:
    """Monte-Carlo return to go (``mc_return_to_go``) and the episode's return (``full_episode_mc_return``)
    for every step, as Tianshou's hook of the same name computes them.

    Args:
        gamma: The discount factor, in [0, 1].

    Raises:
        ValueError: ``gamma`` is outside [0, 1].
    """

    MC_RETURN_TO_GO_KEY = "mc_return_to_go"
    FULL_EPISODE_MC_RETURN_KEY = "full_episode_mc_return"

    def __init__(self, gamma: float = 0.99) -> None:
        if not 0 <= gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)

    def __call__(self, episode: EpisodeSlice) -> dict[str, np.ndarray]:
        """The discounted return to go of every step of ``episode``, and the episode's discounted return.

        Args:
            episode: The finished episode.

        Returns:
            ``mc_return_to_go`` and ``full_episode_mc_return``, each a float64 array of one row per step.
        """
        rewards = np.asarray(episode.rewards, dtype=np.float64)
        to_go = np.empty_like(rewards)
        running = 0.0
        for t in range(len(rewards) - 1, -1, -1):  # once per episode, not per step
            running = rewards[t] + self.gamma * running
            to_go[t] = running
        full = np.full_like(to_go, to_go[0] if len(to_go) else 0.0)
        return {self.MC_RETURN_TO_GO_KEY: to_go, self.FULL_EPISODE_MC_RETURN_KEY: full}


def check_episode_extras(extras: Any, steps: int, env_id: int) -> dict[str, np.ndarray]:
    """Check an episode hook's return and convert it to arrays.

    Args:
        extras: What the hook returned (it must be a mapping of str keys without ``/``).
        steps: The episode's length: the rows every array must have.
        env_id: The env whose episode it is (for the error message).

    Returns:
        {name: array with ``steps`` rows}.

    Raises:
        HookOutputError: ``extras`` is not a mapping, a key is not a non-empty str without ``/``, or an
            array has not one row per step.
    """
    if not isinstance(extras, Mapping):
        raise HookOutputError(
            f"on_episode_done_hook returned {type(extras).__name__} for env {env_id}'s episode; return a dict "
            "of per-step arrays (name -> array with one row per step) or None"
        )
    out: dict[str, np.ndarray] = {}
    for key, value in extras.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise HookOutputError(f"on_episode_done_hook returned key {key!r}: keys must be non-empty str without '/'")
        array = np.asarray(value)
        if array.ndim == 0 or array.shape[0] != steps:
            raise HookOutputError(
                f"on_episode_done_hook returned {key!r} with shape {array.shape} for env {env_id}'s episode of "
                f"{steps} steps; return one row per step ({steps} rows)"
            )
        out[key] = array
    return out
