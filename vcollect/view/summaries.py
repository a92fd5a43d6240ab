"""What the dataset pages show, read through the dataset API with bounded memory.

A listing is ``list_datasets``' census (manifest lines standing in for shards; no shard data read), grouped
by namespace. A card holds one dataset's spaces, env spec, metadata, totals and its episode table (id,
return, length, seed), all from the episode tables ``load_dataset`` reads (manifest lines where they hold),
never from step data. ``verify`` is the one slow check (it reads every shard whole): it runs only when asked.
An episode's rewards (its reward curve) are read from that one episode on request.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vcollect.errors import DamagedDatasetError, DatasetError
from vcollect.store import list_datasets, list_local_namespaces, load_dataset, parse_dataset_id, resolve_root
from vcollect.store.layout.dataset_info import read_json_object
from vcollect.store.layout.namespaces import NAMESPACE_METADATA_FILE
from vcollect.store.read.reader import Dataset, StoredDataset

__all__ = ["DatasetCard", "EpisodeTable", "NamespaceGroup", "VerifyReport", "dataset_card", "episode_rewards",
           "listing_groups", "open_for_view", "verify_report"]


@dataclass(frozen=True)
class NamespaceGroup:
    """The datasets of one namespace, as the listing shows them.

    Attributes:
        namespace: The namespace (None: datasets without one).
        description: The namespace's description from its namespace_metadata.json, if any.
        datasets: Id -> ``list_datasets`` entry (totals, size, author, created_at, damage, broken).
        note: Why the namespace's metadata could not be read, if it could not.
    """

    namespace: str | None
    description: str | None
    datasets: dict[str, dict[str, Any]]
    note: str | None = None


def listing_groups(root: str | os.PathLike[str] | None) -> list[NamespaceGroup]:
    """Every dataset under ``root`` grouped by namespace (as ``vcollect list --by-namespace``), empty
    namespaces included; datasets without a namespace first.

    Args:
        root: The datasets root (None: the default root).

    Returns:
        The groups, namespaces sorted by name.
    """
    datasets = list_datasets(root)
    root_path = resolve_root(root)
    members: dict[str | None, dict[str, dict[str, Any]]] = {None: {}}
    for namespace in list_local_namespaces(root):
        members.setdefault(namespace, {})
    for dataset_id, entry in datasets.items():
        members.setdefault(parse_dataset_id(dataset_id)[0], {})[dataset_id] = entry
    groups: list[NamespaceGroup] = []
    if members[None]:
        groups.append(NamespaceGroup(None, None, members[None]))
    for namespace in sorted(n for n in members if n is not None):
        description: str | None = None
        note: str | None = None
        try:  # the namespace is known to exist: its file is read without walking the root again
            metadata = read_json_object(root_path.joinpath(*namespace.split("/"), NAMESPACE_METADATA_FILE)) or {}
            value = metadata.get("description")
            description = None if value is None else str(value)
        except DatasetError as exc:  # an unreadable namespace_metadata.json: said, the datasets still listed
            note = str(exc)
        groups.append(NamespaceGroup(namespace, description, members[namespace], note))
    return groups


@dataclass(frozen=True)
class EpisodeTable:
    """One row per episode: its global id, return, length and reset seed (None when stored unseeded)."""

    ids: np.ndarray
    returns: np.ndarray
    lengths: np.ndarray
    seeds: list[int | None]

    def rows(self) -> list[list[Any]]:
        """``[id, return, length, seed]`` per episode, JSON-ready (a non-finite return as None)."""
        returns = [float(r) if np.isfinite(r) else None for r in self.returns.tolist()]
        return [list(row) for row in zip(self.ids.tolist(), returns, self.lengths.tolist(), self.seeds)]


@dataclass(frozen=True)
class DatasetCard:
    """What a dataset's page shows, gathered without reading step data.

    Attributes:
        dataset_id: The id.
        path: The dataset's folder.
        observation_space: The observation space, as gymnasium prints it.
        action_space: The action space, likewise.
        env_spec: The stored env spec as a JSON object (None when none is stored).
        metadata: dataset.json's metadata (author, description, ...), created_at and format_version.
        total_episodes: Episodes the dataset yields.
        total_steps: Their steps.
        num_shards: Shard files read.
        size_bytes: Their bytes on disk.
        damage: What ``load_dataset`` found damaged (those shards left out of every count here).
        episodes: The episode table.
    """

    dataset_id: str
    path: Path
    observation_space: str
    action_space: str
    env_spec: dict[str, Any] | None
    metadata: dict[str, Any]
    total_episodes: int
    total_steps: int
    num_shards: int
    size_bytes: int
    damage: list[str]
    episodes: EpisodeTable = field(repr=False)


def open_for_view(dataset_id: str, root: str | os.PathLike[str] | None) -> tuple[Dataset, list[str]]:
    """Load a dataset for its page: the whole shards when some are damaged, and the damage found.

    Warnings ``load_dataset`` gives are not thread-safe to catch; callers serving several threads load
    one dataset at a time.

    Args:
        dataset_id: The dataset's id.
        root: The datasets root.

    Returns:
        The dataset (its whole shards) and one line per damaged shard (empty for a sound dataset).

    Raises:
        DatasetNotFoundError: No such dataset.
        DatasetError: dataset.json cannot be read or checked.
    """
    try:
        return load_dataset(dataset_id, root=root), []
    except DamagedDatasetError as exc:
        damage = [str(problem) for problem in exc.problems]
    with warnings.catch_warnings():  # the damage is shown on the page, not warned about
        warnings.simplefilter("ignore", UserWarning)
        return load_dataset(dataset_id, root=root, on_damage="skip"), damage


def dataset_card(dataset: Dataset, damage: list[str] | None = None) -> DatasetCard:
    """The card of ``dataset``: spaces, env spec, metadata, totals and the episode table.

    Args:
        dataset: A loaded dataset (every episode of it is listed).
        damage: What was found damaged when it was loaded (``open_for_view``).

    Returns:
        The card.
    """
    spec_json = StoredDataset(dataset).env_spec_json
    env_spec = None if spec_json is None else json.loads(spec_json)
    shards = StoredDataset(dataset).shard_paths
    size = 0
    for shard in shards:
        try:
            size += shard.stat().st_size
        except OSError:  # removed since the load; the page shows what was read
            continue
    seeds = [row.get("seed") for row in dataset.get_episode_metadata()]
    table = EpisodeTable(
        ids=np.asarray(dataset.episode_indices, dtype=np.int64),
        returns=np.asarray(dataset.episode_returns, dtype=np.float64),
        lengths=np.asarray(dataset.episode_lengths, dtype=np.int64),
        seeds=[None if seed is None else int(seed) for seed in seeds],
    )
    return DatasetCard(
        dataset_id=dataset.id,
        path=dataset.path,
        observation_space=str(dataset.observation_space),
        action_space=str(dataset.action_space),
        env_spec=env_spec,
        metadata={k: v for k, v in dataset.metadata.items() if k != "dataset_id" and v is not None},
        total_episodes=dataset.total_episodes,
        total_steps=dataset.total_steps,
        num_shards=len(shards),
        size_bytes=size,
        damage=list(damage or []),
        episodes=table,
    )


@dataclass(frozen=True)
class VerifyReport:
    """What ``Dataset.verify`` found: one line per problem, and what was checked."""

    problems: list[str]
    shards: int
    episodes: int

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (``ok``, ``problems``, ``shards``, ``episodes``)."""
        return {"ok": not self.problems, "problems": self.problems, "shards": self.shards,
                "episodes": self.episodes}


def verify_report(dataset: Dataset) -> VerifyReport:
    """Run ``vcollect verify``'s check (without replays) on ``dataset``: reads every shard whole.

    Args:
        dataset: The loaded dataset.

    Returns:
        The report.
    """
    problems = dataset.verify()
    return VerifyReport(problems=list(problems), shards=len(StoredDataset(dataset).shard_paths),
                        episodes=dataset.total_episodes)


def episode_rewards(dataset: Dataset, episode_id: int) -> np.ndarray:
    """The rewards of the episode with global id ``episode_id``, one per step (float64).

    Args:
        dataset: The loaded dataset.
        episode_id: The episode's global id.

    Returns:
        Its T rewards.
    """
    episode = next(iter(dataset.iterate_episodes([int(episode_id)])))
    return np.asarray(episode.rewards, dtype=np.float64)
