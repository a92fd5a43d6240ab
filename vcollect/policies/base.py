"""The policy protocol the collectors call, and the optional hooks they look for.

A policy maps a batch of observations of the ready envs (batched nested form) and their state rows to
a batch of actions and the new state rows. State has the env axis first (or is None), so the
collector can keep one row per env id and hand a policy only the rows of the envs it steps.

A policy whose actions lie in its ``action_space`` by construction may say so with a true
``actions_in_space`` attribute; where that space equals the env's (and no exploration noise is added,
or the policy's noise keeps actions in the space: a true ``noise_in_space``, as EpsilonGreedy's), the
collector then skips its per-step check of the actions (TorchPolicy does for index-valued spaces).

A policy that never reads the observations' values (only how many there are), in its call and in its
``add_exploration_noise``, may say so with a false ``reads_observations`` (RandomPolicy does): a collector
that stages steps in blocks then checks the observations once per block, as for ``random=True``, instead of
before each call, and writes the block's next rows over the arrays it handed such a policy (a policy that
reads observations gets rows no later step writes over). A bad observation is refused alike (ObservationError,
the steps before it recorded); the envs may have taken the block's later steps by then, as with random actions.

A policy that reads the envs' info dicts opts in with ``SupportsInfos`` (a true ``wants_infos``); every
other policy is called with observations and state only, and the collectors keep no infos for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Policy(Protocol):
    """Anything called as ``policy(obs, state) -> (actions, state)`` on a batch of observations."""

    def __call__(self, obs: Any, state: Any = None) -> tuple[Any, Any]:
        """Return the actions for ``obs`` (leading axis = batch) and the new state rows (or None).

        Args:
            obs: The ready envs' observations, batched (nested for Dict/Tuple spaces).
            state: Their state rows, env axis first (None: no state).
        """
        ...


@runtime_checkable
class SupportsResetState(Protocol):
    """A stateful policy: the collector zeroes the state rows of envs that start a new episode."""

    def reset_state(self, state: Any, env_ids: np.ndarray) -> Any:
        """Return ``state`` (env axis first) with the rows of ``env_ids`` set to the initial state.

        Args:
            state: Every env's state rows.
            env_ids: The env ids that start a new episode.
        """
        ...


@runtime_checkable
class SupportsExplorationNoise(Protocol):
    """A policy with an exploration hook, applied when the collector runs with ``exploration_noise``."""

    def add_exploration_noise(self, actions: Any, obs: Any) -> Any:
        """Return ``actions`` perturbed for exploration (the input is not modified).

        Args:
            actions: The policy's actions, batched.
            obs: The observations they were chosen for.
        """
        ...


@runtime_checkable
class SupportsMapAction(Protocol):
    """A policy whose actions are mapped into the env's action space after any exploration noise and
    before the collector checks and sends them (Tianshou's ``map_action``; TianshouPolicy has one)."""

    def map_action(self, actions: Any) -> Any:
        """Return ``actions`` as the env takes them.

        Args:
            actions: The policy's actions (after any exploration noise), batched.
        """
        ...


@runtime_checkable
class SupportsInfos(Protocol):
    """A policy that acts on the envs' infos as well as their observations (opt-in: ``wants_infos``).

    While ``wants_infos`` is true when a collector is built, the collector keeps the last info dict of
    every env (the step's that produced the observation; the reset's after a reset or a restart) and calls
    ``policy(obs, state, infos=infos)``, ``infos`` a new list of one dict per ready env, in the order of
    the observations. A false ``wants_infos`` (TianshouPolicy's default) is called as any other policy.
    """

    wants_infos: bool

    def __call__(
        self, obs: Any, state: Any = None, *, infos: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[Any, Any]:
        """Return the actions and the new state rows for ``obs`` and the ready envs' ``infos``.

        Args:
            obs: The ready envs' observations, batched.
            state: Their state rows, env axis first (None: no state).
            infos: One info dict per ready env, in the order of the observations.
        """
        ...
