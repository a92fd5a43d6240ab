"""Uploading a local dataset to a remote: only the shards the remote lacks, metadata last.

What goes is decided by the writers' manifests, read once when the upload starts: a shard goes when its
manifest line is there (it is committed: a writer renames a shard into place before recording it) and the
remote has no object of that name and size. Each shard is checked against its line's SHA-256 before it
goes, and the SHA-256 of each of its blocks goes after it (blocks.py: what lets a dataset read in place fetch
byte ranges); a shard already on the remote without its block list gets one. Then come the manifests (the remote's lines with the new ones added, per writer), the episode
metadata and the namespaces' metadata, and ``dataset.json`` last: a reader never sees a manifest line
whose shard is not there. Shards a writer commits meanwhile are left for the next upload. Two uploads of
one dataset at once send the same immutable shards and lines; the remote ends with one whole dataset.
An upload that stopped part way is resumed by running it again (shards already there are not sent again).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vcollect.errors import BucketNotFoundError, CorruptShardError, DatasetNotFoundError
from vcollect.remote.blocks import BLOCKS_DIR, blocks_name, hash_file
from vcollect.remote.layout import (
    ManifestLine,
    RemoteManifest,
    check_remote_id,
    namespace_file,
    parse_manifest_lines,
)
from vcollect.remote.location import Remote, bucket_exists, remote_errors
from vcollect.remote.transfer import NoProgress, TransferProgress, put_file, write_object
from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR, read_side_file
from vcollect.store.layout.episode_metadata import EPISODE_METADATA_FILE
from vcollect.store.layout.manifest import MANIFEST_DIR
from vcollect.store.layout.namespaces import NAMESPACE_METADATA_FILE, namespace_hierarchy
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root

__all__ = ["TransferReport", "remote_sizes", "upload_to"]


@dataclass
class TransferReport:
    """What an upload or download moved.

    Attributes:
        dataset_id: The dataset.
        files: Files moved (shards and metadata).
        shards: Shards moved.
        shards_kept: Shards not moved because the other side had them.
        bytes: Bytes moved.
    """

    dataset_id: str
    files: int = 0
    shards: int = 0
    shards_kept: int = 0
    bytes: int = 0


def remote_sizes(remote: Remote, folder: str, what: str) -> dict[str, int]:
    """Object name -> size of the objects directly in ``folder`` (a full filesystem path); {} when there are
    none. BucketNotFoundError when the bucket itself is missing."""
    with remote_errors(remote, what):
        try:
            remote.fs.invalidate_cache(folder)
            listed = remote.fs.ls(folder, detail=True)
        except FileNotFoundError:
            if not bucket_exists(remote):
                raise BucketNotFoundError(
                    f"{what}: the bucket {remote.bucket!r} of remote {remote.url!r} does not exist"
                ) from None
            return {}
    return {str(item["name"]).rsplit("/", 1)[-1]: int(item.get("size") or 0)
            for item in listed if item.get("type") == "file"}


def _local_manifest(folder: Path) -> RemoteManifest:
    out = RemoteManifest()
    manifest_dir = folder / MANIFEST_DIR
    if not manifest_dir.is_dir():
        return out
    for file in sorted(manifest_dir.iterdir()):
        if file.name.endswith(".jsonl") and file.is_file():
            out.files[file.name] = parse_manifest_lines(file.read_bytes())
    return out


def upload_to(
    remote: Remote,
    dataset_id: str,
    root: str | os.PathLike[str] | None,
    progress: TransferProgress | None = None,
    *,
    metadata: bool = True,
) -> TransferReport:
    """Upload the local dataset ``dataset_id`` (under ``root``) to ``remote`` (see the module's docstring);
    with ``metadata=False`` only its shards and manifest lines (a distributed worker's part of a dataset whose
    metadata the driver publishes at the end).

    Raises:
        InvalidDatasetIdError: A malformed id.
        DatasetNotFoundError: No such local dataset.
        CorruptShardError: A local shard differs from its manifest line (it is not uploaded; nothing after it is).
        BucketNotFoundError, RemoteAccessError, RemoteTransferError: The remote's faults.
    """
    progress = progress or NoProgress()
    check_remote_id(dataset_id)
    folder = dataset_path(dataset_id, root)
    try:
        info_bytes = read_side_file(folder / DATASET_FILE)
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"no dataset {dataset_id!r} under {str(resolve_root(root))!r} to upload; 'vcollect list' shows what exists"
        ) from None
    local = _local_manifest(folder)
    report = TransferReport(dataset_id)
    remote_shards = remote_sizes(remote, remote.path(dataset_id, SHARDS_DIR), f"uploading {dataset_id!r}")
    with remote_errors(remote, f"uploading {dataset_id!r}"):
        on_remote = RemoteManifest.read(remote, dataset_id)
    remote_blocks = remote_sizes(remote, remote.path(dataset_id, BLOCKS_DIR), f"uploading {dataset_id!r}")
    sending: list[tuple[ManifestLine, Path]] = []
    unlisted: list[tuple[ManifestLine, Path]] = []  # on the remote already, without a block list
    kept = RemoteManifest()
    for name, lines in local.files.items():
        for line in lines:
            shard = folder / SHARDS_DIR / line.shard
            try:
                if shard.stat().st_size != line.size:
                    continue  # not this line's shard (a later verify names it); left out of the remote
            except FileNotFoundError:
                continue
            kept.files.setdefault(name, []).append(line)
            if remote_shards.get(line.shard) == line.size:
                report.shards_kept += 1
                if blocks_name(line.shard) not in remote_blocks:
                    unlisted.append((line, shard))
            else:
                sending.append((line, shard))
    progress.add_total(len(sending), sum(line.size for line, _ in sending))
    for line, shard in sending + unlisted:
        blocks = hash_file(shard)
        if blocks.sha256 != line.sha256 or blocks.size != line.size:
            raise CorruptShardError(
                f"shard {str(shard)!r} differs from its manifest line (SHA-256): not uploaded; "
                f"'vcollect verify {dataset_id}' says more"
            )
        if remote_shards.get(line.shard) != line.size:
            put_file(remote, shard, remote.path(dataset_id, SHARDS_DIR, line.shard), progress,
                     f"uploading shard {line.shard} of {dataset_id!r}")
            progress.file_done()
            report.files += 1
            report.shards += 1
            report.bytes += line.size
        _write(remote, remote.path(dataset_id, BLOCKS_DIR, blocks_name(line.shard)), blocks.encode(), dataset_id,
               report)
    merged = on_remote.merged(kept)
    for name, lines in merged.files.items():
        if lines == on_remote.files.get(name):
            continue
        data = b"".join(line.raw for line in lines)
        _write(remote, remote.path(dataset_id, MANIFEST_DIR, name), data, dataset_id, report)
    if not metadata:
        return report
    side = folder / EPISODE_METADATA_FILE
    if side.is_file():
        _write(remote, remote.path(dataset_id, EPISODE_METADATA_FILE), read_side_file(side), dataset_id, report)
    namespace = parse_dataset_id(dataset_id)[0]
    base = resolve_root(root)
    for level in namespace_hierarchy(namespace):
        file = base.joinpath(*level.split("/")) / NAMESPACE_METADATA_FILE
        if file.is_file():
            _write(remote, remote.path(namespace_file(level)), read_side_file(file), dataset_id, report)
    _write(remote, remote.path(dataset_id, DATASET_FILE), info_bytes, dataset_id, report)
    return report


def _write(remote: Remote, path: str, data: bytes, dataset_id: str, report: TransferReport) -> None:
    write_object(remote, path, data, f"uploading {path.rsplit('/', 1)[-1]} of {dataset_id!r}")
    report.files += 1
    report.bytes += len(data)
