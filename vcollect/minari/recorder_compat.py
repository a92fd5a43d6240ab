"""The DataCollector calls of vcollect's first API (and Minari before 0.5), kept so old scripts run.

``max_buffer_steps`` became ``flush_steps``; ``save_to_disk(path, dataset_metadata)`` became
``create_dataset(id, ...)`` (the dataset is still written at the folder ``path``, whatever its name:
dataset_place). Both still work and warn with a DeprecationWarning naming the new spelling,
as Minari warned when it made the same change.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vcollect.store.layout.dataset_info import check_metadata_update
from vcollect.store.layout.naming import is_dataset_id

__all__ = ["MINARI_CREATE_KEYS", "dataset_place", "flush_steps_from", "save_to_disk"]

#: dataset_metadata keys that create_dataset takes as arguments (the rest become plain metadata).
MINARI_CREATE_KEYS = ("algorithm_name", "author", "author_email", "code_permalink", "description",
                      "ref_min_score", "ref_max_score", "num_episodes_average_score", "requirements")


def flush_steps_from(max_buffer_steps: int | None, flush_steps: int) -> int:
    """``flush_steps``, or ``max_buffer_steps`` (with a DeprecationWarning) when that deprecated name is used."""
    if max_buffer_steps is None:
        return flush_steps
    warnings.warn("DataCollector(max_buffer_steps=N) is deprecated: use flush_steps=N (commit every N steps)",
                  DeprecationWarning, stacklevel=3)
    return int(max_buffer_steps)


def dataset_place(path: str | os.PathLike[str]) -> tuple[str | Path, Path | None]:
    """What ``create_dataset`` is given to put a dataset at the folder ``path``: ``(id, root)`` or ``(folder, None)``.

    A folder named like a dataset id whose parent is named like a namespace (``.../old/cartpole-random-v0``) is
    that id under the folder above (``old/cartpole-random-v0`` under ``...``), so ``load_dataset`` finds it by
    id there too. Any other folder (``.../saved``, ``.../my.data/cartpole-random-v0``) is a dataset of its own
    at that folder, under its parent (``load_dataset(path)`` reads it). Either way the dataset lies at ``path``.

    Args:
        path: The dataset's folder.

    Returns:
        ``(dataset_id, root)``, or ``(folder, None)`` for a dataset named by its folder.
    """
    folder = Path(path).expanduser().absolute()
    dataset_id = f"{folder.parent.name}/{folder.name}"
    if is_dataset_id(dataset_id):
        return dataset_id, folder.parent.parent
    return folder, None


def save_to_disk(collector: Any, path: str | os.PathLike[str], dataset_metadata: Mapping[str, Any] | None = None) -> Any:
    """``collector.create_dataset`` at the folder ``path``, as Minari 0.4's ``save_to_disk(path, metadata)``
    wrote its dataset into the folder it was given; with a DeprecationWarning.

    The folder must not exist, or be empty; any name will do (see :func:`dataset_place`):
    ``load_dataset(path)`` reads the dataset again, and ``.../old/cartpole-random-v0`` is also the id
    ``old/cartpole-random-v0`` under the root ``...``. Keys of ``dataset_metadata`` that create_dataset takes
    (author, algorithm_name, ...) go there, the rest become plain metadata. A ``dataset_id`` key (Minari 0.4's
    scripts named the dataset in its metadata) is not stored: the folder names the dataset, and a
    UserWarning says so when the two differ. The metadata is checked before anything is written, so a key
    the dataset may not take leaves no dataset behind.

    Args:
        collector: The DataCollector.
        path: The dataset's folder.
        dataset_metadata: Metadata to store with it.

    Returns:
        The Dataset, loaded (``load_dataset(dataset.path)`` loads it again).

    Raises:
        DatasetExistsError: A dataset is at ``path`` already.
        MetadataKeyError: ``dataset_metadata`` names a key that describes the stored data (spaces, totals, ...).
    """
    warnings.warn("DataCollector.save_to_disk(path, dataset_metadata) is deprecated: use "
                  "create_dataset(dataset_id, root=..., **metadata)", DeprecationWarning, stacklevel=3)
    target, root = dataset_place(path)
    folder = Path(path).expanduser()
    if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
        folder.rmdir()  # an empty folder made for the dataset (as Minari's users did): the dataset takes its place
    metadata = dict(dataset_metadata or {})
    named = metadata.pop("dataset_id", None)
    if named is not None and str(named) != folder.name:
        warnings.warn(f"save_to_disk: dataset_metadata['dataset_id'] {named!r} is not stored: the folder "
                      f"{folder.name!r} names the dataset (load_dataset({str(folder)!r}) reads it)", UserWarning,
                      stacklevel=3)
    arguments = {key: metadata.pop(key) for key in MINARI_CREATE_KEYS if key in metadata}
    metadata = check_metadata_update(metadata)  # before anything is written: a refused key leaves no dataset
    dataset = collector.create_dataset(target, root=root, **arguments)
    if metadata:
        dataset.update_metadata(metadata)
    return dataset
