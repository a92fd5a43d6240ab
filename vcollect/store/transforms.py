"""Dataset transforms with Minari's names: split into views, combine into a new dataset (episodes copied
with :func:`copy_episodes`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from vcollect.errors import DatasetExistsError, EnvSpecMismatchError, SpaceMismatchError
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.episode_metadata import write_late_metadata_by_position
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.layout.publish_journal import publish_together
from vcollect.store.layout.staging import discard_staging, new_staging_dir
from vcollect.store.read.reader import Dataset, EpisodeData, StoredDataset, load_dataset, view_of
from vcollect.store.write.writer import EpisodeStore

__all__ = ["Staged", "combine_datasets", "copy_episodes", "publish_staged", "split_dataset", "stage_combined"]


def largest_remainder_counts(shares: Sequence[float], total: int) -> list[int]:
    """Whole counts for ``shares`` (fractions of ``total``) that add up to ``round(sum(shares) * total)``:
    each share's floor, plus one for the largest remainders (ties to the earlier share), so 0.5, 0.5 of 7
    gives 4 and 3."""
    exact = np.asarray(shares, dtype=np.float64) * total
    counts = np.floor(exact).astype(np.int64)
    target = int(round(float(exact.sum())))
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: max(0, target - int(counts.sum()))]] += 1
    return [int(n) for n in counts]


def split_sizes(sizes: Sequence[int] | Sequence[float], total: int) -> list[int]:
    """Episode counts from ``sizes``: whole counts as given, or fractions of ``total`` that sum to 1.

    Args:
        sizes: Episode counts (ints, numpy integers), or fractions (floats in [0, 1] summing to 1, rounded by
            largest remainder: :func:`largest_remainder_counts`).
        total: The number of episodes split.

    Returns:
        The counts, one per size.

    Raises:
        TypeError: ``sizes`` is not a sequence of ints or of floats (mixed, bools, strings, floats > 1).
        ValueError: A count is negative, the counts add up to more than ``total``, fractions do not sum to 1,
            or a positive fraction gives no episode (an empty view that was not asked for).
    """
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence | np.ndarray):
        raise TypeError(f"sizes must be a sequence of episode counts or of fractions, got {type(sizes).__name__}")
    values = list(sizes)
    ints = [isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values]
    floats = [isinstance(v, (float, np.floating)) for v in values]
    if values and all(ints):
        counts = [int(v) for v in values]
        if any(n < 0 for n in counts):
            raise ValueError(f"sizes must be non-negative, got {counts}")
    elif values and all(floats):
        shares = [float(v) for v in values]
        if not all(0.0 <= s <= 1.0 for s in shares):
            raise TypeError(
                f"float sizes are fractions of the episodes in [0, 1], got {shares}; give episode counts as ints"
            )
        if abs(sum(shares) - 1.0) > 1e-6:
            raise ValueError(f"fractions must sum to 1, got {shares} (sum {sum(shares):g})")
        counts = largest_remainder_counts(shares, total)
        empty = [s for s, n in zip(shares, counts) if s > 0 and n == 0]
        if empty:
            raise ValueError(
                f"fractions {shares} of {total} episodes give an empty part for {empty}; pass episode counts "
                "(a 0 count asks for an empty view)"
            )
    else:
        raise TypeError(
            f"sizes must all be episode counts (ints) or all fractions (floats summing to 1), got {values!r}"
        )
    return counts


def split_dataset(
    dataset: Dataset, sizes: Sequence[int] | Sequence[float], seed: int | None = None
) -> list[Dataset]:
    """Split a dataset into disjoint random views (episodes are shuffled, not copied).

    Args:
        dataset: The dataset (or view) to split.
        sizes: Episode counts (``[800, 200]``), or fractions of its episodes summing to 1 (``[0.8, 0.2]``,
            rounded by largest remainder, as ``vcollect split --sizes 80%,20%``). Minari takes counts only.
        seed: Seed of the shuffle.

    Returns:
        One view per size, in order.

    Raises:
        TypeError: Sizes that are neither all ints nor all fractions.
        ValueError: Negative counts, counts adding up to more than the dataset has, fractions not summing to
            1, or a fraction that gives an empty view.
    """
    sizes = split_sizes(sizes, dataset.total_episodes)
    if sum(sizes) > dataset.total_episodes:
        raise ValueError(
            f"the sizes {sizes} add up to {sum(sizes)}, more than the {dataset.total_episodes} episodes of {dataset.id!r}"
        )
    order = np.random.default_rng(seed).permutation(dataset.episode_indices)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return [view_of(dataset, order[bounds[i] : bounds[i + 1]]) for i in range(len(sizes))]


def combine_datasets(
    datasets: Sequence[Dataset | str],
    new_dataset_id: str,
    root: str | os.PathLike[str] | None = None,
    *,
    metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Dataset:
    """Copy the episodes of several datasets into a new dataset.

    The env spec is kept as Minari keeps it (:func:`combined_env_spec`); the eval env spec when all datasets
    share it. Episodes keep their order (dataset by dataset), seeds, env ids, infos, extras and metadata.
    The new dataset is built under a hidden name and appears under ``new_dataset_id`` with one rename when
    complete: killed part-way, nothing is left under the id (the next combine removes the rest).

    Args:
        datasets: Dataset objects, or ids under ``root``.
        new_dataset_id: The id of the new dataset.
        root: The datasets root of ids and of the new dataset (None: the default root).
        metadata: Metadata of the new dataset, beside the ``combined_datasets`` it lists.
        overwrite: Replace a dataset already there, as one journaled step (a kill leaves the old one or the
            new one, never neither).

    Returns:
        The new dataset, loaded.

    Raises:
        SpaceMismatchError: The datasets' observation or action spaces differ.
        EnvSpecMismatchError: They were collected from different envs.
        DatasetExistsError: ``new_dataset_id`` exists and ``overwrite`` is False.
    """
    staged = stage_combined(datasets, new_dataset_id, root, metadata=metadata, overwrite=overwrite)
    publish_staged([staged], root, overwrite=overwrite)
    return load_dataset(new_dataset_id, root)


def combined_env_spec(spec_jsons: Sequence[str | None], ids: Sequence[str]) -> str | None:
    """The env spec (JSON) of datasets combined, by Minari's rule: None when none has one; the common spec
    when they are equal but for ``max_episode_steps``, which becomes the largest (None if any is None);
    EnvSpecMismatchError when some have none or they name different envs."""
    present = [json.loads(s) for s in spec_jsons if s is not None]
    if not present:
        return None
    if len(present) < len(spec_jsons):
        missing = [i for i, s in zip(ids, spec_jsons) if s is None]
        raise EnvSpecMismatchError(f"cannot combine datasets with an env spec and datasets without one: {missing}")
    steps = [spec.get("max_episode_steps") for spec in present]
    common = None if any(n is None for n in steps) else max(steps)
    first = {**present[0], "max_episode_steps": common}
    for dataset_id, spec in zip(ids, present):
        if {**spec, "max_episode_steps": common} != first:
            raise EnvSpecMismatchError(
                f"cannot combine {ids[0]!r} and {dataset_id!r}: their env specs differ "
                f"({present[0].get('id')!r} vs {spec.get('id')!r}; anything but max_episode_steps must match)"
            )
    return json.dumps(first)


class Staged(NamedTuple):
    """A dataset built in its hidden staging folder, waiting to be published at ``final``."""

    staging: Path
    final: Path
    exists_message: str


def stage_combined(
    datasets: Sequence[Dataset | str],
    new_dataset_id: str,
    root: str | os.PathLike[str] | None = None,
    *,
    metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> Staged:
    """combine_datasets up to its last step: the new dataset complete in a staging folder, not yet published
    (several can then be published all-or-nothing with :func:`publish_staged`, as ``vcollect split`` does)."""
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
    stored = [StoredDataset(d) for d in loaded]
    env_spec = combined_env_spec([s.env_spec_json for s in stored], [d.id for d in loaded])
    eval_specs = {s.eval_env_spec_json for s in stored}
    final = dataset_path(new_dataset_id, root)
    exists = f"dataset {new_dataset_id!r} already exists at {str(final)!r}; delete it first or pick another id"
    if (final / DATASET_FILE).exists() and not overwrite:
        raise DatasetExistsError(exists)
    staging = new_staging_dir(final, resolve_root(root))
    try:
        EpisodeStore.create_at(
            staging,
            new_dataset_id,
            first.observation_space,
            first.action_space,
            env_spec=env_spec,
            eval_env_spec=eval_specs.pop() if len(eval_specs) == 1 else None,
            metadata={"combined_datasets": [d.id for d in loaded], **(metadata or {})},
            # frames stay stored once when every source stores them so (the copies are checked again)
            frame_stack=stacks.pop() if len(stacks := {s.frame_stack for s in stored}) == 1 else None,
        ).close()
        late: dict[int, dict[str, Any]] = {}
        copied = 0
        for dataset in loaded:
            # One writer per source, so each source's infos/extras structure gets its own shards.
            with EpisodeStore.open_at(staging, new_dataset_id, resolve_root(root)) as store:
                copied += copy_episodes(dataset.iterate_episodes(), store, late=late, first=copied)
        write_late_metadata_by_position(staging, late)  # metadata set after the fact, keys differing by episode
    except BaseException:
        discard_staging(staging, resolve_root(root))
        raise
    return Staged(staging, final, exists)


def publish_staged(parts: Sequence[Staged], root: str | os.PathLike[str] | None = None, *,
                   overwrite: bool = False) -> None:
    """Publish staged datasets all-or-nothing (store/layout/publish_journal.py); on an error before the commit
    point every staging folder is removed."""
    root_path = resolve_root(root)
    publish_together([(p.staging, p.final) for p in parts], root_path, marker=DATASET_FILE,
                     overwrite=overwrite, exists_messages=[p.exists_message for p in parts],
                     discard=lambda staging: discard_staging(staging, root_path))


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
    (``first`` + index), for :func:`~vcollect.store.layout.episode_metadata.write_late_metadata_by_position`.
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
