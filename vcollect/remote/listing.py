"""The datasets a remote holds, with ``vcollect list``'s columns, read from their metadata alone.

One listing of the remote's objects finds every ``dataset.json`` (and Minari's ``data/metadata.json``);
those files and the manifests are then read in one batch of requests. Counts and sizes come from the
manifest lines (no shard is read); a Minari dataset's from its metadata.
"""

from __future__ import annotations

import json
from typing import Any

from vcollect.errors import BucketNotFoundError
from vcollect.remote.layout import (
    MINARI_DATA_DIR,
    MINARI_METADATA,
    ManifestLine,
    dataset_ids_in,
    dataset_json,
    parse_manifest_lines,
)
from vcollect.remote.location import Remote, bucket_exists, remote_errors
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.manifest import MANIFEST_DIR

__all__ = ["list_remote"]


def list_remote(remote: Remote, prefix: str | None = None) -> dict[str, dict[str, Any]]:
    """Every dataset on ``remote`` whose id starts with ``prefix``: id -> its metadata and totals.

    Returns:
        Id -> the dataset's metadata (author, ...), ``dataset_id``, ``total_episodes``, ``total_steps``,
        ``num_shards``, ``size_bytes``, ``created_at``, ``format`` (``vcollect`` or ``minari``) and
        ``broken`` (None, or why its metadata cannot be read), sorted by id.
    """
    what = f"listing remote {remote.url!r}"
    folder = remote.base
    if prefix and "/" in prefix:
        folder = remote.path(prefix.rsplit("/", 1)[0])
    with remote_errors(remote, what):
        try:
            remote.fs.invalidate_cache()
            paths = [str(p) for p in remote.fs.find(folder)]
        except FileNotFoundError:
            paths = []
        if not paths and not bucket_exists(remote):
            raise BucketNotFoundError(f"{what}: the bucket {remote.bucket!r} does not exist")
        ours, minari = dataset_ids_in(paths, remote)
        if prefix:
            ours = [i for i in ours if i.startswith(prefix)]
            minari = [i for i in minari if i.startswith(prefix)]
        manifests: dict[str, list[str]] = {i: [] for i in ours}
        for path in paths:
            rel = remote.relative(path)
            head, _, name = rel.rpartition("/")
            if name.endswith(".jsonl") and head.endswith("/" + MANIFEST_DIR):
                owner = head[: -len(MANIFEST_DIR) - 1]
                if owner in manifests:
                    manifests[owner].append(path)
        wanted = [remote.path(i, DATASET_FILE) for i in ours]
        wanted += [remote.path(i, MINARI_DATA_DIR, MINARI_METADATA) for i in minari]
        wanted += [p for files in manifests.values() for p in files]
        contents: dict[str, Any] = remote.fs.cat(wanted, on_error="return") if wanted else {}
    out: dict[str, dict[str, Any]] = {}
    for dataset_id in ours:
        out[dataset_id] = _entry(remote, dataset_id, contents, manifests[dataset_id])
    for dataset_id in minari:
        out[dataset_id] = _minari_entry(remote, dataset_id, contents)
    return dict(sorted(out.items()))


def _broken(dataset_id: str, message: str, fmt: str) -> dict[str, Any]:
    return {"dataset_id": dataset_id, "total_episodes": None, "total_steps": None, "num_shards": None,
            "size_bytes": 0, "created_at": None, "format": fmt, "broken": message}


def _entry(remote: Remote, dataset_id: str, contents: dict[str, Any], manifest_paths: list[str]) -> dict[str, Any]:
    path = remote.path(dataset_id, DATASET_FILE)
    data = contents.get(path)
    if not isinstance(data, bytes):
        return _broken(dataset_id, f"{path}: cannot be read ({data!r})", "vcollect")
    try:
        info = dataset_json(data, path)
    except Exception as exc:  # noqa: BLE001 - listed as broken, never a reason to fail the others
        return _broken(dataset_id, str(exc), "vcollect")
    lines: dict[str, ManifestLine] = {}
    for manifest in manifest_paths:
        raw = contents.get(manifest)
        if isinstance(raw, bytes):
            for line in parse_manifest_lines(raw):
                lines.setdefault(line.shard, line)
    metadata = info.get("metadata")
    return {
        **(metadata if isinstance(metadata, dict) else {}),
        "dataset_id": dataset_id,
        "total_episodes": sum(line.episodes for line in lines.values()),
        "total_steps": sum(line.steps for line in lines.values()),
        "num_shards": len(lines),
        "size_bytes": len(data) + sum(line.size for line in lines.values()),
        "created_at": info.get("created_at"),
        "format": "vcollect",
        "broken": None,
    }


def _minari_entry(remote: Remote, dataset_id: str, contents: dict[str, Any]) -> dict[str, Any]:
    path = remote.path(dataset_id, MINARI_DATA_DIR, MINARI_METADATA)
    data = contents.get(path)
    try:
        metadata = json.loads(data) if isinstance(data, bytes) else None
    except ValueError:
        metadata = None
    if not isinstance(metadata, dict):
        return _broken(dataset_id, f"{path}: not a JSON object", "minari")
    size = metadata.get("dataset_size")
    return {
        **metadata,
        "dataset_id": dataset_id,
        "total_episodes": metadata.get("total_episodes"),
        "total_steps": metadata.get("total_steps"),
        "num_shards": None,
        "size_bytes": int(float(size) * 1e6) if isinstance(size, (int, float)) else 0,
        "created_at": None,
        "format": "minari",
        "broken": None,
    }
