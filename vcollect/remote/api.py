"""The remote datasets API in Minari's shape: list, download and upload by dataset id."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vcollect.remote.download import copy_remote_namespaces, download_to, not_found, remote_info
from vcollect.remote.layout import check_remote_id
from vcollect.remote.listing import list_remote
from vcollect.remote.location import open_remote
from vcollect.remote.minari_layout import download_minari, upload_minari
from vcollect.remote.transfer import TransferProgress
from vcollect.remote.upload import TransferReport, upload_to
from vcollect.store.layout.naming import resolve_root

__all__ = ["FORMATS", "download_dataset", "list_remote_datasets", "upload_dataset"]

#: The layouts an upload can write: vcollect's own (incremental, checked) and Minari's.
FORMATS = ("vcollect", "minari")


def list_remote_datasets(
    remote: str | None = None,
    prefix: str | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    anonymous: bool = False,
) -> dict[str, dict[str, Any]]:
    """The datasets on a remote, with the totals ``vcollect list`` shows, read from their metadata only.

    Args:
        remote: The remote's URL (``s3://bucket/prefix``, ``gs://bucket``, ``gcp://bucket``, ``file:///path``);
            None: ``$VCOLLECT_REMOTE``.
        prefix: Only ids starting with this (a namespace: ``"cartpole/"``).
        storage_options: Passed to the fsspec filesystem.
        anonymous: Read a public bucket without credentials.

    Returns:
        Id -> the dataset's metadata (author, ...) with ``dataset_id``, ``total_episodes``, ``total_steps``,
        ``num_shards``, ``size_bytes``, ``created_at``, ``format`` ("vcollect" or "minari") and ``broken``
        (None, or why its metadata cannot be read).

    Raises:
        UnknownRemoteError: No remote given, or an unknown scheme.
        BucketNotFoundError: The bucket does not exist.
        RemoteAccessError: No credentials, or access refused.
        RemoteTransferError: The remote stopped answering.
        RemoteUnavailableError: ``vcollect[remote]`` is not installed.
    """
    return list_remote(open_remote(remote, storage_options=storage_options, anonymous=anonymous), prefix)


def download_dataset(
    dataset_id: str,
    remote: str | None = None,
    force_download: bool = False,
    *,
    root: str | os.PathLike[str] | None = None,
    progress: TransferProgress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    anonymous: bool = False,
) -> TransferReport:
    """Download a dataset from a remote into the local datasets root, checked and published all at once.

    Every shard is checked against its manifest line (size and SHA-256) before the dataset is published;
    shards the local copy already has are not fetched again, and a download that stopped part way resumes
    from what it fetched. A dataset in Minari's remote layout is imported as a vcollect dataset.

    Args:
        dataset_id: The dataset's id (``namespace/name-vN``).
        remote: The remote's URL; None: ``$VCOLLECT_REMOTE``.
        force_download: Fetch every shard again and replace the local dataset, also when it holds shards the
            remote lacks.
        root: The local datasets root (default: ``$VCOLLECT_DATASETS_PATH`` or ``~/.vcollect/datasets``).
        progress: Told of the files and bytes as they move (the CLI draws bars from it).
        storage_options: Passed to the fsspec filesystem.
        anonymous: Read a public bucket without credentials.

    Returns:
        The files and bytes transferred, and the shards the other side already had.

    Raises:
        InvalidDatasetIdError: A malformed id (``..``, an absolute path).
        RemoteDatasetNotFoundError: The remote holds no such dataset.
        RemoteIntegrityError: A remote shard's size or SHA-256 differs from its manifest line; nothing published.
        DatasetExistsError: The local dataset holds shards the remote lacks (pass ``force_download=True``).
        UnknownRemoteError, BucketNotFoundError, RemoteAccessError, RemoteTransferError, DiskFullError,
            RemoteUnavailableError: as their names say.
    """
    check_remote_id(dataset_id)
    where = open_remote(remote, storage_options=storage_options, anonymous=anonymous)
    info_bytes, minari = remote_info(where, dataset_id)
    if info_bytes is not None:
        report = download_to(where, dataset_id, root, info_bytes=info_bytes, force_download=force_download,
                             progress=progress)
    elif minari:
        copy_remote_namespaces(where, dataset_id, resolve_root(root))
        report = download_minari(where, dataset_id, root, force_download=force_download, progress=progress)
    else:
        raise not_found(where, dataset_id)
    return report


def upload_dataset(
    dataset_id: str,
    remote: str | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    format: str = "vcollect",  # noqa: A002 - the CLI's --format
    progress: TransferProgress | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> TransferReport:
    """Upload a local dataset to a remote: only the shards it lacks, then the metadata last.

    Only committed shards go (a dataset a writer is still appending to uploads what was committed when the
    upload began); readers of the remote never see metadata naming a shard that is not there. Run it again
    to resume one that stopped, or to send what a dataset gained since.

    Args:
        dataset_id: The local dataset's id.
        remote: The remote's URL; None: ``$VCOLLECT_REMOTE``.
        root: The local datasets root.
        format: ``"vcollect"`` (default; incremental and checked) or ``"minari"`` (Minari's remote layout, which
            ``minari download`` reads; every file sent each time).
        progress: Told of the files and bytes as they move.
        storage_options: Passed to the fsspec filesystem.

    Returns:
        The files and bytes transferred, and the shards the other side already had.

    Raises:
        ValueError: An unknown ``format``.
        InvalidDatasetIdError: A malformed id.
        DatasetNotFoundError: No such local dataset.
        CorruptShardError: A local shard differs from its manifest line (verify the dataset).
        UnknownRemoteError, BucketNotFoundError, RemoteAccessError, RemoteTransferError,
            RemoteUnavailableError: as their names say.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    check_remote_id(dataset_id)
    where = open_remote(remote, storage_options=storage_options)
    if format == "minari":
        return upload_minari(where, dataset_id, root, progress)
    return upload_to(where, dataset_id, root, progress)
