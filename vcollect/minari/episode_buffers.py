"""Minari's "collect it yourself" API: StepData, EpisodeBuffer, create_dataset_from_buffers.

Episodes built step by step in ``EpisodeBuffer``s (as Minari's docs teach) are written through an
``EpisodeStore``: shards committed atomically, the dataset published under its id with one rename when
complete (a failure part-way leaves nothing under the id). Differences from Minari, on purpose: no jax
is needed to append steps; every buffer is checked against the spaces before anything is written (an
error names the episode and the key); vcollect's own format is HDF5 shards, so ``data_format`` is
"hdf5" or None (write Arrow/Parquet with ``export_minari(..., data_format=...)``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from vcollect.errors import DatasetExistsError
from vcollect.minari.reference_scores import reference_scores
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.layout.staging import discard_staging, new_staging_dir
from vcollect.store.read.reader import Dataset, load_dataset
from vcollect.store.transforms import Staged, publish_staged
from vcollect.store.write.episode_lists import check_episode_lists, write_episode_lists
from vcollect.store.write.writer import EpisodeStore

__all__ = ["EpisodeBuffer", "StepData", "create_dataset_from_buffers"]


class StepData(TypedDict):
    """One env step as Minari's StepDataCallback returns it (action, reward and flags are None at a reset)."""

    observation: Any
    action: Any
    reward: Any
    terminated: Any
    truncated: Any
    info: dict[str, Any]


def _append(tree: Any, value: Any) -> Any:
    """``value`` appended leaf by leaf to the lists of ``tree`` (dicts and tuples nest; None starts lists)."""
    if isinstance(value, dict):
        tree = tree if isinstance(tree, dict) else {}
        return {k: _append(tree.get(k), v) for k, v in value.items()}
    if isinstance(value, tuple):
        tree = tree if isinstance(tree, tuple) else (None,) * len(value)
        return tuple(_append(t, v) for t, v in zip(tree, value))
    return [*(tree if isinstance(tree, list) else ([] if tree is None else [tree])), value]


@dataclasses.dataclass(frozen=True)
class EpisodeBuffer:
    """One episode's data, as Minari's EpisodeBuffer. ``add_step_data`` returns a new buffer with the step
    appended.

    Attributes:
        id: The episode's id (None: numbered when stored).
        seed: The seed its reset took (None: unseeded).
        options: The options its reset took.
        observations: T+1 entries (Dict/Tuple spaces as dicts and tuples of lists).
        actions: T entries (nested as the observations).
        rewards: T rewards.
        terminations: T terminations.
        truncations: T truncations.
        infos: The infos, as lists per key (None: none).
    """

    id: int | None = None
    seed: int | None = None
    options: dict[str, Any] | None = None
    observations: Any = None
    actions: Any = None
    rewards: list[Any] = dataclasses.field(default_factory=list)
    terminations: list[Any] = dataclasses.field(default_factory=list)
    truncations: list[Any] = dataclasses.field(default_factory=list)
    infos: dict[str, Any] | None = None

    def add_step_data(self, step_data: StepData) -> EpisodeBuffer:
        """Append one step.

        Args:
            step_data: The step (the first step data, a reset's, holds only an observation).

        Returns:
            A new buffer: this one with ``step_data`` appended.
        """
        first = self.observations is None
        return dataclasses.replace(
            self,
            observations=_append(self.observations, step_data["observation"]),
            actions=self.actions if first and step_data.get("action") is None else _append(self.actions,
                                                                                           step_data["action"]),
            rewards=self.rewards if first else [*self.rewards, step_data["reward"]],
            terminations=self.terminations if first else [*self.terminations, step_data["terminated"]],
            truncations=self.truncations if first else [*self.truncations, step_data["truncated"]],
            infos=_append(self.infos, step_data.get("info") or {}) if step_data.get("info") else self.infos,
        )

    def __len__(self) -> int:
        return len(self.rewards)


def _env_parts(env: str | gym.Env[Any, Any] | EnvSpec | None) -> tuple[EnvSpec | None, gym.Env[Any, Any] | None]:
    if env is None:
        return None, None
    if isinstance(env, EnvSpec):
        return env, None
    if isinstance(env, str):
        return gym.spec(env), None
    if isinstance(env, gym.Env):
        return env.spec, env
    raise TypeError(f"env must be an env id, a gymnasium Env or an EnvSpec, got {type(env).__name__}")


def create_dataset_from_buffers(
    dataset_id: str,
    buffer: Sequence[EpisodeBuffer],
    env: str | gym.Env[Any, Any] | EnvSpec | None = None,
    eval_env: str | gym.Env[Any, Any] | EnvSpec | None = None,
    algorithm_name: str | None = None,
    author: str | set[str] | None = None,
    author_email: str | set[str] | None = None,
    code_permalink: str | None = None,
    action_space: gym.Space[Any] | None = None,
    observation_space: gym.Space[Any] | None = None,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    expert_policy: Callable[[Any], Any] | None = None,
    num_episodes_average_score: int = 100,
    description: str | None = None,
    data_format: str | None = None,
    requirements: list[str] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
) -> Dataset:
    """Minari's create_dataset_from_buffers: a new vcollect dataset holding the ``buffer``'s episodes (see the
    module docstring for what differs).

    Args:
        dataset_id: The new dataset's id.
        buffer: The episodes.
        env: The env they came from (an id, env or EnvSpec); the spaces come from it unless given.
        eval_env: The evaluation env, recorded as the dataset's ``eval_env_spec``.
        algorithm_name: Recorded in the metadata.
        author: Recorded in the metadata (a set is stored sorted).
        author_email: Recorded in the metadata (a set is stored sorted).
        code_permalink: Recorded in the metadata.
        action_space: The action space (needed without ``env``).
        observation_space: The observation space (needed without ``env``).
        ref_min_score: The reference minimum score (computed with a random policy when a score is asked
            for and this is None).
        ref_max_score: The reference maximum score.
        expert_policy: A policy whose average return becomes ``ref_max_score``.
        num_episodes_average_score: The episodes a computed reference score averages.
        description: Recorded in the metadata.
        data_format: None or "hdf5" (vcollect datasets are HDF5 shards).
        requirements: Recorded in the metadata.
        root: The datasets root (None: the default).

    Returns:
        The new dataset, loaded.

    Raises:
        ValueError: Another ``data_format``, no env and not both spaces, or episodes that do not fit the
            spaces.
        DatasetExistsError: The id exists.
    """
    parse_dataset_id(dataset_id)
    if data_format not in (None, "hdf5"):
        raise ValueError(f"data_format {data_format!r}: vcollect datasets are HDF5 shards; write Minari's other "
                         "layouts with export_minari(..., data_format=...)")
    spec, given_env = _env_parts(env)
    eval_spec, _ = _env_parts(eval_env)
    if observation_space is None or action_space is None:
        if spec is None and given_env is None:
            raise ValueError("Both observation space and action space must be provided, if env is None")
        made = given_env if given_env is not None else gym.make(spec)  # type: ignore[arg-type]
        observation_space = observation_space or made.observation_space
        action_space = action_space or made.action_space
    final = dataset_path(dataset_id, root)
    exists = f"dataset {dataset_id!r} already exists at {str(final)!r}; pick another id or version"
    if (final / DATASET_FILE).exists():
        raise DatasetExistsError(exists)
    episodes = check_episode_lists(buffer, observation_space, action_space)
    metadata: dict[str, Any] = {k: (sorted(v) if isinstance(v, set) else v) for k, v in (
        ("algorithm_name", algorithm_name), ("author", author), ("author_email", author_email),
        ("code_permalink", code_permalink), ("description", description)) if v is not None}
    metadata.update(reference_scores(eval_spec or spec or given_env, ref_min_score=ref_min_score,
                                     ref_max_score=ref_max_score, expert_policy=expert_policy,
                                     num_episodes_average_score=num_episodes_average_score))
    if requirements is not None:
        metadata["requirements"] = list(requirements)
    staging = new_staging_dir(final, resolve_root(root))
    try:
        with EpisodeStore.create_at(staging, dataset_id, observation_space, action_space,
                                    env_spec=None if spec is None else spec.to_json(),
                                    eval_env_spec=None if eval_spec is None else eval_spec.to_json(),
                                    metadata=metadata) as store:
            write_episode_lists(store, episodes)
    except BaseException:
        discard_staging(staging, resolve_root(root))
        raise
    publish_staged([Staged(staging, final, exists)], root)
    return load_dataset(dataset_id, root)
