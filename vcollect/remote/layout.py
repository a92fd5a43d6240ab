"""Where a dataset lies on a remote, and its manifests and metadata read from there.

A remote mirrors the local layout under its base (``bucket/prefix``)::

    <base>/<namespace>/<name>-vN/dataset.json             written last by an upload
    <base>/<namespace>/<name>-vN/shards/<shard>.h5         immutable, as committed locally
    <base>/<namespace>/<name>-vN/manifest/<writer>.jsonl   the writers' lines of the shards uploaded
    <base>/<namespace>/<name>-vN/episode_metadata.json     when the dataset has one
    <base>/<namespace>/namespace_metadata.json             a namespace's metadata (Minari's file)

An upload writes shards, then manifests, then ``dataset.json``, so every manifest line a reader sees names
a shard that is there. Minari's layout (``<base>/<id>/data/metadata.json`` and ``main_data.hdf5``) is told
apart by its ``data/metadata.json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vcollect.errors import CorruptDatasetError, InvalidDatasetIdError
from vcollect.remote.location import Remote
from vcollect.store.layout.dataset_info import DATASET_FILE, MAX_SIDE_FILE_BYTES, SHARDS_DIR
from vcollect.store.layout.manifest import MANIFEST_DIR
from vcollect.store.layout.namespaces import NAMESPACE_METADATA_FILE
from vcollect.store.layout.naming import parse_dataset_id
from vcollect.store.layout.shard_format import parse_shard_name

__all__ = [
    "MINARI_DATA_DIR",
    "MINARI_METADATA",
    "ManifestLine",
    "RemoteManifest",
    "check_remote_id",
    "dataset_ids_in",
    "dataset_json",
    "namespace_file",
    "parse_manifest_lines",
]

#: Minari's folder of a dataset's files, and its metadata file there.
MINARI_DATA_DIR = "data"
MINARI_METADATA = "metadata.json"


def check_remote_id(dataset_id: str) -> str:
    """``dataset_id`` as a path below a remote's base, after the id grammar's checks (no ``..``, no absolute
    path, no empty part: InvalidDatasetIdError), so no remote name can lead a download outside the root."""
    parse_dataset_id(dataset_id)
    if dataset_id.startswith("/") or any(part in ("", ".", "..") for part in dataset_id.split("/")):
        raise InvalidDatasetIdError(f"dataset id {dataset_id!r} has an empty, '.' or '..' part")
    return dataset_id


def namespace_file(namespace: str) -> str:
    """The remote path (below the base) of a namespace's metadata file."""
    return f"{namespace}/{NAMESPACE_METADATA_FILE}"


@dataclass(frozen=True)
class ManifestLine:
    """One manifest line: the shard it records, its size and SHA-256, and the line's bytes as written."""

    shard: str
    size: int
    sha256: str
    mtime_ns: int | None
    episodes: int
    steps: int
    raw: bytes


def parse_manifest_lines(data: bytes) -> list[ManifestLine]:
    """The whole lines of one manifest file (a torn or unreadable line, e.g. one being appended, is skipped)."""
    out: list[ManifestLine] = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
            shard, size, sha = entry["shard"], entry["size"], entry["sha256"]
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
        if not (isinstance(shard, str) and parse_shard_name(shard) is not None and "/" not in shard):
            continue
        if not (isinstance(size, int) and size >= 0 and isinstance(sha, str) and len(sha) == 64):
            continue
        mtime, episodes, steps = entry.get("mtime_ns"), entry.get("episodes"), entry.get("steps")
        out.append(ManifestLine(
            shard, size, sha, mtime if isinstance(mtime, int) else None,
            episodes if isinstance(episodes, int) else 0, steps if isinstance(steps, int) else 0, raw + b"\n",
        ))
    return out


@dataclass
class RemoteManifest:
    """A dataset's manifests on the remote: writer file name -> its lines, and the lines by shard."""

    files: dict[str, list[ManifestLine]] = field(default_factory=dict)

    @property
    def by_shard(self) -> dict[str, ManifestLine]:
        """Every line by its shard's name (the first, where two files record one shard)."""
        out: dict[str, ManifestLine] = {}
        for lines in self.files.values():
            for line in lines:
                out.setdefault(line.shard, line)
        return out

    @classmethod
    def read(cls, remote: Remote, dataset_dir: str) -> RemoteManifest:
        """The manifests of the remote dataset at ``dataset_dir`` (below the base); none when it has none."""
        folder = remote.path(dataset_dir, MANIFEST_DIR)
        try:
            listed = remote.fs.ls(folder, detail=False)
        except FileNotFoundError:
            return cls()
        names = sorted(p for p in listed if str(p).endswith(".jsonl"))
        contents = remote.fs.cat(names) if names else {}
        if isinstance(contents, bytes):  # one path given: fsspec answers with its bytes
            contents = {names[0]: contents}
        out = cls()
        for name in names:
            out.files[str(name).rsplit("/", 1)[-1]] = parse_manifest_lines(contents[name])
        return out

    def merged(self, other: RemoteManifest) -> RemoteManifest:
        """This manifest's lines and ``other``'s that it lacks, per writer file (lines are never dropped)."""
        out = RemoteManifest({name: list(lines) for name, lines in self.files.items()})
        for name, lines in other.files.items():
            have = {line.shard for line in out.files.get(name, [])}
            out.files.setdefault(name, []).extend(line for line in lines if line.shard not in have)
        return out


def dataset_json(data: bytes, where: str) -> dict[str, Any]:
    """A remote ``dataset.json``'s content, parsed (CorruptDatasetError naming ``where`` when it is not JSON)."""
    if len(data) > MAX_SIDE_FILE_BYTES:
        raise CorruptDatasetError(f"{where} is larger than {MAX_SIDE_FILE_BYTES:,} bytes")
    try:
        info = json.loads(data)
    except ValueError as exc:
        raise CorruptDatasetError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(info, dict):
        raise CorruptDatasetError(f"{where} is not a JSON object")
    return info


def dataset_ids_in(paths: Iterable[str], remote: Remote) -> tuple[list[str], list[str]]:
    """The dataset ids a listing of the remote shows: (vcollect datasets, Minari datasets), each sorted."""
    ours: set[str] = set()
    minari: set[str] = set()
    for path in paths:
        rel = remote.relative(str(path))
        head, _, name = rel.rpartition("/")
        if name == DATASET_FILE and head:
            candidate, into = head, ours
        elif name == MINARI_METADATA and head.endswith("/" + MINARI_DATA_DIR):
            candidate, into = head[: -len(MINARI_DATA_DIR) - 1], minari
        else:
            continue
        if f"/{SHARDS_DIR}/" in f"/{candidate}/":
            continue
        try:
            check_remote_id(candidate)
        except InvalidDatasetIdError:
            continue
        into.add(candidate)
    return sorted(ours), sorted(minari - ours)

