"""``load_dataset`` with Minari's ``download=``, and remote datasets read in place (``stream=True`` or a URL)."""

from __future__ import annotations

import os
from typing import Any

from vcollect.errors import DatasetNotFoundError
from vcollect.remote.api import download_dataset
from vcollect.remote.location import open_remote
from vcollect.remote.streaming import DEFAULT_CACHE_BYTES, open_in_place, split_dataset_url
from vcollect.store.layout.naming import is_dataset_id
from vcollect.store.read.reader import Dataset
from vcollect.store.read.reader import load_dataset as load_local

__all__ = ["load_dataset"]


def load_dataset(
    dataset_id: str | os.PathLike[str],
    root: str | os.PathLike[str] | None = None,
    *,
    download: bool = False,
    remote: str | None = None,
    force_download: bool = False,
    stream: bool = False,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    **options: Any,
) -> Dataset:
    """Open a dataset for reading; with ``download=True`` one not found locally is downloaded first; a remote
    dataset's URL (``s3://bucket/prefix/name-v0``), or ``stream=True``, reads it in place.

    Read in place, nothing is downloaded to open it: a read fetches the blocks of the shards its rows lie in
    (each checked against the SHA-256 its upload recorded; a shard without such a list is fetched whole and
    checked against its manifest line) into a cache of at most ``cache_bytes`` (``$VCOLLECT_CACHE``, else
    ``~/.cache/vcollect/remote``), while a background thread fetches the rest as far as the cache has room
    (``prefetch=False`` among ``options`` turns that off).

    Args:
        dataset_id: ``namespace/name-vN``, the path of a dataset's folder, or a remote dataset's URL.
        root: The local datasets root.
        download: Download the dataset from the remote when it is not found locally (Minari's ``download=``).
        remote: The remote's URL (default: ``$VCOLLECT_REMOTE``).
        force_download: Download it again (only what changed) even when it is found locally.
        stream: Read the dataset ``dataset_id`` of ``remote`` in place instead of loading a local one.
        cache_bytes: Most bytes of fetched shards kept by a dataset read in place.
        **options: :func:`vcollect.store.load_dataset`'s options (``on_damage``, ``max_open_files``, ...);
            read in place, also ``prefetch``.

    Returns:
        The dataset.

    Raises:
        DatasetNotFoundError: Not found locally (and ``download`` is False).
        RemoteDatasetNotFoundError: Not on the remote either.
        DamagedDatasetError, CorruptDatasetError: as :func:`vcollect.store.load_dataset`; and the errors of
            :func:`vcollect.remote.download_dataset`.
        TypeError: ``stream=True`` with a folder's path instead of an id.
    """
    if isinstance(dataset_id, str) and "://" in dataset_id:
        url, name = split_dataset_url(dataset_id)
        return open_in_place(url, name, cache_bytes=cache_bytes, **options)
    if stream:
        if not isinstance(dataset_id, str):
            raise TypeError(f"stream=True reads a remote dataset by its id, got {dataset_id!r}")
        return open_in_place(open_remote(remote).url, dataset_id, cache_bytes=cache_bytes, **options)
    if force_download and isinstance(dataset_id, str) and is_dataset_id(dataset_id):
        download_dataset(dataset_id, remote, force_download=False, root=root)
        return load_local(dataset_id, root, **options)
    try:
        return load_local(dataset_id, root, **options)
    except DatasetNotFoundError:
        if not (download and isinstance(dataset_id, str) and is_dataset_id(dataset_id)):
            raise
    download_dataset(dataset_id, remote, root=root)
    return load_local(dataset_id, root, **options)
