"""Dataset transforms with Minari's names: split into views, combine into a new dataset (episodes copied
with :func:`copy_episodes`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from vcollect.errors import DatasetExistsError, SpaceMismatchError
from vcollect.store.dataset_info import DATASET_FILE
from vcollect.store.episode_metadata import write_late_metadata_by_position
from vcollect.store.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.reader import Dataset, EpisodeData, load_dataset
from vcollect.store.staging import discard_staging, new_staging_dir, publish_dir
from vcollect.store.writer import EpisodeStore

__all__ = ["combine_datasets", "copy_episodes", "split_dataset"]


def split_dataset(dataset: Dataset, sizes: Sequence[int], seed: int | None = None) -> list[Dataset]:
    """Split a dataset into disjoint random views of the given sizes (episodes are shuffled, not copied)."""
    sizes = [int(n) for n in sizes]
    if any(n < 0 for n in sizes):
        raise ValueError(f"sizes must be non-negative, got {sizes}")
    if sum(sizes) > dataset.total_episodes:
        raise ValueError(
            f"the sizes {sizes} add up to {sum(sizes)}, more than the {dataset.total_episodes} episodes of {dataset.id!r}"
        )
    order = np.random.default_rng(seed).permutation(dataset.episode_indices)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return [dataset._view(order[bounds[i] : bounds[i + 1]]) for i in range(len(sizes))]


def combine_datasets(
    datasets: Sequence[Dataset | str],
    new_dataset_id: str,
    root: str | os.PathLike[str] | None = None,
    *,
    metadata: Mapping[str, Any] | None = None,
) -> Dataset:
    """Copy the episodes of several datasets (objects or ids under ``root``) into a new dataset.

    All must have equal observation and action spaces (SpaceMismatchError otherwise). The env spec is
    kept when all datasets share it. The new dataset's metadata lists the ``combined_datasets``, plus
    ``metadata`` when given. Episodes keep their order (dataset by dataset), seeds, env ids, infos, extras
    and metadata. The new dataset is built under a hidden name and appears under ``new_dataset_id`` with one
    rename when complete: killed part-way, nothing is left under the id (the next combine removes the rest).
    DatasetExistsError when the id exists.
    """
    parse_dataset_id(new_dataset_id)
    loaded = [load_dataset(d, root) if isinstance(d, str) else d for d in datasets]
    if not loaded:
        raise ValueError("combine_datasets needs at least one dataset")
    first = loaded[0]
    for other in loaded[1:]:
        for what, a, b in (
            ("observation", first.observation_space, other.observation_space),
            ("action", first.action_space, other.action_space),
        ):
            if a != b:
                raise SpaceMismatchError(
                    f"cannot combine {first.id!r} and {other.id!r}: {what} spaces differ ({a} vs {b})"
                )
    specs = {d.env_spec_json for d in loaded}
    eval_specs = {d.eval_env_spec_json for d in loaded}
    final = dataset_path(new_dataset_id, root)
    exists = f"dataset {new_dataset_id!r} already exists at {str(final)!r}; delete it first or pick another id"
    if (final / DATASET_FILE).exists():
        raise DatasetExistsError(exists)
    staging = new_staging_dir(final)
    try:
        EpisodeStore._create_at(
            staging,
            new_dataset_id,
            first.observation_space,
            first.action_space,
            env_spec=specs.pop() if len(specs) == 1 else None,
            eval_env_spec=eval_specs.pop() if len(eval_specs) == 1 else None,
            metadata={"combined_datasets": [d.id for d in loaded], **(metadata or {})},
        ).close()
        late: dict[int, dict[str, Any]] = {}
        copied = 0
        for dataset in loaded:
            # One writer per source, so each source's infos/extras structure gets its own shards.
            with EpisodeStore._open_at(staging, new_dataset_id, resolve_root(root)) as store:
                copied += copy_episodes(dataset.iterate_episodes(), store, late=late, first=copied)
        write_late_metadata_by_position(staging, late)  # metadata set after the fact, keys differing by episode
        publish_dir(staging, final, marker=DATASET_FILE, overwrite=False, exists_message=exists)
    except BaseException:
        discard_staging(staging, resolve_root(root))
        raise
    return load_dataset(new_dataset_id, root)


def copy_episodes(
    episodes: Iterable[EpisodeData],
    store: EpisodeStore,
    *,
    late: dict[int, dict[str, Any]] | None = None,
    first: int = 0,
) -> int:
    """Write stored episodes to ``store`` as they were stored (arrays, seed, env id, options, infos, extras,
    metadata), in order; returns how many. The one copy routine of combine_datasets and add_to_dataset.

    With ``late``, metadata set after the fact under keys the source shard lacks (``late_metadata``) is not
    written to the shards (whose metadata keys are fixed per writer) but put in ``late`` by position
    (``first`` + index), for :func:`~vcollect.store.episode_metadata.write_late_metadata_by_position`.
    """
    count = 0
    for episode in episodes:
        metadata = episode.metadata
        if late is not None and episode.late_metadata:
            late[first + count] = episode.late_metadata
            metadata = {k: v for k, v in metadata.items() if k not in episode.late_metadata}
        store.write_episode(
            episode.observations,
            episode.actions,
            episode.rewards,
            episode.terminations,
            episode.truncations,
            seed=episode.seed,
            env_id=episode.env_id,
            infos=episode.infos or None,
            extras=episode.extras or None,
            metadata=metadata or None,
            options=episode.options,
        )
        count += 1
    return count
