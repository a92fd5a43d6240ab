"""EpsilonGreedy: a wrapper adding epsilon-random exploration to any policy, for ``exploration_noise``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.policies.base import Policy, SupportsInfos
from vcollect.policies.random import RandomPolicy, batch_size_of


class EpsilonGreedy:
    """Wraps ``policy``; ``add_exploration_noise`` replaces each action by a random one with prob. ``epsilon``.

    For a Discrete action space this is epsilon-greedy exploration. Calls, ``reset_state`` and weights
    pass through to the wrapped policy, so the collector applies noise only when asked to; so do infos,
    for a wrapped policy that wants them (``wants_infos`` is the wrapped policy's).

    Args:
        policy: The policy to wrap.
        action_space: The space random actions are drawn from.
        epsilon: The probability of replacing each action.
        seed: Seeds the choice and the random actions.

    Raises:
        ValueError: ``epsilon`` outside [0, 1].
    """

    def __init__(
        self,
        policy: Policy,
        action_space: gym.Space[Any],
        epsilon: float,
        seed: int | np.random.SeedSequence | None = None,
    ) -> None:
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self.policy = policy
        self.action_space = action_space
        self.epsilon = float(epsilon)
        seeds = (seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)).spawn(2)
        self._rng = np.random.default_rng(seeds[0])
        self._random = RandomPolicy(action_space, seed=seeds[1])
        self.wants_infos = isinstance(policy, SupportsInfos) and bool(policy.wants_infos)

    def __call__(
        self, obs: Any, state: Any = None, *, infos: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[Any, Any]:
        """Return the wrapped policy's actions and state (no noise: that is ``add_exploration_noise``).

        Args:
            obs: The ready envs' observations, batched.
            state: Their state rows (None: no state).
            infos: The ready envs' info dicts, passed on where the wrapped policy wants them.
        """
        if infos is None:
            return self.policy(obs, state)
        assert isinstance(self.policy, SupportsInfos)
        return self.policy(obs, state, infos=infos)

    # The noise swaps in random actions of action_space, so it keeps actions inside that space.
    noise_in_space = True

    @property
    def actions_in_space(self) -> bool:
        """Whether the wrapped policy vouches for its actions (``actions_in_space``) in this same space."""
        policy = self.policy
        vouches = bool(getattr(policy, "actions_in_space", False))
        return vouches and getattr(policy, "action_space", None) == self.action_space

    @property
    def reads_observations(self) -> bool:
        """Whether the wrapped policy reads the observations' values (its noise does not)."""
        return bool(getattr(self.policy, "reads_observations", True))

    def add_exploration_noise(self, actions: Any, obs: Any) -> Any:
        """Replace each action, with probability epsilon, by a random one.

        Args:
            actions: The wrapped policy's actions, batched.
            obs: The observations they were chosen for (unused).

        Returns:
            ``actions`` when none is replaced, else a copy with the replaced rows.
        """
        k = batch_size_of(actions)
        replace = self._rng.random(k) < self.epsilon
        if not replace.any():
            return actions
        return _replace_rows(actions, self._random.sample(k), replace)

    def reset_state(self, state: Any, env_ids: np.ndarray) -> Any:
        """Pass through to the wrapped policy's ``reset_state``.

        Args:
            state: The policy state.
            env_ids: The env ids that reset.

        Returns:
            The wrapped policy's new state (``state`` unchanged if it has no ``reset_state``).
        """
        reset = getattr(self.policy, "reset_state", None)
        return state if reset is None else reset(state, env_ids)

    def state_dict(self) -> Any:
        """The wrapped policy's weights.

        Returns:
            What the wrapped policy's ``state_dict`` returns.
        """
        return self.policy.state_dict()  # type: ignore[attr-defined]

    def load_state_dict(self, weights: Any) -> Any:
        """Load weights into the wrapped policy.

        Args:
            weights: What the wrapped policy's ``state_dict`` returns.

        Returns:
            What the wrapped policy's ``load_state_dict`` returns.
        """
        return self.policy.load_state_dict(weights)  # type: ignore[attr-defined]


def _replace_rows(actions: Any, random: Any, rows: np.ndarray) -> Any:
    """Copy of ``actions`` with ``rows`` taken from ``random`` (same nested structure)."""
    if isinstance(actions, dict):
        return {key: _replace_rows(value, random[key], rows) for key, value in actions.items()}
    if isinstance(actions, tuple):
        return tuple(_replace_rows(value, part, rows) for value, part in zip(actions, random))
    out = np.array(actions, copy=True)
    out[rows] = random[rows]
    return out
