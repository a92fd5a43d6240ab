"""Per-env policy state: the collector keeps one row per env id and hands a policy only its ready rows.

A state is an array-like with the env axis first (numpy array or torch tensor), or a dict/tuple of
them (e.g. an LSTM's ``(h, c)``). Rows are selected and written back by env id, so recurrent
policies keep each env's memory however the envs interleave.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def take_state_rows(state: Any, env_ids: np.ndarray, num_envs: int) -> Any:
    """Return the rows of ``state`` for ``env_ids`` (the whole state when all envs are asked, in order)."""
    if state is None:
        return None
    if len(env_ids) == num_envs and env_ids[0] == 0 and env_ids[-1] == num_envs - 1:
        return state
    if isinstance(state, dict):
        return {key: take_state_rows(value, env_ids, num_envs) for key, value in state.items()}
    if isinstance(state, tuple):
        return tuple(take_state_rows(value, env_ids, num_envs) for value in state)
    return state[_index_for(state, env_ids)]


def put_state_rows(state: Any, env_ids: np.ndarray, rows: Any, num_envs: int) -> Any:
    """Write ``rows`` into ``state`` at ``env_ids``, allocating a zero state of ``num_envs`` rows first."""
    if len(env_ids) == num_envs and env_ids[0] == 0 and env_ids[-1] == num_envs - 1:
        return rows
    if isinstance(rows, dict):
        base = state if isinstance(state, dict) else {}
        return {key: put_state_rows(base.get(key), env_ids, value, num_envs) for key, value in rows.items()}
    if isinstance(rows, tuple):
        base_tuple = state if isinstance(state, tuple) else (None,) * len(rows)
        return tuple(put_state_rows(b, env_ids, r, num_envs) for b, r in zip(base_tuple, rows))
    if state is None:
        state = _zeros_like_rows(rows, num_envs)
    state[_index_for(state, env_ids)] = rows
    return state


def _zeros_like_rows(rows: Any, num_envs: int) -> Any:
    """A zero state with ``num_envs`` rows and the row shape/dtype/device of ``rows``."""
    if isinstance(rows, np.ndarray):
        return np.zeros((num_envs, *rows.shape[1:]), dtype=rows.dtype)
    if hasattr(rows, "new_zeros"):  # a torch tensor, without importing torch here
        return rows.new_zeros((num_envs, *rows.shape[1:]))
    raise TypeError(
        f"policy state of type {type(rows).__name__} is not supported: return a numpy array or torch "
        "tensor with the env axis first, or a dict/tuple of them"
    )


def _index_for(state: Any, env_ids: np.ndarray) -> Any:
    """Index usable on ``state``: numpy ids for arrays, a tensor on the state's device for tensors."""
    if isinstance(state, np.ndarray):
        return env_ids
    device = getattr(state, "device", None)
    if device is not None:
        import torch

        return torch.as_tensor(env_ids, device=device)
    return env_ids
