"""TianshouPolicy: a Tianshou 2.x policy (or Algorithm, for its policy) called by vcollect's collectors.

Imports torch and tianshou; ``vcollect.policies`` exposes it lazily, and the collectors wrap a Tianshou
policy in it by themselves (vcollect.policies.wrapping.as_policy), with ``pass_infos=False`` and their own
``exploration_noise``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
from tianshou.algorithm.algorithm_base import Algorithm
from tianshou.algorithm.algorithm_base import Policy as TianshouBasePolicy
from tianshou.data import Batch, to_numpy
from tianshou.utils.torch_utils import policy_within_training_step

from vcollect.errors import ActionError
from vcollect.policies.torch_threads import call_with_threads, check_num_threads

__all__ = ["TianshouPolicy", "info_batch"]


class TianshouPolicy:
    """Calls a Tianshou policy as Tianshou's Collector does, behind vcollect's ``policy(obs, state)``.

    Each call builds ``Batch(obs=obs, info=info)`` of the ready envs' observations and runs
    ``policy(batch, state)`` in eval mode, as Tianshou's Collector does (the ``training`` flags of the
    policy's modules, listed when it is wrapped, are cleared around the call and set back; a module added
    to the policy later is not switched), without autograd.

    ``pass_infos``: Tianshou's Collector always passes the envs' infos as ``batch.info``; here that is
    opt-in. With ``pass_infos=True`` (``wants_infos``, vcollect.policies.SupportsInfos) the collectors keep
    each env's last info dict (the step's that produced the observation; the reset's after a reset) and
    ``info`` stacks those of the ready envs as Tianshou does (keys one env lacks are zero for it; the empty
    Batch when every info is empty). With the default ``False`` no infos are kept or converted and ``info``
    is the empty Batch: Tianshou's own policies only forward it to their nets, which ignore it, and a policy
    that reads a key of it fails with Batch's error for a missing key. A policy passed to a collector
    unwrapped gets the default; wrap it to pass infos.

    Exploration: a Tianshou policy explores as in training only while its ``is_within_training_step`` flag
    is set (DQN's ``add_exploration_noise`` takes ``eps_training`` then, ``eps_inference`` otherwise;
    policies with ``deterministic_eval``, such as SAC's or PPO's actor, sample only then). Tianshou's trainer
    sets it (``policy_within_training_step``) around its training collector's calls; a script collecting
    outside a trainer has it unset, and its "exploring" collector then explores at ``eps_inference``
    (0 by default: every action greedy). Two ways, chosen here:

    - ``exploration_noise=True``: every call is a training-step call, whatever the caller did. The forward
      pass and then the policy's ``add_exploration_noise`` run inside ``policy_within_training_step(policy)``
      (the flag is set back afterwards), so the actions returned carry the policy's training exploration
      (DQN's ``eps_training``), whichever collector or plain caller asks. ``add_exploration_noise`` below
      then returns actions unchanged (no second noise). A Tianshou policy handed to vcollect's Collector
      unwrapped is wrapped with the collector's own ``exploration_noise``, so ``Collector(dqn, envs,
      exploration_noise=True)`` collects epsilon-greedy data at ``eps_training`` anywhere.
    - ``exploration_noise=False`` (default): as Tianshou's Collector, the flag as the caller left it: the
      forward pass runs under it, and where a collector asks for noise (its ``exploration_noise=True``)
      ``add_exploration_noise`` below adds the policy's noise under it too (``eps_training`` inside the
      caller's training step, ``eps_inference`` outside: an evaluation collector's epsilon).

    The policy's own noise draws from its own generator (DQN's: numpy's global one, ``np.random.seed``).
    Then ``map_action`` maps the actions into the env's action space, as in Tianshou's Collector. vcollect
    stores the mapped action (the one the env received, so stored episodes replay); Tianshou's buffer stores
    the raw one.

    Hidden state (``result.state``) is kept per env id (a ``Batch`` as a dict of its arrays) and the
    rows of envs that start a new episode are zeroed, as Tianshou's Collector does.

    Args:
        policy: A tianshou Policy, or an Algorithm (its ``policy`` is wrapped).
        num_threads: torch's thread count during each call, as for TorchPolicy (None: leave it as it is).
        pass_infos: Pass the envs' infos as ``batch.info`` (see above).
        exploration_noise: Explore in every call, as in Tianshou's training step (see above); False: as
            Tianshou's Collector, under the caller's flag, where a collector asks.

    Raises:
        TypeError: ``policy`` is no tianshou Policy or Algorithm, or ``pass_infos`` or ``exploration_noise``
            is not a bool.
        ValueError: A bad ``num_threads``.
    """

    def __init__(
        self, policy: Any, *, num_threads: int | None = 1, pass_infos: bool = False, exploration_noise: bool = False
    ) -> None:
        if isinstance(policy, Algorithm):
            policy = policy.policy
        if not isinstance(policy, TianshouBasePolicy):
            raise TypeError(
                f"TianshouPolicy wraps a tianshou Policy or Algorithm, got {type(policy).__name__}; wrap a plain "
                "torch module in TorchPolicy"
            )
        self.policy = policy
        self.action_space = policy.action_space
        self.num_threads = check_num_threads(num_threads)
        if not isinstance(pass_infos, bool):
            raise TypeError(f"pass_infos must be True or False, got {pass_infos!r}")
        self.wants_infos = pass_infos  # read by the collectors when they are built (SupportsInfos)
        if not isinstance(exploration_noise, bool):
            raise TypeError(f"exploration_noise must be True or False, got {exploration_noise!r}")
        self.exploration_noise = exploration_noise
        # switched to eval mode per call by their flags: torch's train(False) walks the module tree, which
        # costs about half of a small net's forward pass
        self._modules = list(policy.modules())
        self._batch: Batch | None = None  # the last call's input, handed to add_exploration_noise
        self._batch_obs: Any = None

    def __call__(
        self, obs: Any, state: Any = None, *, infos: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[Any, Any]:
        """Run the policy on the ready envs' observations.

        Args:
            obs: The ready envs' observations, batched.
            state: Their hidden state rows (None: the initial state).
            infos: The ready envs' info dicts, one each (given by the collectors with ``pass_infos``).

        Returns:
            The policy's raw actions (numpy) and its new state rows (None when it keeps none).

        Raises:
            ActionError: The policy's ``act`` is not an array.
        """
        batch = Batch(obs=obs, info=Batch() if infos is None else info_batch(infos))
        self._batch, self._batch_obs = batch, obs
        if self.num_threads is None:
            return self._act(batch, state)
        return call_with_threads(self.num_threads, self._act, batch, state)

    def _act(self, batch: Batch, state: Any) -> tuple[Any, Any]:
        policy = self.policy
        training = [module for module in self._modules if module.training]
        for module in training:  # the flag itself: nn.Module.__setattr__'s checks cost more than the forward pass
            module.__dict__["training"] = False
        try:
            with torch.no_grad(), self._step():
                result = policy(batch, None if state is None else _to_tianshou(state))
                actions = to_numpy(result.act)
                if not isinstance(actions, np.ndarray):
                    raise ActionError(
                        f"{type(policy).__name__} returned act of type {type(actions).__name__}; TianshouPolicy "
                        "needs an array of actions (one row per env)"
                    )
                if self.exploration_noise:
                    actions = policy.add_exploration_noise(actions, batch)
        finally:
            for module in training:
                module.__dict__["training"] = True
        return actions, _from_tianshou(result.get("state", None))

    def _step(self) -> AbstractContextManager[None]:
        """Inside Tianshou's training step while this wrapper explores in every call, else as it is."""
        return policy_within_training_step(self.policy) if self.exploration_noise else nullcontext()

    def add_exploration_noise(self, actions: Any, obs: Any) -> Any:
        """The policy's ``add_exploration_noise(actions, batch)`` on the batch it acted on, under the caller's
        training-step flag as in Tianshou's Collector; with ``exploration_noise=True`` the actions as they are
        (the call added the training step's noise already).

        Args:
            actions: The raw actions.
            obs: The observations they were chosen for.

        Returns:
            The actions with the policy's noise.
        """
        if self.exploration_noise:
            return actions
        batch = self._batch if obs is self._batch_obs and self._batch is not None else Batch(obs=obs, info=Batch())
        return self.policy.add_exploration_noise(actions, batch)

    def map_action(self, actions: Any) -> Any:
        """The policy's ``map_action`` (bounding and scaling into the env's action space).

        Args:
            actions: The actions after any exploration noise.

        Returns:
            The actions as the env takes them.
        """
        return self.policy.map_action(actions)

    def reset_state(self, state: Any, env_ids: np.ndarray) -> Any:
        """Zero, in place, the state rows of ``env_ids`` (Tianshou's Collector zeroes the hidden state of
        envs that finished).

        Args:
            state: Every env's state rows (None: no state).
            env_ids: The env ids that start a new episode.

        Returns:
            ``state``, zeroed in those rows.
        """
        if state is not None and len(env_ids):
            _zero_rows(state, np.asarray(env_ids))
        return state

    def state_dict(self) -> dict[str, Any]:
        """The policy's weights (for broadcasting them to remote collectors).

        Returns:
            ``policy.state_dict()``.
        """
        return self.policy.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, weights: Any, strict: bool = True) -> Any:
        """Load weights into the policy.

        Args:
            weights: A ``state_dict``.
            strict: As torch's ``strict``: the keys must match exactly.

        Returns:
            What the policy's ``load_state_dict`` returns.
        """
        return self.policy.load_state_dict(weights, strict=strict)


def info_batch(infos: Sequence[Mapping[str, Any]]) -> Batch:
    """One env's info dict per row as the ``batch.info`` Tianshou's Collector builds: the dicts stacked
    (nested dicts as nested Batches), a key missing from some envs' dicts zero for them, and the empty Batch
    when every dict is empty."""
    filled = [info for info in infos if info]
    if not filled:
        return Batch()
    if len(filled) == len(infos):
        columns = _columns(infos)  # the usual case, a few times faster than stacking one Batch per env
        if columns is not None:
            return Batch(columns)
        return Batch.stack([Batch(dict(info)) for info in infos])
    empty = np.array([i for i, info in enumerate(infos) if not info])
    stacked = Batch.stack([Batch(dict(info if info else filled[0])) for info in infos])
    stacked.empty_(empty)
    return stacked


_NUMERIC = (bool, int, float, np.bool_, np.number, np.ndarray)


def _columns(infos: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The dicts as one array per key (nested dicts as nested dicts of arrays) where they all have the same
    keys and every key's values are numbers or arrays that stack into one numeric array; None otherwise
    (``Batch.stack`` then pads missing keys and decides about other values)."""
    keys = infos[0].keys()
    if any(info.keys() != keys for info in infos):
        return None
    out: dict[str, Any] = {}
    for key in keys:
        values = [info[key] for info in infos]
        if all(isinstance(value, Mapping) for value in values):
            nested = _columns(values)
            if nested is None:
                return None
            out[key] = nested
            continue
        if not all(isinstance(value, _NUMERIC) for value in values):
            return None
        try:
            column = np.array(values)
        except ValueError:  # arrays of different shapes
            return None
        if column.dtype == object:
            return None
        out[key] = column
    return out


def _from_tianshou(state: Any) -> Any:
    """A policy's state in the forms vcollect keeps per env (arrays, tensors, dicts/tuples of them)."""
    if isinstance(state, Batch):
        items = dict(state.items())
        return {key: _from_tianshou(value) for key, value in items.items()} if items else None
    if isinstance(state, dict):
        return {key: _from_tianshou(value) for key, value in state.items()}
    if isinstance(state, list):
        return tuple(_from_tianshou(value) for value in state)
    return state


def _to_tianshou(state: Any) -> Any:
    """The state rows as the policy gave them: dicts back to Batch (Tianshou's nets index both alike)."""
    if isinstance(state, dict):
        return Batch({key: _to_tianshou(value) for key, value in state.items()})
    return state


def _zero_rows(state: Any, env_ids: np.ndarray) -> None:
    if isinstance(state, dict):
        for value in state.values():
            _zero_rows(value, env_ids)
    elif isinstance(state, tuple):
        for value in state:
            _zero_rows(value, env_ids)
    elif isinstance(state, torch.Tensor):
        with torch.no_grad():
            state[torch.as_tensor(env_ids, dtype=torch.long, device=state.device)] = 0
    elif isinstance(state, np.ndarray):
        state[env_ids] = None if state.dtype == object else 0
