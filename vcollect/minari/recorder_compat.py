"""The DataCollector calls of vcollect's first API (and Minari before 0.5), kept so old scripts run.

``max_buffer_steps`` became ``flush_steps``; ``save_to_disk(path, dataset_metadata)`` became
``create_dataset(id, ...)``. Both still work and warn with a DeprecationWarning naming the new spelling,
as Minari warned when it made the same change.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["MINARI_CREATE_KEYS", "flush_steps_from", "save_to_disk"]

#: dataset_metadata keys that create_dataset takes as arguments (the rest become plain metadata).
MINARI_CREATE_KEYS = ("algorithm_name", "author", "author_email", "code_permalink", "description",
                      "ref_min_score", "ref_max_score", "num_episodes_average_score", "requirements")


def flush_steps_from(max_buffer_steps: int | None, flush_steps: int) -> int:
    """``flush_steps``, or ``max_buffer_steps`` (with a DeprecationWarning) when the old name is used."""
    if max_buffer_steps is None:
        return flush_steps
    warnings.warn("DataCollector(max_buffer_steps=N) is deprecated: use flush_steps=N (commit every N steps)",
                  DeprecationWarning, stacklevel=3)
    return int(max_buffer_steps)


def save_to_disk(collector: Any, path: str | Path, dataset_metadata: Mapping[str, Any] | None = None) -> Any:
    """``collector.create_dataset`` for the dataset folder ``path``: its last two parts are the dataset id
    (``namespace/name-vN``), the folders above them the datasets root. Returns the Dataset."""
    warnings.warn("DataCollector.save_to_disk(path, dataset_metadata) is deprecated: use "
                  "create_dataset(dataset_id, root=..., **metadata)", DeprecationWarning, stacklevel=3)
    folder = Path(path)
    metadata = dict(dataset_metadata or {})
    arguments = {key: metadata.pop(key) for key in MINARI_CREATE_KEYS if key in metadata}
    dataset = collector.create_dataset(f"{folder.parent.name}/{folder.name}", root=folder.parent.parent, **arguments)
    if metadata:
        dataset.update_metadata(metadata)
    return dataset
