"""Per-episode metadata set after the fact: ``episode_metadata.json`` beside ``dataset.json``.

Shards are never rewritten, so metadata given after an episode was written lives in one sidecar file
per dataset, keyed by shard file name and row (stable when shards are added or one is skipped as
corrupt). Its values overlay the metadata stored in the shard. Each update reads, merges and replaces the
file whole (write, fsync, rename) under a lock on the dataset folder: a concurrent reader sees the old or
the new file, a SIGKILL leaves one of them, and two concurrent updaters both land.

Values are what Minari can keep in an episode group's attributes: bools, numbers, strings and (nested)
lists or numpy arrays of them; keys are non-empty strings without '/'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vcollect.durable import folder_lock
from vcollect.errors import CorruptDatasetError, MetadataKeyError
from vcollect.store.layout.dataset_info import dataset_files, read_json_object, write_json_atomic
from vcollect.store.layout.schema import json_default

__all__ = [
    "EPISODE_METADATA_FILE",
    "RESERVED_EPISODE_KEYS",
    "check_episode_metadata",
    "read_episode_metadata",
    "update_episode_metadata_file",
    "write_late_metadata_by_position",
]

EPISODE_METADATA_FILE = "episode_metadata.json"
_FORMAT = "vcollect-episode-metadata"
_VERSION = 1

#: Keys get_episode_metadata fills from the episode itself (as Minari's episode attributes); never set.
RESERVED_EPISODE_KEYS = frozenset({"id", "seed", "total_steps", "options"})

#: {shard file name: {row: metadata}}
Table = dict[str, dict[int, dict[str, Any]]]


def check_episode_metadata(metadata: Any, where: str) -> dict[str, Any]:
    """``metadata`` as plain JSON values; MetadataKeyError for reserved/bad keys, ValueError for bad values."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{where}: episode metadata must be a dict, got {type(metadata).__name__}")
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise MetadataKeyError(f"{where}: episode metadata keys must be non-empty strings without '/', got {key!r}")
        if key in RESERVED_EPISODE_KEYS or key.startswith("options/"):
            raise MetadataKeyError(
                f"{where}: episode metadata key {key!r} is the episode's own ({', '.join(sorted(RESERVED_EPISODE_KEYS))}"
                " come from the stored episode); use another name"
            )
        if isinstance(value, Mapping) or value is None:
            raise ValueError(
                f"{where}: episode metadata {key!r} must be a bool, number, string or array of them "
                f"(what Minari keeps in episode attributes), got {type(value).__name__}"
            )
        try:
            arr = np.asarray(value)
        except ValueError as exc:
            raise ValueError(f"{where}: episode metadata {key!r} is a ragged array: {exc}") from None
        if arr.dtype.kind not in "biufU" or arr.size == 0 and arr.ndim > 0:
            raise ValueError(
                f"{where}: episode metadata {key!r} must be a bool, number, string or non-empty array of them, "
                f"got {type(value).__name__} of dtype {arr.dtype}"
            )
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"{where}: episode metadata {key!r} holds NaN or infinity, which JSON cannot store")
        out[key] = json.loads(json.dumps(value, default=json_default))
    return out


def read_episode_metadata(dataset_dir: Path) -> Table:
    """The sidecar table of a dataset directory ({} when it has none); CorruptDatasetError naming the file."""
    file = dataset_dir / EPISODE_METADATA_FILE
    data = read_json_object(file)
    if data is None:
        return {}
    if data.get("format") != _FORMAT or not isinstance(data.get("shards"), dict):
        raise CorruptDatasetError(f"{file} is not a vcollect episode metadata file (format != {_FORMAT!r})")
    if data.get("format_version") != _VERSION:
        raise CorruptDatasetError(
            f"{file} has format version {data.get('format_version')!r}; this vcollect reads {_VERSION}: upgrade vcollect"
        )
    table: Table = {}
    for shard, rows in data["shards"].items():
        if not isinstance(rows, dict) or not all(isinstance(v, dict) for v in rows.values()):
            raise CorruptDatasetError(f"{file}: the entry of shard {shard!r} must map rows to objects")
        try:
            table[shard] = {int(row): meta for row, meta in rows.items()}
        except ValueError:
            raise CorruptDatasetError(f"{file}: the rows of shard {shard!r} must be integers") from None
    return table


def update_episode_metadata_file(dataset_dir: Path, updates: Mapping[tuple[str, int], Mapping[str, Any]]) -> Table:
    """Merge ``{(shard name, row): metadata}`` into the sidecar (keys overwrite, others stay) and replace it
    atomically under the dataset folder's lock; returns the table as written."""
    with folder_lock(dataset_dir):
        table = read_episode_metadata(dataset_dir)
        for (shard, row), metadata in updates.items():
            table.setdefault(shard, {}).setdefault(int(row), {}).update(metadata)
        content = {
            "format": _FORMAT,
            "format_version": _VERSION,
            "shards": {shard: {str(row): meta for row, meta in sorted(rows.items())} for shard, rows in table.items()},
        }
        write_json_atomic(dataset_dir / EPISODE_METADATA_FILE, content)
    return table


def write_late_metadata_by_position(dataset_dir: Path, metadata: Mapping[int, Mapping[str, Any]]) -> None:
    """Set episode metadata by global position (shards in name order, then row) in a dataset being built,
    e.g. the late metadata of episodes a copy wrote there. Values are checked as for an update."""
    if not metadata:
        return
    committed, _ = dataset_files(dataset_dir)
    counts = []
    for file in committed:
        with h5py.File(file, "r") as f:
            counts.append(int(f.attrs["num_episodes"]))
    starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    updates: dict[tuple[str, int], dict[str, Any]] = {}
    for position, values in metadata.items():
        if not 0 <= position < int(starts[-1]):
            raise IndexError(f"episode {position} is beyond the {int(starts[-1])} episodes in {dataset_dir}")
        shard = int(np.searchsorted(starts, position, side="right")) - 1
        updates[(committed[shard].name, position - int(starts[shard]))] = check_episode_metadata(
            values, f"episode {position}"
        )
    update_episode_metadata_file(dataset_dir, updates)
