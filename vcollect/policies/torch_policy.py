"""TorchPolicy: run a torch module on a batch of observations and map its outputs to actions.

Imports torch; ``vcollect.policies`` exposes TorchPolicy lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from vcollect.errors import ActionError
from vcollect.policies.tianshou_types import is_tianshou_batch, is_tianshou_net, net_gives_std
from vcollect.policies.torch_threads import call_with_threads, check_num_threads
from vcollect.spaces import leaves

# (module output for one action leaf, deterministic) -> batch of actions for that leaf
ActionMap = Callable[[Any, bool], Any]


class TorchPolicy:
    """Calls ``module`` under ``torch.inference_mode()`` and turns its outputs into numpy actions.

    Observations (numpy, or dict/tuple of numpy) become float32 tensors on ``device``. Outputs per
    action leaf: Discrete -> logits (k, n), argmax or categorical sample (+ start); MultiDiscrete (1-D)
    -> concatenated logits (k, sum(nvec)); MultiBinary -> logits, ``> 0`` or Bernoulli; Box -> values
    (k, *shape) clipped to the bounds, or tanh-squashed into them with ``squash=True`` (a ``(mean,
    log_std)`` pair is sampled from a Gaussian when not deterministic). Dict/Tuple action spaces take a
    dict/tuple of such outputs.

    Modules that return ``(output, state)`` (Tianshou's convention: ``forward(obs, state=None, info=None) ->
    (logits, state)``; Tianshou's own ``Net``, ``Recurrent`` and actors, or any module of yours) work as they
    are. Whether a module does is read from what its first call returns, not from its class
    (``returns_state=None``): a pair whose second item is None, or whose whole does not have the shape of an
    output for the action space while its first item may, is ``(output, state)``. One ambiguity is settled
    for outputs: for a Box space a pair of two tensors of the same shape is ``(mean, log_std)``; pass
    ``returns_state=True`` for a module whose state has its action's shape.

    State: a module whose first call returns a state that is not None keeps it (``recurrent=None``, the
    default): the state is carried per env id by the collectors (each env's rows, the env axis first), handed
    back as ``module(obs, state)`` for the next step of those envs (``module(obs)`` while there is none), and
    zeroed for env ids that start a new episode (``reset_state``). Such a state is taken to be batch-first,
    as Tianshou's are (``hidden_batch_dim`` 0; pass 1 for a torch GRU/LSTM's ``(layers, batch, H)``); a
    ``Batch`` state is kept as a dict. With ``recurrent=True`` the module is always called as ``module(obs,
    hidden) -> (out, hidden)`` (hidden None at first), its hidden's batch axis ``hidden_batch_dim`` (default 1
    as torch's GRU/LSTM keep it, 0 for Tianshou's networks); ``recurrent=False`` drops any state a module
    returns (each call starts from none).

    Tianshou's Gaussian actors (recognised by class when tianshou is imported, see
    vcollect.policies.tianshou_types) give ``(loc, std)``, taken as ``(mean, log(std))``. To run a whole
    Tianshou policy (its action mapping and exploration noise), use TianshouPolicy instead.

    ``num_threads`` defaults to 1 because the small networks and batches of collection (one row per env)
    usually run several times faster on one thread than on one per core (benchmarks/RESULTS.md, "TorchPolicy
    thread count": 1.6x to 10x for a 4-64-64-2 MLP on 8 envs). It is set with ``torch.set_num_threads`` only
    around each call and set back afterwards, so the program's own setting holds outside policy calls.

    Args:
        module: The torch module mapping observations to action outputs.
        action_space: The envs' single action space.
        device: Where observations are sent and the module runs.
        deterministic: Take the argmax / mean action rather than sampling.
        recurrent: True: call ``module(obs, hidden) -> (out, hidden)`` and keep the hidden state per env;
            None: keep a state if the module returns one (see above); False: keep none.
        squash: Tanh-squash Box outputs into the bounds instead of clipping them.
        hidden_batch_dim: The batch axis of the module's hidden state (None: 1 with ``recurrent=True``, as
            torch's GRU/LSTM keep it; 0 for Tianshou's networks and for a state found by ``recurrent=None``).
        num_threads: Torch's intra-op thread count while the policy runs, CPU only (None: leave torch's).
        returns_state: Whether the module returns ``(output, state)`` (None: read from its first output).

    Raises:
        ValueError: ``num_threads`` is not a positive int or None.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        action_space: gym.Space[Any],
        device: str | torch.device = "cpu",
        deterministic: bool = True,
        *,
        recurrent: bool | None = None,
        squash: bool = False,
        hidden_batch_dim: int | None = None,
        num_threads: int | None = 1,
        returns_state: bool | None = None,
    ) -> None:
        self.num_threads = check_num_threads(num_threads)
        # decided by the module's first output where None (_decide)
        self.returns_state = None if returns_state is None else bool(returns_state)
        if hidden_batch_dim is None:
            hidden_batch_dim = 1 if recurrent is True and not is_tianshou_net(module) else 0
        self._std_scale = net_gives_std(module)
        self.device = torch.device(device)
        self.module = module.to(self.device)
        self.action_space = action_space
        self.deterministic = deterministic
        self.recurrent = None if recurrent is None else bool(recurrent)
        self.squash = squash
        # torch.nn.GRU/LSTM keep hidden as (num_layers, batch, H): batch on axis 1; GRUCell-style on 0
        self.hidden_batch_dim = hidden_batch_dim
        self._map = _compile_action_map(action_space, squash, self.device)
        # Index-valued actions (argmax, samples, thresholds) always lie in the space; Box actions do not
        # when the module outputs NaN, so the collector keeps checking those.
        self.actions_in_space = not any(isinstance(leaf.space, spaces.Box) for leaf in leaves(action_space))

    def __call__(self, obs: Any, state: Any = None) -> tuple[Any, Any]:
        """Return numpy actions for the observation batch ``obs`` and (if recurrent) the new state rows.

        Args:
            obs: The ready envs' observations, batched.
            state: Their hidden state rows, env axis first (None: the initial state, or not recurrent).

        Raises:
            ActionError: The module's output is not what its action space needs.
        """
        threads = self.num_threads
        if threads is None or self.device.type != "cpu":
            return self._act(obs, state)
        return call_with_threads(threads, self._act, obs, state)

    def _act(self, obs: Any, state: Any) -> tuple[Any, Any]:
        with torch.inference_mode():
            inputs = _to_tensors(obs, self.device)
            hidden: Any = None if state is None else _state_to_hidden(state, self.hidden_batch_dim, self.device)
            if self.recurrent:
                out, hidden = self.module(inputs, hidden)
            else:
                result = self.module(inputs) if hidden is None else self.module(inputs, hidden)
                if self.returns_state is None:
                    self._decide(result, obs)
                if self.returns_state:
                    out, hidden = _output_and_state(result)
                else:
                    out, hidden = result, None
                if self.recurrent is False:
                    hidden = None
            if hidden is not None and is_tianshou_batch(hidden):
                hidden = hidden.to_dict()
            if self._std_scale and isinstance(out, tuple):  # Tianshou's Gaussian: (loc, std)
                out = (out[0], torch.log(out[1]))
            actions = self._map(out, self.deterministic)
        if hidden is None:
            return actions, None
        # Outside inference mode the clone is a normal tensor, so the collector may write rows into it.
        return actions, _hidden_to_state(hidden, self.hidden_batch_dim)

    def _decide(self, result: Any, obs: Any) -> None:
        """Whether the module returns ``(output, state)``, from its first output; a state found here must
        have the batch on ``hidden_batch_dim``."""
        self.returns_state = _is_output_and_state(result, self.action_space)
        if not self.returns_state or result[1] is None or self.recurrent is False:
            return
        batch = len(next(iter(_leaves_of(obs))))
        for leaf in _leaves_of(result[1]):
            shape = tuple(getattr(leaf, "shape", ()))
            if len(shape) <= self.hidden_batch_dim or shape[self.hidden_batch_dim] != batch:
                raise ActionError(
                    f"{type(self.module).__name__} returned a state of shape {shape} for a batch of {batch} "
                    f"observations; TorchPolicy keeps a state whose axis {self.hidden_batch_dim} is the batch "
                    "(hidden_batch_dim): pass hidden_batch_dim for another axis (1: a torch GRU/LSTM's), or "
                    "recurrent=False to drop the state"
                )

    def reset_state(self, state: Any, env_ids: np.ndarray) -> Any:
        """Zero, in place, the state rows of ``env_ids`` (env axis first; tuples/dicts of rows too).

        Args:
            state: Every env's state rows (None: no state).
            env_ids: The env ids that start a new episode.

        Returns:
            ``state``, zeroed in those rows.
        """
        if state is None or len(env_ids) == 0:
            return state
        with torch.inference_mode():
            _zero_rows(state, np.asarray(env_ids))
        return state

    def state_dict(self) -> dict[str, Any]:
        """The module's weights (for broadcasting them to remote collectors).

        Returns:
            ``module.state_dict()``.
        """
        return self.module.state_dict()

    def load_state_dict(self, weights: Mapping[str, Any], strict: bool = True) -> Any:
        """Load weights into the module (passthrough to ``module.load_state_dict``).

        Args:
            weights: A ``state_dict``.
            strict: As torch's ``strict``: the keys must match exactly.

        Returns:
            What ``module.load_state_dict`` returns (the missing and unexpected keys).
        """
        return self.module.load_state_dict(weights, strict=strict)


def _output_and_state(result: Any) -> tuple[Any, Any]:
    """A module's ``(output, state)`` result split; ActionError for anything else."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ActionError(
            f"TorchPolicy(returns_state=True) needs the module to return (output, state), got "
            f"{type(result).__name__}; pass returns_state=False for a module returning its output alone"
        )
    return result[0], result[1]


def _is_output_and_state(result: Any, space: gym.Space[Any]) -> bool:
    """Whether a module's result is ``(output, state)`` rather than its output: a pair whose second item is
    None, or that has not the form of an output for ``space`` (a Box pair of equal shapes is one:
    ``(mean, log_std)``)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return False
    return result[1] is None or not _has_output_form(result, space)


def _has_output_form(out: Any, space: gym.Space[Any]) -> bool:
    """Whether ``out`` has the form of module output for ``space``: a tensor per leaf (for a Box also a
    pair of tensors of one shape), dicts and tuples as the space nests them."""
    if isinstance(space, spaces.Box):
        if isinstance(out, (tuple, list)):
            return (
                len(out) == 2
                and all(isinstance(part, torch.Tensor) for part in out)
                and out[0].shape == out[1].shape
            )
        return isinstance(out, torch.Tensor)
    if isinstance(space, spaces.Dict):
        return isinstance(out, Mapping) and all(
            key in out and _has_output_form(out[key], sub) for key, sub in space.spaces.items()
        )
    if isinstance(space, spaces.Tuple):
        return (
            isinstance(out, (tuple, list))
            and len(out) == len(space.spaces)
            and all(_has_output_form(part, sub) for part, sub in zip(out, space.spaces))
        )
    return isinstance(out, torch.Tensor)


def _leaves_of(tree: Any) -> list[Any]:
    """The arrays/tensors of a nested state or observation (dicts, tuples, lists), in order."""
    if isinstance(tree, Mapping):
        return [leaf for value in tree.values() for leaf in _leaves_of(value)]
    if isinstance(tree, (tuple, list)):
        return [leaf for value in tree for leaf in _leaves_of(value)]
    if is_tianshou_batch(tree):
        return _leaves_of(tree.to_dict())
    return [tree]


def _to_tensors(obs: Any, device: torch.device) -> Any:
    """Observation batch (numpy, or dict/tuple of numpy) -> float32 tensors on ``device``."""
    if isinstance(obs, np.ndarray):
        if obs.dtype == np.float32:
            if not obs.flags.writeable:
                obs = obs.copy()  # torch would share memory with a read-only array and warn
            if device.type == "cpu":
                # same zero-copy tensor as torch.as_tensor, without its dtype/device argument handling
                return torch.from_numpy(obs)
        return torch.as_tensor(obs, dtype=torch.float32, device=device)
    if isinstance(obs, dict):
        return {key: _to_tensors(value, device) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_to_tensors(value, device) for value in obs)
    return torch.as_tensor(obs, dtype=torch.float32, device=device)


def _state_to_hidden(state: Any, batch_dim: int, device: torch.device) -> Any:
    """Env-first state rows -> the module's hidden layout (batch axis moved to ``batch_dim``)."""
    if isinstance(state, tuple):
        return tuple(_state_to_hidden(part, batch_dim, device) for part in state)
    if isinstance(state, dict):
        return {key: _state_to_hidden(part, batch_dim, device) for key, part in state.items()}
    tensor = torch.as_tensor(state, device=device)
    if batch_dim != 0:
        tensor = tensor.movedim(0, batch_dim)
    return tensor.contiguous()


def _hidden_to_state(hidden: Any, batch_dim: int) -> Any:
    """The module's hidden -> env-first state rows, as fresh contiguous normal (non-inference) tensors."""
    if hidden is None:
        return None
    if isinstance(hidden, (tuple, list)):
        return tuple(_hidden_to_state(part, batch_dim) for part in hidden)
    if isinstance(hidden, dict):
        return {key: _hidden_to_state(part, batch_dim) for key, part in hidden.items()}
    if batch_dim != 0:
        hidden = hidden.movedim(batch_dim, 0)
    return hidden.clone(memory_format=torch.contiguous_format)


def _zero_rows(state: Any, env_ids: np.ndarray) -> None:
    """Set rows ``env_ids`` of every array/tensor in ``state`` to zero, in place."""
    if isinstance(state, (tuple, list)):
        for part in state:
            _zero_rows(part, env_ids)
    elif isinstance(state, dict):
        for part in state.values():
            _zero_rows(part, env_ids)
    elif isinstance(state, torch.Tensor):
        state[torch.as_tensor(env_ids, dtype=torch.long, device=state.device)] = 0
    else:
        state[env_ids] = 0


def _compile_action_map(space: gym.Space[Any], squash: bool, device: torch.device) -> ActionMap:
    """Build the function mapping the module output for ``space`` to a numpy action batch."""
    if isinstance(space, spaces.Discrete):
        return _discrete_map(space)
    if isinstance(space, spaces.MultiDiscrete):
        return _multi_discrete_map(space)
    if isinstance(space, spaces.MultiBinary):
        return _multi_binary_map(space)
    if isinstance(space, spaces.Box):
        return _box_map(space, squash, device)
    if isinstance(space, spaces.Dict):
        subs = [(key, _compile_action_map(sub, squash, device)) for key, sub in space.spaces.items()]

        def dict_map(out: Any, deterministic: bool) -> dict[str, Any]:
            if not isinstance(out, Mapping):
                raise ActionError(
                    f"a Dict action space needs a dict of module outputs, got {type(out).__name__}"
                )
            missing = [key for key, _ in subs if key not in out]
            if missing:
                raise ActionError(f"module output lacks the action keys {missing}")
            return {key: action_map(out[key], deterministic) for key, action_map in subs}

        return dict_map
    if isinstance(space, spaces.Tuple):
        tuple_subs = [_compile_action_map(sub, squash, device) for sub in space.spaces]

        def tuple_map(out: Any, deterministic: bool) -> tuple[Any, ...]:
            if not isinstance(out, Sequence) or len(out) != len(tuple_subs):
                raise ActionError(
                    f"a Tuple action space of {len(tuple_subs)} parts needs a tuple of as many module outputs"
                )
            return tuple(action_map(part, deterministic) for action_map, part in zip(tuple_subs, out))

        return tuple_map
    raise TypeError(
        f"TorchPolicy cannot produce actions for {space!r}: supported spaces are Box, Discrete, "
        "MultiDiscrete (1-D), MultiBinary, and Dict/Tuple of them"
    )


def _check_logits(out: Any, width: int, space: gym.Space[Any]) -> torch.Tensor:
    """The module output as a (k, width) logits tensor, or an ActionError saying what was wrong."""
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[1] != width:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ActionError(f"{space} needs module outputs of shape (batch, {width}), got {got}")
    return out


def _categorical(logits: torch.Tensor, deterministic: bool) -> torch.Tensor:
    """Argmax, or one sample per row of the categorical distribution with these logits."""
    if deterministic:
        return logits.argmax(dim=-1)
    # Gumbel-max: argmax(logits + Gumbel noise) is an exact categorical sample, and on small CPU
    # batches about 3x cheaper than softmax + multinomial
    logits = logits.float()
    return (logits - torch.empty_like(logits).exponential_().log_()).argmax(dim=-1)


# Deterministic Discrete actions from CPU float logits up to this many elements are taken with numpy's
# argmax: on the small batches of a vector env it costs a third of torch's (dispatch overhead); on
# much larger batches torch's is faster.
_NUMPY_ARGMAX_MAX_NUMEL = 1 << 16
_NUMPY_ARGMAX_DTYPES = (torch.float32, torch.float64)


def _discrete_map(space: spaces.Discrete) -> ActionMap:
    """Discrete: logits (k, n) -> int64 actions (k,) offset by ``space.start``."""
    n = int(space.n)
    start = int(space.start)

    def discrete(out: Any, deterministic: bool) -> np.ndarray:
        logits = _check_logits(out, n, space)
        if (
            deterministic
            and logits.is_cpu
            and logits.dtype in _NUMPY_ARGMAX_DTYPES
            and not logits.requires_grad
            and logits.numel() <= _NUMPY_ARGMAX_MAX_NUMEL
        ):
            # same result as torch.argmax (first maximum; NaN counts as the maximum), int64 (intp)
            index = logits.numpy().argmax(axis=1)
        else:
            index = _categorical(logits, deterministic).cpu().numpy()
        return index + start if start else index

    return discrete


def _multi_discrete_map(space: spaces.MultiDiscrete) -> ActionMap:
    """1-D MultiDiscrete: concatenated logits (k, sum(nvec)) -> actions (k, len(nvec)) + start."""
    if space.nvec.ndim != 1:
        raise TypeError(f"TorchPolicy supports 1-D MultiDiscrete spaces only, got {space}")
    sizes = [int(n) for n in space.nvec]
    width = sum(sizes)
    start = np.asarray(space.start, dtype=np.int64)
    dtype = space.dtype

    def multi_discrete(out: Any, deterministic: bool) -> np.ndarray:
        parts = torch.split(_check_logits(out, width, space), sizes, dim=-1)
        index = torch.stack([_categorical(part, deterministic) for part in parts], dim=-1).cpu().numpy()
        return (index + start).astype(dtype, copy=False)

    return multi_discrete


def _multi_binary_map(space: spaces.MultiBinary) -> ActionMap:
    """MultiBinary: logits (k, *shape) -> ``logits > 0``, or a Bernoulli sample, as int8."""
    shape = tuple(space.shape)
    dtype = space.dtype

    def multi_binary(out: Any, deterministic: bool) -> np.ndarray:
        if not isinstance(out, torch.Tensor) or tuple(out.shape[1:]) != shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ActionError(f"{space} needs module outputs of shape (batch, *{shape}), got {got}")
        bits = out > 0 if deterministic else torch.bernoulli(torch.sigmoid(out.float())).bool()
        return bits.cpu().numpy().astype(dtype)

    return multi_binary


def _integer_clip_bounds(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float64 bounds inside an integer Box, so clipped values cast back to the dtype without overflow."""
    low_f = low.astype(np.float64)
    high_f = high.astype(np.float64)
    for index in np.ndindex(low.shape):
        if int(low_f[index]) < int(low[index]):
            low_f[index] = np.nextafter(low_f[index], np.inf)
        if int(high_f[index]) > int(high[index]):
            high_f[index] = np.nextafter(high_f[index], -np.inf)
    return low_f, high_f


def _box_map(space: spaces.Box, squash: bool, device: torch.device) -> ActionMap:
    """Box: values (k, *shape) -> clipped to [low, high] (or tanh-squashed into it), in the Box dtype."""
    shape = tuple(space.shape)
    dtype = space.dtype
    low = space.low
    high = space.high
    if squash and not space.is_bounded("both"):
        raise ValueError(f"squash=True needs a Box bounded on both sides, got {space}")
    mid = torch.as_tensor(low / 2 + high / 2, dtype=torch.float32, device=device)
    half = torch.as_tensor(high / 2 - low / 2, dtype=torch.float32, device=device)
    if dtype.kind == "f":
        clip_low, clip_high = low, high
    else:
        clip_low, clip_high = _integer_clip_bounds(low, high)

    def box(out: Any, deterministic: bool) -> np.ndarray:
        if isinstance(out, (tuple, list)):  # (mean, log_std) of a Gaussian
            mean, log_std = out
            value = mean if deterministic else mean + torch.exp(log_std) * torch.randn_like(mean)
        else:
            value = out
        if not isinstance(value, torch.Tensor) or value.ndim == 0:
            raise ActionError(f"{space} needs module outputs of shape (batch, *{shape})")
        if tuple(value.shape[1:]) != shape:
            try:
                value = value.reshape(value.shape[0], *shape)
            except RuntimeError:
                raise ActionError(
                    f"{space} needs module outputs of shape (batch, *{shape}), got {tuple(value.shape)}"
                ) from None
        if squash:
            value = mid + half * torch.tanh(value.float())
        array = value.cpu().numpy()
        if dtype.kind == "f":
            # np.clip allocates: the output may share memory with the observations (identity modules)
            return np.clip(array.astype(dtype, copy=False), clip_low, clip_high)
        return np.clip(np.rint(array.astype(np.float64)), clip_low, clip_high).astype(dtype)

    return box
