"""What the rings hand out: one episode's arrays (EpisodeSlice), the episodes a block of steps ended
(EpisodeEnds), and the rows of a long episode copied out of its ring before being overwritten."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["EpisodeEnds", "EpisodeSlice", "SpilledChunk"]


@dataclass
class EpisodeSlice:
    """One episode's data: T+1 observations and T actions/rewards/flags (nested values batched over time).

    Arrays are views into the buffer when the episode is contiguous in its ring: consume or copy them
    before the buffer is written again.

    Attributes:
        observations: T+1 rows (nested for Dict/Tuple spaces).
        actions: T rows (nested for Dict/Tuple spaces).
        rewards: (T,) floats.
        terminations: (T,) bools.
        truncations: (T,) bools.
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray


@dataclass
class SpilledChunk:
    """Step rows copied out of a ring before being overwritten (keep_overflow=True), in flat leaf form."""

    observations: list[np.ndarray]
    actions: list[np.ndarray]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray


@dataclass
class EpisodeEnds:
    """The episodes that ended in a RingWriter.add_steps call, in order (step by step, env ids
    ascending within a step): the step each ended in, its env id, the flat ring row of its final
    observation (an :meth:`RingWriter.episode_ref` handle with ``lengths``), its steps and return.

    Attributes:
        steps: The step of the call each episode ended in.
        env_ids: The env id of each.
        last_rows: The flat ring row of each one's final observation.
        lengths: The steps of each.
        returns: The return of each.
        mask: (k, num_envs) bool: which steps ended an episode.
        spilled: Episodes (by position in these arrays) whose first steps were copied out of the ring
            before this block (keep_overflow): those steps, in order; the rest, ``lengths[i] -
            spilled_steps(i)`` steps, is in the ring. Read them with :meth:`RingWriter.gather_spilled_episode`.
    """

    steps: np.ndarray
    env_ids: np.ndarray
    last_rows: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray
    mask: np.ndarray
    spilled: dict[int, list[SpilledChunk]] = field(default_factory=dict)

    def spilled_steps(self, i: int) -> int:
        """Steps of an episode that are no longer in the ring.

        Args:
            i: The episode's position in these arrays.

        Returns:
            Those steps (0 for most).
        """
        return sum(len(chunk.rewards) for chunk in self.spilled.get(i, ()))
