"""Info trees as flat columns: the one flattener the env wrappers, the recorder and the store share.

Recorded infos, extras and episode metadata are nested dicts whose leaves become HDF5 columns named by
their key path (``a/b``), so every key must be a non-empty str without '/'. Checking that in one place
means an info the envs accept is one the store accepts too. ``split_vector_infos`` turns a vector env's
batched info dict (gymnasium's layout) into one dict per env.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vcollect.errors import InfoStructureError

__all__ = ["InfoPath", "flatten_info", "info_name", "nest_info", "split_vector_infos", "stack_rows"]

InfoPath = tuple[str, ...]
"""A leaf's key path in a nested info dict, e.g. ``("pos", "x")`` for ``info["pos"]["x"]``."""


def info_name(path: InfoPath) -> str:
    """The column name of a key path: its keys joined by '/'."""
    return "/".join(path)


def flatten_info(tree: Mapping[Any, Any], what: str = "info", prefix: InfoPath = ()) -> dict[InfoPath, Any]:
    """Nested dict -> {key path: leaf value}, in insertion order; a Mapping value is a subtree.

    InfoStructureError (naming ``what`` and where) for a key that is not a non-empty str without '/'.
    """
    out: dict[InfoPath, Any] = {}
    for key, value in tree.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise InfoStructureError(
                f"{what} key {key!r} under {info_name(prefix) or '<top>'!r} cannot be stored: keys must be non-empty "
                "str without '/' (key paths name the stored columns)"
            )
        path = (*prefix, key)
        if isinstance(value, Mapping):
            out.update(flatten_info(value, what, path))
        else:
            out[path] = value
    return out


def nest_info(columns: Mapping[InfoPath, Any]) -> dict[str, Any]:
    """Inverse of :func:`flatten_info`: {key path: value} -> nested dict."""
    out: dict[str, Any] = {}
    for path, value in columns.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def stack_rows(rows: Sequence[Any], what: str) -> np.ndarray:
    """One key's values over an episode (one per reset/step) as one array; InfoStructureError naming ``what``
    when they differ in shape."""
    try:
        return np.array(rows)
    except ValueError as exc:
        raise InfoStructureError(f"{what} values of one episode do not stack into one array: {exc}") from None


def split_vector_infos(infos: Mapping[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """A vector env's info dict (values batched in env id order, a ``_key`` bool mask saying which envs have
    ``key``, sub-dicts split alike) as one dict per env id, as a single env would have returned it."""
    out: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        if isinstance(value, Mapping):
            for i, sub in enumerate(split_vector_infos(value, num_envs)):
                if sub and (mask is None or mask[i]):
                    out[i][key] = sub
            continue
        for i in range(num_envs):
            if mask is None or mask[i]:
                out[i][key] = value[i]
    return out
