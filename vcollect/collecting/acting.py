"""PolicyActor: the actions a collector sends to its ready envs, from a policy or sampled at random.

A policy's actions get its exploration noise (when the collector asks for it), then its ``map_action``
(when it has one), in that order, as Tianshou's Collector applies them.
It keeps what acting needs between steps: the policy's per-env state (rows of the ready envs in, rows
out; reset for env ids that restart), the newest observation of every env (so a step does not read its
observations back from the rings), and whether the policy's actions must be checked against the action
space (once per call: a policy that declares ``actions_in_space`` for this very space is trusted).
For a policy that wants infos (vcollect.policies.SupportsInfos) it also keeps every env's last info dict,
which the collectors hand it with each step's and reset's results; for any other policy it keeps none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Dict, Tuple

from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.ring import RingWriter
from vcollect.collecting.policy_state import put_state_rows, take_state_rows
from vcollect.errors import ActionError
from vcollect.policies import Policy, RandomPolicy, SupportsInfos
from vcollect.spaces import BatchCheck, flatten_batch, leaves, unflatten_batch

__all__ = ["PolicyActor"]


class PolicyActor:
    """Actions for env ids: ``policy(obs, state) -> (actions, state)`` on their latest observations
    (checked against the action space unless trusted), or a batch from ``RandomPolicy``."""

    def __init__(
        self,
        policy: Policy | Callable[..., Any] | None,
        buffer: VectorRingBuffer,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        *,
        exploration_noise: bool,
        validate: bool,
    ) -> None:
        self.policy = policy
        self.buffer = buffer
        self._ring = RingWriter(buffer)
        self.num_envs = buffer.num_envs
        self.observation_space = observation_space
        self._one_leaf_obs = not isinstance(observation_space, (Dict, Tuple))  # observations are one array
        self.action_space = action_space
        self.exploration_noise = exploration_noise
        self.validate = validate
        self._reset_state = getattr(policy, "reset_state", None)  # optional part of the Policy protocol
        self._noise = getattr(policy, "add_exploration_noise", None) if exploration_noise else None
        self._map_action = getattr(policy, "map_action", None)  # optional (SupportsMapAction): after the noise
        self._action_leaves = leaves(action_space)
        self._action_check = BatchCheck(action_space)
        self._random = RandomPolicy(action_space)
        self.random_source: Callable[[np.ndarray], Any] | None = None
        """When set, draws ``collect(random=True)``'s actions instead of RandomPolicy: called with the ready env
        ids (ascending), it returns one action per id, recorded and given to the envs as they are (unchecked).
        None: RandomPolicy over the action space, seeded by the collector's ``seed``."""
        self.state: Any = None
        self._obs: list[np.ndarray] | None = None  # newest observation of every env, flat leaf form
        self._obs_owned = False  # the cached arrays are ours alone (not handed to the policy yet)
        self._check_actions = validate  # whether the policy's actions are checked (set by begin_call)
        self.reads_obs = True
        """Whether the policy reads the observations' values (vcollect.policies.base): set by begin_call."""
        # read once: the loops choose their path by it (a blocks backend is stepped step by step for it)
        self.wants_infos = isinstance(policy, SupportsInfos) and bool(policy.wants_infos)
        self._infos: list[Mapping[str, Any]] = [{}] * self.num_envs  # each env's last info (wants_infos)

    def reseed(self, seed: int) -> None:
        """Re-seed the random actions (RandomPolicy's; a ``random_source`` keeps its own generators)."""
        self._random = RandomPolicy(self.action_space, seed=seed)

    def clear(self) -> None:
        """Forget the policy state and the cached observations (every env is being reset)."""
        self.state = None
        self._obs = None
        if self.wants_infos:
            self._infos = [{}] * self.num_envs

    def begin_call(self) -> None:
        """Once per collect call: whether the policy vouches for its actions (vcollect.policies.base), so
        checking them again would be wasted work."""
        policy = self.policy
        self.reads_obs = policy is None or bool(getattr(policy, "reads_observations", True))
        trusted = (
            bool(getattr(policy, "actions_in_space", False))
            and (self._noise is None or bool(getattr(policy, "noise_in_space", False)))
            and getattr(policy, "action_space", None) == self.action_space
        )
        self._check_actions = self.validate and not trusted

    def actions(self, env_ids: np.ndarray, random: bool, rows: list[np.ndarray] | None = None) -> Any:
        """Actions for env_ids' latest observations: the policy's (checked unless trusted), or random ones.

        Args:
            env_ids: The envs to act for, ascending.
            random: Random actions instead of the policy's.
            rows: Every env's latest observations (``env_ids`` is every env id), flat leaf form, which the
                caller never writes again: the policy acts on them (the cached ones are not read or changed).
                None: the cached observations, or the rings' last rows.

        Returns:
            One action per env id, batched.
        """
        if random:
            if self.random_source is not None:
                return self.random_source(env_ids)
            return self._random.sample(len(env_ids))  # inside the action space by construction
        policy = self.policy
        assert policy is not None
        cache = self._obs
        if rows is None and cache is not None and len(env_ids) == self.num_envs:
            self._obs_owned = False  # handed to the policy: written copy-on-write from now on
            rows = cache
        if rows is not None:  # every env's newest observations: the commonest case
            obs = rows[0] if self._one_leaf_obs else unflatten_batch(self.observation_space, rows)
        else:
            obs = self._current_obs(env_ids)
        state = None if self.state is None else take_state_rows(self.state, env_ids, self.num_envs)
        if self.wants_infos:
            assert isinstance(policy, SupportsInfos)
            kept = self._infos
            infos = list(kept) if len(env_ids) == self.num_envs else [kept[i] for i in env_ids.tolist()]
            result = policy(obs, state, infos=infos)
        else:
            result = policy(obs, state)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ActionError(
                f"policy {type(policy).__name__} returned {type(result).__name__}; a vcollect policy "
                "returns (actions, state); wrap a plain function as lambda obs, state: (fn(obs), None)"
            )
        actions, state_out = result
        if state_out is not None:
            self.state = put_state_rows(self.state, env_ids, state_out, self.num_envs)
        if self._noise is not None:
            actions = self._noise(actions, obs)
        if self._map_action is not None:
            actions = self._map_action(actions)
        if self._check_actions:
            actions = self._checked(actions, env_ids)
        return actions

    def reset_state(self, env_ids: np.ndarray) -> None:
        """Fresh policy state for env ids whose episodes restart."""
        if self.state is not None and self._reset_state is not None:
            self.state = self._reset_state(self.state, env_ids)

    # ------------------------------------------------------------------ observations

    def forget_obs(self) -> None:
        """Random actions read no observations: the policy, when it acts, reads the rings' last rows."""
        self._obs = None

    def use_rows(self, obs_leaves: list[np.ndarray]) -> None:
        """Make these arrays (one row per env, flat leaf form; the caller never writes them again) the
        newest observations."""
        self._obs = obs_leaves
        self._obs_owned = False

    def remember(self, env_ids: np.ndarray, obs: Any, *, owned: bool = False) -> None:
        """Keep the newest observations of env_ids. Arrays handed to the policy, or that the caller may still
        hold (``owned`` False), are never written to afterwards: their rows are replaced copy-on-write."""
        new = [np.asarray(obs)] if self._one_leaf_obs else flatten_batch(self.observation_space, obs)
        if len(env_ids) == self.num_envs:
            self._obs = new  # fresh arrays from the env, in env id order
            self._obs_owned = owned
        elif self._obs is not None:
            merged = self._obs if self._obs_owned else [leaf.copy() for leaf in self._obs]
            for leaf, rows in zip(merged, new):
                leaf[env_ids] = rows
            self._obs = merged
            self._obs_owned = True

    def remember_infos(self, env_ids: np.ndarray, infos: Sequence[Mapping[str, Any]]) -> None:
        """Keep the info dicts that came with env_ids' newest observations (one per env id, in order); a
        no-op unless the policy wants infos (hot loops test ``wants_infos`` before building them)."""
        if not self.wants_infos:
            return
        if len(infos) != len(env_ids):
            raise ValueError(
                f"the backend returned {len(infos)} info dicts for {len(env_ids)} env ids; a VectorEnv returns one "
                "per env id"
            )
        kept = self._infos
        for env_id, info in zip(env_ids.tolist(), infos):
            kept[env_id] = info

    def _current_obs(self, env_ids: np.ndarray) -> Any:
        """The newest observations of some env ids (``actions`` takes every env's cached ones itself): the
        cached rows, or the rings' last rows where nothing is cached."""
        cache = self._obs
        if cache is None:
            return self._ring.last_obs(env_ids)
        if self._one_leaf_obs:
            return cache[0][env_ids]
        return unflatten_batch(self.observation_space, [leaf[env_ids] for leaf in cache])

    # ------------------------------------------------------------------ the policy's actions

    def _checked(self, actions: Any, env_ids: np.ndarray) -> Any:
        if not isinstance(actions, (dict, tuple)):
            actions = np.asarray(actions)
        try:
            flat = flatten_batch(self.action_space, actions)
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise ActionError(
                f"policy returned actions of structure {type(actions).__name__} that do not match the "
                f"action space {self.action_space}: {exc}"
            ) from exc
        for leaf, array in zip(self._action_leaves, flat):
            expected = (len(env_ids), *leaf.shape)
            if np.shape(array) != expected:
                where = f" at '{leaf.name}'" if leaf.name else ""
                raise ActionError(
                    f"policy returned actions of shape {np.shape(array)}{where} for {len(env_ids)} ready envs; "
                    f"expected {expected} (one action of shape {leaf.shape} per ready env)"
                )
        problem = self._action_check(actions)
        if problem is not None:
            raise ActionError(
                f"policy returned actions outside the action space {self.action_space} for envs "
                f"{env_ids.tolist()}: {problem}"
            )
        return actions
