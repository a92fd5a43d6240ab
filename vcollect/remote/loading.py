"""``load_dataset`` with Minari's ``download=``: a dataset not found locally is fetched from the remote first."""

from __future__ import annotations

import os
from typing import Any

from vcollect.errors import DatasetNotFoundError
from vcollect.remote.api import download_dataset
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
    **options: Any,
) -> Dataset:
    """Open a dataset for reading; with ``download=True`` one not found locally is downloaded first.

    Args:
        dataset_id: ``namespace/name-vN``, or the path of a dataset's folder.
        root: The local datasets root.
        download: Download the dataset from the remote when it is not found locally (Minari's ``download=``).
        remote: The remote's URL (default: ``$VCOLLECT_REMOTE``).
        force_download: Download it again (only what changed) even when it is found locally.
        **options: :func:`vcollect.store.load_dataset`'s options (``on_damage``, ``max_open_files``, ...).

    Returns:
        The dataset.

    Raises:
        DatasetNotFoundError: Not found locally (and ``download`` is False).
        RemoteDatasetNotFoundError: Not on the remote either.
        DamagedDatasetError, CorruptDatasetError: as :func:`vcollect.store.load_dataset`; and the errors of
            :func:`vcollect.remote.download_dataset`.
    """
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
