"""``list_local_datasets``: Minari's listing call (``{id: metadata}``), built on :func:`list_datasets`."""

from __future__ import annotations

import os
import warnings
from typing import Any

from vcollect.store.layout.dataset_info import FORMAT_VERSION
from vcollect.store.layout.naming import parse_dataset_id
from vcollect.store.read.listing import list_datasets

__all__ = ["list_local_datasets"]

# list_datasets fields about the files, not the dataset: left out of Minari-style metadata.
_LISTING_ONLY = ("num_shards", "size_bytes", "temporary_files", "damage", "corrupt_shards", "broken")


def list_local_datasets(
    latest_version: bool = False,
    compatible_minari_version: bool = False,
    prefix: str | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Ids and metadata of the datasets under the root, sorted by (namespace, name, version), as Minari's.

    A dataset that cannot be read is left out with a warning, as Minari does (``list_datasets`` lists it
    with the reason).

    Args:
        latest_version: Keep only the highest version of each ``namespace/name``.
        compatible_minari_version: Keep the datasets whose format this vcollect reads: those are all the
            readable ones, so it leaves out nothing more (accepted so Minari calls run unchanged).
        prefix: Keep the datasets in that namespace (or that one id), as Minari's folder prefix does.
        root: The datasets root (None: :func:`resolve_root`'s default).

    Returns:
        Id -> the dataset metadata plus ``dataset_id``, ``total_episodes``, ``total_steps``,
        ``dataset_size`` (MB, one decimal, as Minari reports it), ``format_version`` and ``created_at``.
    """
    prefix_path = None if prefix is None else prefix.strip("/")
    found: dict[str, dict[str, Any]] = {}
    for dataset_id, entry in list_datasets(root).items():
        if prefix_path and dataset_id != prefix_path and not dataset_id.startswith(prefix_path + "/"):
            continue
        if entry.get("broken"):
            warnings.warn(f"Misconfigured dataset named {dataset_id}: {entry['broken']}", UserWarning, stacklevel=2)
            continue
        metadata = {k: v for k, v in entry.items() if k not in _LISTING_ONLY}
        metadata["dataset_size"] = round(int(entry["size_bytes"]) / 1e6, 1)
        metadata.setdefault("format_version", FORMAT_VERSION)
        if compatible_minari_version and int(metadata["format_version"]) > FORMAT_VERSION:
            continue
        found[dataset_id] = metadata

    def key(dataset_id: str) -> tuple[str, str, int]:
        namespace, name, version = parse_dataset_id(dataset_id)
        return namespace or "", name, version

    ordered = sorted(found, key=key)
    if latest_version:
        latest: dict[tuple[str, str], str] = {}
        for dataset_id in ordered:  # ascending versions: the last one seen wins
            namespace, name, _ = key(dataset_id)
            latest[(namespace, name)] = dataset_id
        keep = set(latest.values())
        ordered = [d for d in ordered if d in keep]
    return {dataset_id: found[dataset_id] for dataset_id in ordered}
