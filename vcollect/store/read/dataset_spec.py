"""DatasetSpec: what ``Dataset.spec`` returns, Minari's ``MinariDatasetSpec`` fields plus vcollect's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from vcollect.store.layout.naming import is_dataset_id, parse_dataset_id

__all__ = ["DatasetSpec"]


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset (view) described at a glance: Minari's spec fields, plus ``eval_env_spec`` and ``metadata``.

    Frozen: change metadata with ``Dataset.update_metadata``. ``namespace``, ``dataset_name`` and ``version``
    are read from ``dataset_id``. A dataset loaded by the path of a folder not named like an id (``.../saved``)
    has that name as its ``dataset_id`` and ``dataset_name``, no namespace and no ``version`` (None, as
    Minari's spec of an id without one).

    Attributes:
        env_spec: The env the episodes came from; None when not recorded.
        total_episodes: Episodes in the dataset (view).
        total_steps: Steps in the dataset (view).
        dataset_id: The dataset's id.
        combined_datasets: The ids of the datasets it was combined from (empty when it was not).
        observation_space: The observation space.
        action_space: The action space.
        data_path: The dataset directory (Minari's points at its ``data/`` folder; vcollect datasets have
            none).
        minari_version: The version of Minari the dataset was imported from, else None: vcollect datasets
            are not tied to a Minari version.
        eval_env_spec: The evaluation env; None when not recorded.
        metadata: The dataset metadata (author, description, ...).
    """

    env_spec: gym.envs.registration.EnvSpec | None
    total_episodes: int
    total_steps: int
    dataset_id: str
    combined_datasets: list[str]
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    data_path: str
    minari_version: str | None
    eval_env_spec: gym.envs.registration.EnvSpec | None
    metadata: dict[str, Any]
    namespace: str | None = field(init=False)
    dataset_name: str = field(init=False)
    version: int | None = field(init=False)

    def __post_init__(self) -> None:
        namespace: str | None
        version: int | None
        if is_dataset_id(self.dataset_id):
            namespace, name, version = parse_dataset_id(self.dataset_id)
        else:  # the folder name of a dataset loaded by its path
            namespace, name, version = None, self.dataset_id, None
        object.__setattr__(self, "namespace", namespace)
        object.__setattr__(self, "dataset_name", name)
        object.__setattr__(self, "version", version)
