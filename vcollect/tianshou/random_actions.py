"""RandomActions: ``collect(random=True)``'s actions as Tianshou's Collector draws them.

Tianshou's Collector samples each ready env's own action space (``env.action_space[i].sample()``, in env-id
order), steps the envs with those samples and stores the policy's ``map_action_inverse`` of them, so that the
buffer holds random and policy actions on the same scale (the policy's own, before its ``map_action``).
RandomActions is the PolicyActor's ``random_source`` doing the same: what it returns is recorded in the rings,
and ``to_envs`` gives back, for those very actions, the samples the envs must get
(vcollect.tianshou.mapped_actions applies it on their way to the envs).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.spaces import allocate, leaf_values, unflatten_batch

__all__ = ["RandomActions", "seeded_copies"]


def seeded_copies(space: gym.Space[Any], num_envs: int, seed: int | None) -> list[gym.Space[Any]]:
    """One copy of ``space`` per env, each seeded from its own stream of ``seed``.

    Args:
        space: One env's action space.
        num_envs: How many copies.
        seed: Where the copies' seeds come from (the same seed, the same samples); None: fresh entropy.

    Returns:
        The copies, in env-id order.
    """
    seeds: list[int | None] = [None] * num_envs
    if seed is not None:
        seeds = [int(s) for s in np.random.SeedSequence(seed).generate_state(num_envs, dtype=np.uint32)]
    copies = [copy.deepcopy(space) for _ in range(num_envs)]
    for each, env_seed in zip(copies, seeds):
        each.seed(env_seed)
    return copies


class RandomActions:
    """Samples each ready env's action space; returns what the buffer stores, keeps what the envs get.

    Args:
        spaces: One action space per env, in env-id order (each env's own object, or seeded copies).
        inverse: Maps a batch of samples to what the buffer stores (the policy's ``map_action_inverse``);
            None: the samples themselves.
    """

    def __init__(self, spaces: Sequence[gym.Space[Any]], inverse: Callable[[Any], Any] | None = None) -> None:
        if not spaces:
            raise ValueError("RandomActions needs one action space per env, got none")
        self.spaces = list(spaces)
        self.inverse = inverse
        self._stored: Any = None
        self._samples: Any = None

    def __call__(self, env_ids: np.ndarray) -> Any:
        """One sample of each env id's action space, batched (as ``np.array`` batches them, leaf by leaf for a
        Dict or Tuple space), mapped by ``inverse``: what the buffer stores.

        Args:
            env_ids: The ready env ids.

        Returns:
            The batch to record (the samples themselves when there is no ``inverse``).
        """
        space = self.spaces[0]
        samples = [self.spaces[i].sample() for i in np.asarray(env_ids).tolist()]
        if samples:
            columns = zip(*(leaf_values(space, sample) for sample in samples))
            batch = unflatten_batch(space, [np.array(column) for column in columns])
        else:
            batch = unflatten_batch(space, allocate(space, (0,)))
        stored = batch if self.inverse is None else self.inverse(copy.deepcopy(batch))  # the envs' batch untouched
        self._stored, self._samples = stored, batch
        return stored

    def to_envs(self, actions: Any) -> Any:
        """The samples the envs get for ``actions``, the batch the last call returned.

        Args:
            actions: What the last call returned (the collector steps the envs with it).

        Returns:
            The samples it was made from.

        Raises:
            RuntimeError: ``actions`` is not the last call's batch (the envs would get actions nobody drew).
        """
        if actions is not self._stored:
            raise RuntimeError(
                "the envs were given random actions other than the ones just drawn; RandomActions.to_envs maps "
                "only the batch its last call returned"
            )
        return self._samples
