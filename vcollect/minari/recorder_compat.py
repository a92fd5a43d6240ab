"""The DataCollector calls of vcollect's first API (and Minari before 0.5), kept so old scripts run.

``max_buffer_steps`` became ``flush_steps``; ``save_to_disk(path, dataset_metadata)`` became
``create_dataset(id, ...)`` (the dataset is still written at the folder ``path``: dataset_place). Both still work and warn with a DeprecationWarning naming the new spelling,
as Minari warned when it made the same change.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vcollect.errors import InvalidDatasetIdError
from vcollect.store.layout.naming import parse_dataset_id

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


def dataset_place(path: str | os.PathLike[str]) -> tuple[str, Path]:
    """The dataset id and datasets root that put a dataset at the folder ``path``.

    vcollect keeps a dataset in the folder its id names under a datasets root, so the folder's name must be
    the name of a dataset id (``name-vN``). Its parent folder is the id's namespace when named like one
    (``.../old/cartpole-random-v0`` is ``old/cartpole-random-v0`` under ``...``), else the root
    (``.../my.data/cartpole-random-v0`` is ``cartpole-random-v0`` under ``.../my.data``). Either way the
    dataset lies at ``path``.

    Args:
        path: The dataset's folder.

    Returns:
        ``(dataset_id, root)``.

    Raises:
        InvalidDatasetIdError: The folder's name is not ``name-vN``; the message says what to pass instead.
    """
    folder = Path(path).expanduser().absolute()
    parent = folder.parent
    for dataset_id, root in ((f"{parent.name}/{folder.name}", parent.parent), (folder.name, parent)):
        try:
            parse_dataset_id(dataset_id)
        except InvalidDatasetIdError:
            continue
        return dataset_id, root
    raise InvalidDatasetIdError(
        f"save_to_disk({str(path)!r}): vcollect keeps a dataset in a folder named like its id, 'name-vN', and "
        f"{folder.name!r} is not; pass a folder such as {str(parent / (_id_like(folder.name) + '-v0'))!r} "
        "(loaded afterwards with load_dataset of the id the returned dataset reports, under its root), or call "
        "create_dataset(dataset_id, root=...)"
    )


def _id_like(name: str) -> str:
    """``name`` with every character an id's name may not hold replaced by '-' (for the error's example)."""
    cleaned = re.sub(r"[^-_\w]+", "-", name).strip("-")
    return cleaned or "dataset"


def save_to_disk(collector: Any, path: str | os.PathLike[str], dataset_metadata: Mapping[str, Any] | None = None) -> Any:
    """``collector.create_dataset`` at the folder ``path``, as Minari 0.4's ``save_to_disk(path, metadata)``
    wrote its dataset into the folder it was given; with a DeprecationWarning.

    The folder (which must not exist, or be empty) is named like a dataset id (see :func:`dataset_place`):
    ``.../old/cartpole-random-v0`` is written as ``old/cartpole-random-v0`` under the root ``...``. Keys of
    ``dataset_metadata`` that create_dataset takes (author, algorithm_name, ...) go there, the rest become
    plain metadata.

    Args:
        collector: The DataCollector.
        path: The dataset's folder.
        dataset_metadata: Metadata to store with it.

    Returns:
        The Dataset, loaded (its ``id`` and ``StoredDataset(dataset).root`` say how to load it again).

    Raises:
        InvalidDatasetIdError: The folder's name is not an id's (``name-vN``); nothing is written.
    """
    warnings.warn("DataCollector.save_to_disk(path, dataset_metadata) is deprecated: use "
                  "create_dataset(dataset_id, root=..., **metadata)", DeprecationWarning, stacklevel=3)
    dataset_id, root = dataset_place(path)
    folder = Path(path).expanduser()
    if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
        folder.rmdir()  # an empty folder made for the dataset (as Minari's users did): the dataset takes its place
    metadata = dict(dataset_metadata or {})
    arguments = {key: metadata.pop(key) for key in MINARI_CREATE_KEYS if key in metadata}
    dataset = collector.create_dataset(dataset_id, root=root, **arguments)
    if metadata:
        dataset.update_metadata(metadata)
    return dataset
