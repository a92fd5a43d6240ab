"""Tianshou's ``Batch`` values and vcollect's nested arrays: one to the other, and the space a batch of
transitions implies (for a replay buffer filled by ``add`` before any Collector gave it its spaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from tianshou.data import Batch

__all__ = ["as_nested", "batch_of", "batch_space", "to_batch"]


def as_nested(value: Any) -> Any:
    """A Batch (or dict) as a dict of arrays, recursively; anything else as an array."""
    if isinstance(value, Batch):
        return {key: as_nested(value[key]) for key in value.get_keys()}
    if isinstance(value, Mapping):
        return {key: as_nested(item) for key, item in value.items()}
    return np.asarray(value)


def to_batch(value: Any) -> Any:
    """Nested dicts of arrays as a Batch (arrays stay as they are)."""
    if isinstance(value, Mapping):
        return batch_of(value)
    return value


def batch_of(values: Mapping[str, Any]) -> Batch:
    """A Batch of ``values`` (nested dicts become Batches), holding what Batch's own parsing would: numeric
    and boolean arrays and Batches are set as they are, without that parsing's per-value checks; other values
    (objects, lists, scalars) go through it.

    Args:
        values: Keys to arrays, Batches or nested dicts of them.

    Returns:
        The Batch.
    """
    batch = Batch()
    slots = batch.__dict__
    for key, value in values.items():
        if isinstance(value, Batch):
            pass
        elif isinstance(value, Mapping):
            value = batch_of(value)
        elif not (type(value) is np.ndarray and value.dtype.kind in "biufc"):
            value = Batch({key: value})[key]
        slots[key] = value
    return batch


def batch_space(value: Any, what: str) -> gym.Space[Any]:
    """The space of one row of a batched value (leading axis: the batch): a Box per numeric array, a Dict
    for a dict.

    Args:
        value: Batched arrays, or dicts of them (``as_nested``'s form).
        what: The batch key, for the error message.

    Returns:
        A Box (unbounded, of the array's dtype) or a Dict of them.

    Raises:
        ValueError: A leaf that is neither a number nor a boolean array (strings, objects).
    """
    if isinstance(value, Mapping):
        return gym.spaces.Dict({key: batch_space(item, f"{what}.{key}") for key, item in value.items()})
    array = np.asarray(value)
    shape = array.shape[1:]
    if array.dtype.kind == "f":
        return gym.spaces.Box(-np.inf, np.inf, shape, array.dtype)
    if array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        return gym.spaces.Box(info.min, info.max, shape, array.dtype)
    if array.dtype.kind == "b":
        return gym.spaces.Box(0, 1, shape, np.int8)
    raise ValueError(
        f"batch key {what!r} holds {array.dtype} values; vcollect's rings store numbers and nested dicts of "
        "them: give the buffer to a Collector (which sets the envs' spaces) or add numeric arrays"
    )
