"""Minari 0.5's HDF5 layout: every episode a group of ``data/main_data.hdf5``.

``main_data.hdf5`` has one group ``episode_{i}`` per episode: ``observations`` (T+1 rows; Dict spaces
become groups keyed like the space, Tuple spaces groups of ``_index_{i}``; Text leaves variable-length
UTF-8 strings), ``actions``, ``rewards``, ``terminations``, ``truncations`` (T rows) and an ``infos``
group; its attributes are ``id``, ``total_steps``, ``seed`` (when known), the reset options flattened as
``options/<key>`` and the per-episode metadata (``rewards_sum``...). Exports also keep vcollect's
``extras`` in an ``extras`` group of each episode: Minari ignores it, the import reads it back.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np

from vcollect.errors import DatasetError, DiskFullError
from vcollect.infos import flatten_info, info_name, nest_info
from vcollect.minari.episodes import MinariEpisode, decode_jpeg, is_image_space, json_value, text_values
from vcollect.minari.spill_file import SpillFile
from vcollect.store.read.reader import Dataset

__all__ = ["EPISODE_ATTRS", "MAIN_FILE", "OPTIONS_PREFIX", "iter_hdf5_episodes", "write_main_file"]

MAIN_FILE = "main_data.hdf5"
#: Episode-group attributes that are not per-episode metadata.
EPISODE_ATTRS = frozenset({"id", "seed", "total_steps"})
OPTIONS_PREFIX = "options/"


# ---------------------------------------------------------------------------------------------------
# export


def _create_column(group: h5py.Group, key: str, data: Any) -> None:
    """One per-step column as Minari writes it: chunked and growable along the time axis (strings as
    variable-length UTF-8, as Minari writes a list of str)."""
    arr = np.asarray(data)
    if arr.dtype.kind == "U":
        arr = arr.astype(object)
        group.create_dataset(key, data=arr, dtype=h5py.string_dtype(encoding="utf-8"),
                             chunks=True, maxshape=(None, *arr.shape[1:]))
        return
    if arr.ndim == 0:
        group.create_dataset(key, data=arr)
        return
    group.create_dataset(key, data=arr, chunks=True, maxshape=(None, *arr.shape[1:]))


def _write_value(group: h5py.Group, key: str, space: gym.Space[Any], value: Any) -> None:
    if isinstance(space, gym.spaces.Dict):
        sub = group.create_group(key)
        for name, subspace in space.spaces.items():
            _write_value(sub, name, subspace, value[name])
    elif isinstance(space, gym.spaces.Tuple):
        sub = group.create_group(key)
        for i, subspace in enumerate(space.spaces):
            _write_value(sub, f"_index_{i}", subspace, value[i])
    else:
        _create_column(group, key, value)


def _write_tree(group: h5py.Group, tree: Mapping[str, Any]) -> None:
    for key, value in tree.items():
        if isinstance(value, Mapping):
            _write_tree(group.create_group(key), value)
        else:
            _create_column(group, key, value)


def write_main_file(dataset: Dataset, path: Path) -> None:
    """Write main_data.hdf5 through a SpillFile: a full disk stops the export with DatasetError instead of
    crashing inside HDF5."""
    obs_space, act_space = dataset.observation_space, dataset.action_space
    raw = SpillFile(path)
    with raw, h5py.File(raw, "w", track_order=True) as f:
        for i, episode in enumerate(dataset.iterate_episodes()):
            if raw.error is not None:
                break
            group = f.create_group(f"episode_{i}")
            group.attrs["id"] = i
            if episode.seed is not None:
                group.attrs["seed"] = episode.seed
            if episode.options is not None:
                group.attrs.update(
                    {OPTIONS_PREFIX + info_name(path): value
                     for path, value in flatten_info(episode.options, "reset options").items()}
                )
            group.attrs["total_steps"] = len(episode)
            _write_value(group, "observations", obs_space, episode.observations)
            _write_value(group, "actions", act_space, episode.actions)
            _create_column(group, "rewards", episode.rewards)
            _create_column(group, "terminations", episode.terminations)
            _create_column(group, "truncations", episode.truncations)
            _write_tree(group.create_group("infos"), episode.infos)
            if episode.extras:
                _write_tree(group.create_group("extras"), episode.extras)
            for key, value in episode.metadata.items():
                if key not in EPISODE_ATTRS and not key.startswith(OPTIONS_PREFIX):
                    group.attrs[key] = value
    if raw.error is not None:
        if raw.error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no space left on device while writing {str(path)!r}") from raw.error
        raise raw.error


# ---------------------------------------------------------------------------------------------------
# import


def _decode_strings(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "O" or arr.dtype.kind == "S":
        flat = [v.decode("utf-8") if isinstance(v, bytes) else v for v in arr.reshape(-1).tolist()]
        if all(isinstance(v, str) for v in flat):
            return np.array(flat, dtype=str).reshape(arr.shape)
    return arr


def _read_tree(group: h5py.Group) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, node in group.items():
        if isinstance(node, h5py.Group):
            out[key] = _read_tree(node)
        else:
            out[key] = _decode_strings(np.asarray(node[()]))
    return out


def _read_value(node: Any, space: gym.Space[Any], jpeg: bool, where: str) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: _read_value(node[key], sub, jpeg, f"{where}/{key}") for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_read_value(node[f"_index_{i}"], sub, jpeg, f"{where}/_index_{i}") for i, sub in enumerate(space.spaces))
    if not isinstance(node, h5py.Dataset):
        raise DatasetError(f"{where} should be an HDF5 dataset for space {space}, found a group")
    if isinstance(space, gym.spaces.Text):
        return text_values(node[()])
    if jpeg and is_image_space(space):
        return decode_jpeg([np.asarray(raw).tobytes() for raw in node[()]])
    return np.asarray(node[()])


def _episode_names(f: h5py.File) -> list[str]:
    numbered = []
    for name in f:
        match = re.fullmatch(r"episode_(\d+)", name)
        if match is not None:
            numbered.append((int(match.group(1)), name))
    return [name for _, name in sorted(numbered)]


def iter_hdf5_episodes(
    path: Path, obs_space: gym.Space[Any], act_space: gym.Space[Any], jpeg: bool
) -> Iterator[MinariEpisode]:
    """The episodes of a Minari ``main_data.hdf5`` in id order."""
    with h5py.File(path, "r") as f:
        for name in _episode_names(f):
            group = f[name]
            attrs = dict(group.attrs)
            seed = attrs.get("seed")
            options_flat = {k[len(OPTIONS_PREFIX):]: json_value(v) for k, v in attrs.items() if k.startswith(OPTIONS_PREFIX)}
            metadata = {
                k: json_value(v)
                for k, v in attrs.items()
                if k not in EPISODE_ATTRS and not k.startswith(OPTIONS_PREFIX)
            }
            yield {
                "name": name,
                "observations": _read_value(group["observations"], obs_space, jpeg, f"{name}/observations"),
                "actions": _read_value(group["actions"], act_space, jpeg, f"{name}/actions"),
                "rewards": np.asarray(group["rewards"][()]),
                "terminations": np.asarray(group["terminations"][()]),
                "truncations": np.asarray(group["truncations"][()]),
                "infos": _read_tree(group["infos"]) if "infos" in group else None,
                "extras": _read_tree(group["extras"]) if "extras" in group else None,
                "seed": None if seed is None else int(seed),
                "options": nest_info({tuple(k.split("/")): v for k, v in options_flat.items()}) if options_flat else None,
                "metadata": metadata or None,
            }
