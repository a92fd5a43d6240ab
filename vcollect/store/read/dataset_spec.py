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

    ``data_path`` is the dataset directory (Minari's points at its ``data/`` folder; vcollect datasets have
    none). ``minari_version`` is the version of Minari a dataset was imported from, else None: vcollect
    datasets are not tied to a Minari version. Frozen: change metadata with ``Dataset.update_metadata``.
    A dataset loaded by the path of a folder not named like an id (``.../saved``) has that name as its
    ``dataset_id`` and ``dataset_name``, no namespace and no ``version`` (None, as Minari's spec of an id
    without one).
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
