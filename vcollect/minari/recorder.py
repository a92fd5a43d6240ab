"""DataCollector: Minari's recording wrapper for one env, writing finished episodes to disk as it goes.

Behaves like ``minari.DataCollector`` (autoseeded resets, an unfinished episode truncated on reset,
``StepDataCallback``/``EpisodeMetadataCallback`` called with Minari's keyword arguments,
``create_dataset``/``add_to_dataset``), with three differences that are the point of it:

* Finished episodes go to a *staging dataset* and are committed as crash-safe shards every
  ``flush_every`` episodes (or ``flush_steps`` steps, or ``flush_seconds``), so a killed process keeps
  them. The staging dataset is an ordinary vcollect dataset named
  ``_staging/<env id>-<UTC time>-p<pid>-<random>-v0`` under the collector's root
  (``DataCollector.staging_id``); after a crash, ``load_dataset`` it (``list_datasets()`` lists it).
  ``create_dataset`` renames it to the final id (no copy); ``close()`` deletes it when empty and
  otherwise keeps it with a warning (Minari deletes everything on close). A collector nobody closes
  does the same at interpreter exit or when garbage-collected (vcollect.exit_commits), its env left open.
* Keys a StepDataCallback adds are stored under ``extras/`` and read back (Minari drops them).
* The per-step path only appends to Python lists; arrays are built once per episode, and the
  default callback is not even called (its result would be the step's own values).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from vcollect.errors import (
    CollectorStateError,
    DatasetExistsError,
    EnvSpecNotStoredWarning,
    InfoStructureError,
    SpaceMismatchError,
)
from vcollect.exit_commits import ExitStage, register_exit_close
from vcollect.infos import InfoPath, flatten_info, info_name, nest_info, stack_rows
from vcollect.minari.callbacks import (
    STEP_DATA_KEYS,
    EpisodeMetadataCallback,
    StepDataCallback,
    reward_statistics,
)
from vcollect.minari.recorder_compat import flush_steps_from, save_to_disk
from vcollect.minari.reference_scores import reference_scores
from vcollect.spaces import batch_contains, flatten_batch, leaves, unflatten_batch
from vcollect.store.layout.catalog import delete_dataset
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.naming import locate_dataset, resolve_root
from vcollect.store.layout.schema import to_json
from vcollect.store.read.reader import Dataset, load_dataset, open_dataset_at, reload_in_place
from vcollect.store.transforms import copy_episodes
from vcollect.store.write.writer import EpisodeStore

__all__ = ["STAGING_NAMESPACE", "DataCollector"]

#: Namespace of the staging datasets a DataCollector records into before ``create_dataset``.
STAGING_NAMESPACE = "_staging"

# Minari's own default callback returns the step's values unchanged: treat it like ours.
_DEFAULT_STEP_CALLBACKS = {
    ("vcollect.minari.callbacks", "StepDataCallback"),
    ("minari.data_collector.callbacks.step_callback", "StepDataCallback"),
}

_DEFAULT_METADATA_CALLBACKS = {
    ("vcollect.minari.callbacks", "EpisodeMetadataCallback"),
    ("minari.data_collector.callbacks.episode_metadata", "EpisodeMetadataCallback"),
}


def _structure_error(what: str, expected: tuple[InfoPath, ...], got: tuple[InfoPath, ...], when: str) -> InfoStructureError:
    missing = [info_name(p) for p in expected if p not in set(got)]
    new = [info_name(p) for p in got if p not in set(expected)]
    key = (missing or new)[0] if (missing or new) else "?"
    return InfoStructureError(
        f"{what} key {key!r} {'is missing' if missing else 'is new'} {when}: the {what} structure is fixed by "
        f"{'the first reset' if what == 'info' else 'the first step'} (keys {[info_name(p) for p in expected]}), "
        f"got keys {[info_name(p) for p in got]}"
    )


class _Episode:
    """The running episode: lists of per-step values, turned into arrays once when it ends."""

    __slots__ = ("obs", "act", "rew", "term", "trunc", "infos", "extras", "start_extras", "step_extras", "seed", "options")

    def __init__(self, seed: int | None, options: dict[str, Any] | None) -> None:
        self.obs: list[Any] = []
        self.act: list[Any] = []
        self.rew: list[Any] = []
        self.term: list[Any] = []
        self.trunc: list[Any] = []
        self.infos: dict[InfoPath, list[Any]] | None = None
        self.extras: dict[InfoPath, list[Any]] = {}
        self.start_extras: tuple[InfoPath, ...] = ()
        self.step_extras: tuple[InfoPath, ...] | None = None
        self.seed = seed
        self.options = options


class DataCollector(gym.Wrapper[Any, Any, Any, Any]):
    """Minari-compatible recording wrapper whose recorded episodes survive a crash.

    Wrap one env, step it as usual, then ``create_dataset(id, ...)`` (or ``add_to_dataset``). See the
    module docstring for the staging dataset; ``flush_every`` bounds what a crash can lose.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        step_data_callback: type[Any] | Any = StepDataCallback,
        episode_metadata_callback: type[Any] | Any = EpisodeMetadataCallback,
        record_infos: bool = False,
        *,
        flush_every: int = 1000,
        flush_steps: int = 20_000,
        flush_seconds: float | None = 30.0,
        root: str | os.PathLike[str] | None = None,
        observation_space: gym.Space[Any] | None = None,
        action_space: gym.Space[Any] | None = None,
        seed: int | None = None,
        max_buffer_steps: int | None = None,
    ) -> None:
        """Wrap ``env``. Callbacks are classes (instantiated here, as Minari does) or instances.

        The finished episodes are committed to the staging dataset once ``flush_every`` episodes or
        ``flush_steps`` steps are pending, or ``flush_seconds`` after the last commit (checked when an
        episode ends), whichever comes first; a crash loses at most that much.

        Args:
            env: The env to record.
            step_data_callback: A StepDataCallback class or instance.
            episode_metadata_callback: An EpisodeMetadataCallback class or instance.
            record_infos: Record the info dicts too (their keys fixed by the first).
            flush_every: Episodes pending before a commit.
            flush_steps: Steps pending before a commit.
            flush_seconds: Seconds after the last commit before the next (None: no time limit).
            root: Where the staging and final datasets live (default: ``$VCOLLECT_DATASETS_PATH``, else
                ``~/.vcollect/datasets``).
            observation_space: The dataset's observation space (default: the env's).
            action_space: The dataset's action space (default: the env's).
            seed: Seeds the generator autoseeds are drawn from (default: fresh OS entropy).
            max_buffer_steps: Deprecated name of ``flush_steps`` (recorder_compat.py).

        Raises:
            ValueError: ``flush_every`` or ``flush_steps`` below 1, or a negative ``flush_seconds``.
        """
        super().__init__(env)
        flush_steps = flush_steps_from(max_buffer_steps, flush_steps)
        if flush_every < 1 or flush_steps < 1:
            raise ValueError(f"flush_every and flush_steps must be >= 1, got {flush_every} and {flush_steps}")
        if flush_seconds is not None and flush_seconds < 0:
            raise ValueError(f"flush_seconds must be >= 0 or None, got {flush_seconds}")
        self._step_data_callback = step_data_callback() if isinstance(step_data_callback, type) else step_data_callback
        self._episode_metadata_callback = (
            episode_metadata_callback() if isinstance(episode_metadata_callback, type) else episode_metadata_callback
        )
        cb_type = type(self._step_data_callback)
        self._default_step = (cb_type.__module__, cb_type.__qualname__) in _DEFAULT_STEP_CALLBACKS
        md_type = type(self._episode_metadata_callback)
        self._default_metadata = (md_type.__module__, md_type.__qualname__) in _DEFAULT_METADATA_CALLBACKS
        self._record_infos = bool(record_infos)
        self.flush_every = int(flush_every)
        self.flush_steps = int(flush_steps)
        self.flush_seconds = flush_seconds
        self._last_commit = time.monotonic()
        self._root = resolve_root(root)
        self._dataset_observation_space = observation_space if observation_space is not None else env.observation_space
        self._dataset_action_space = action_space if action_space is not None else env.action_space
        self._obs_nested = len(leaves(self._dataset_observation_space)) != 1 or leaves(self._dataset_observation_space)[0].path != ()
        self._act_nested = len(leaves(self._dataset_action_space)) != 1 or leaves(self._dataset_action_space)[0].path != ()
        self._seed_rng = np.random.default_rng(seed)
        self._seed_block: list[int] = []
        self._env_spec_json = self._spec_json(env.spec, "env")
        self._info_keys: tuple[InfoPath, ...] | None = None  # fixed by the first reset when recording infos
        self._episode: _Episode | None = None
        self._store: EpisodeStore | None = None
        self._staging_id: str | None = None
        self._episodes_recorded = 0
        self._since_flush = 0
        self._closed = False
        self._made_in = os.getpid()
        register_exit_close(self, ExitStage.COLLECTOR)  # its staging dataset settled if never closed

    # ------------------------------------------------------------------ properties

    @property
    def root(self) -> Path:
        """Datasets root of the staging dataset (and of ``create_dataset`` unless given ``root=``)."""
        return self._root

    @property
    def staging_id(self) -> str | None:
        """Id of the staging dataset being recorded into (None before the first reset after a save)."""
        return self._staging_id

    @property
    def recorded_episodes(self) -> int:
        """Finished episodes recorded since the last create_dataset/add_to_dataset."""
        return self._episodes_recorded

    @property
    def committed_episodes(self) -> int:
        """Of those, the episodes already committed to disk (safe from a crash)."""
        return 0 if self._store is None else self._store.committed_episodes

    # ------------------------------------------------------------------ gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env, seeding it with a drawn seed unless ``seed`` is given or ``options={"minari_autoseed": False}``.

        A running episode with at least one step is recorded first, truncated at its last step.

        Args:
            seed: The reset's seed (None: a drawn one, unless autoseeding is turned off).
            options: The reset's options (recorded; they must be JSON-able).

        Returns:
            The env's observation and info.

        Raises:
            CollectorStateError: The collector is closed.
            InfoStructureError: With ``record_infos``, the info's keys differ from the first info's.
        """
        self._check_open()
        self._end_unfinished()
        if seed is None and ((not options) or options.get("minari_autoseed", True)):
            seed = self._next_seed()
        if options is not None:
            to_json(options, "reset options (to be recorded)")
        obs, info = self.env.reset(seed=seed, options=options)
        if self._default_step:
            step_obs, step_info, extras = obs, info, None
        else:
            step_data = self._call_step_callback(obs=obs, info=info)
            step_obs, step_info, extras = step_data["observation"], step_data["info"], self._extras_of(step_data)
        if self._record_infos:
            flat = flatten_info(step_info, "info")
            keys = tuple(flat)
            if self._info_keys is None:
                self._info_keys = keys
            elif keys != self._info_keys:
                raise _structure_error("info", self._info_keys, keys, "at reset")
        self._ensure_store()
        self._start_episode(seed, options, step_obs, step_info, extras)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env and record the transition (what the StepDataCallback returns for it).

        Args:
            action: The action.

        Returns:
            The env's ``(obs, reward, terminated, truncated, info)``.

        Raises:
            CollectorStateError: No reset since the collector was made or a dataset was saved, or it is closed.
        """
        episode = self._episode
        if episode is None:
            self._check_open()
            raise CollectorStateError("call reset() before step() (after create_dataset/add_to_dataset too)")
        obs, rew, terminated, truncated, info = self.env.step(action)
        if self._default_step:
            episode.obs.append(obs.copy() if type(obs) is np.ndarray else obs)
            episode.act.append(action.copy() if type(action) is np.ndarray else action)
            episode.rew.append(rew)
            episode.term.append(terminated)
            episode.trunc.append(truncated)
            if self._record_infos:
                self._add_info(episode, info)
            if self._obs_nested or self._act_nested:
                self._flatten_last(episode)
            if terminated or truncated:
                self._finish(episode)
                self._start_episode(None, None, obs, info, None)
            return obs, rew, terminated, truncated, info
        step_data = self._call_step_callback(
            obs=obs, info=info, action=action, rew=rew, terminated=terminated, truncated=truncated
        )
        s_obs = step_data["observation"]
        s_act = step_data["action"]
        episode.obs.append(s_obs.copy() if type(s_obs) is np.ndarray else s_obs)
        episode.act.append(s_act.copy() if type(s_act) is np.ndarray else s_act)
        episode.rew.append(step_data["reward"])
        episode.term.append(step_data["terminated"])
        episode.trunc.append(step_data["truncated"])
        if self._record_infos:
            self._add_info(episode, step_data["info"])
        extras = self._extras_of(step_data)
        self._add_step_extras(episode, extras)
        if self._obs_nested or self._act_nested:
            self._flatten_last(episode)
        if step_data["terminated"] or step_data["truncated"]:
            self._finish(episode)
            self._start_episode(None, None, s_obs, step_data["info"], extras)
        return obs, rew, terminated, truncated, info

    def close(self) -> None:
        """Close the env and the staging store; idempotent.

        The running (unfinished) episode is dropped, as Minari does. Finished episodes not yet saved
        with create_dataset/add_to_dataset are kept in the staging dataset (with a warning naming it);
        an empty staging dataset is deleted.
        """
        if self._closed:
            return
        try:
            self._settle_staging("closed")
        finally:
            super().close()

    def close_unclosed(self, why: str) -> None:
        """Settle the staging dataset of a collector nobody closed, as :meth:`close` does, leaving its env open.

        Runs at interpreter exit for a collector still open then, and when an open one is garbage-collected
        (vcollect.exit_commits), so a script that never closes its DataCollector leaves no empty staging
        dataset behind. A collector made in another process (a forked child's copy) is left alone.

        Args:
            why: How the collector was left, for the warning naming the episodes kept.
        """
        if self._closed or os.getpid() != self._made_in:
            return
        self._settle_staging(why)

    def __del__(self) -> None:
        if getattr(self, "_made_in", None) is not None:  # set when __init__ finished
            self.close_unclosed("garbage-collected without close()")

    def _settle_staging(self, how: str) -> None:
        """Mark closed, drop the running episode, commit and close the staging store; delete it when it holds
        no episode, else keep it with a warning naming it and saying ``how`` the collector ended."""
        self._closed = True
        self._episode = None
        if self._store is None:
            return
        store, staging_id = self._store, self._staging_id
        self._store = None
        store.close()
        if store.committed_episodes == 0:
            delete_dataset(store.dataset_id, self._root)
        else:
            warnings.warn(
                f"DataCollector {how} with {store.committed_episodes} recorded episodes not saved by "
                f"create_dataset/add_to_dataset; they are kept in dataset {staging_id!r} under "
                f"{str(self._root)!r} (load_dataset or delete_dataset it)",
                UserWarning,
                stacklevel=3,
            )

    def flush(self) -> None:
        """Commit the finished episodes recorded so far to the staging dataset now."""
        if self._store is not None:
            self._store.flush()
        self._since_flush = 0
        self._last_commit = time.monotonic()

    # ------------------------------------------------------------------ datasets

    def create_dataset(
        self,
        dataset_id: str | os.PathLike[str],
        *,
        eval_env: str | gym.Env[Any, Any] | EnvSpec | None = None,
        algorithm_name: str | None = None,
        author: str | set[str] | None = None,
        author_email: str | set[str] | None = None,
        code_permalink: str | None = None,
        ref_min_score: float | None = None,
        ref_max_score: float | None = None,
        expert_policy: Callable[[Any], Any] | None = None,
        num_episodes_average_score: int = 100,
        description: str | None = None,
        requirements: list[str] | None = None,
        root: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
    ) -> Dataset:
        """Save everything recorded so far as dataset ``dataset_id`` (under ``root``, default the collector's).

        ``dataset_id`` may also be a ``pathlib.Path``: the dataset is then written at that folder, a dataset
        of its own under the folder's parent (``load_dataset(path)`` reads it; ``root`` must be None). A str
        is always an id. The running episode is recorded first, truncated (as Minari does); call reset()
        before stepping again. Metadata keys follow Minari (reference scores computed the same way when
        ``expert_policy`` or ``ref_max_score`` is given). The staging dataset is renamed, not copied;
        the next reset starts a new one.

        Args:
            dataset_id: The new dataset's id.
            eval_env: The evaluation env (an id, env or EnvSpec), recorded as ``eval_env_spec``.
            algorithm_name: Recorded in the metadata.
            author: Recorded in the metadata (a set is stored sorted).
            author_email: Recorded in the metadata (a set is stored sorted).
            code_permalink: Recorded in the metadata.
            ref_min_score: The reference minimum score (computed with a random policy when a score is asked
                for and this is None).
            ref_max_score: The reference maximum score.
            expert_policy: A policy whose average return becomes ``ref_max_score``.
            num_episodes_average_score: The episodes a computed reference score averages.
            description: Recorded in the metadata.
            requirements: Recorded in the metadata.
            root: The datasets root (default: the collector's).
            overwrite: Replace a dataset of that id.

        Returns:
            The new dataset, loaded.

        Raises:
            DatasetExistsError: The id exists and ``overwrite`` is False.
            CollectorStateError: The collector is closed.
            InvalidDatasetIdError: ``dataset_id`` is malformed.
        """
        self._check_open()
        name, target_root, target = locate_dataset(
            dataset_id, self._root if isinstance(dataset_id, str) and root is None else root, str_paths=False
        )
        if not overwrite and (target / DATASET_FILE).exists():
            raise DatasetExistsError(
                f"dataset {name!r} already exists at {str(target)!r}; pass overwrite=True to replace it"
            )
        eval_spec = self._eval_spec(eval_env)
        metadata: dict[str, Any] = {}
        for key, value in (
            ("code_permalink", code_permalink),
            ("author", author),
            ("author_email", author_email),
            ("algorithm_name", algorithm_name),
            ("description", description),
        ):
            if value is not None:
                metadata[key] = sorted(value) if isinstance(value, (set, frozenset)) else value
        metadata.update(reference_scores(
            eval_spec if eval_spec is not None else self.env.spec, ref_min_score=ref_min_score,
            ref_max_score=ref_max_score, expert_policy=expert_policy,
            num_episodes_average_score=num_episodes_average_score,
        ))
        if requirements is not None:
            metadata["requirements"] = list(requirements)

        self._end_unfinished()
        self._episode = None
        store = self._ensure_store()
        store.update_metadata(metadata, eval_env_spec=self._spec_json(eval_spec, "eval_env"))
        if isinstance(dataset_id, str):
            store.move_to(dataset_id, target_root, overwrite=overwrite)
        else:
            store.move_to(target, overwrite=overwrite)
        store.close()
        self._store = None
        self._staging_id = None
        self._episodes_recorded = 0
        self._since_flush = 0
        return open_dataset_at(target, name, target_root)

    def save_to_disk(self, path: str | os.PathLike[str], dataset_metadata: dict[str, Any] | None = None) -> Dataset:
        """Deprecated: ``create_dataset`` at the dataset folder ``path`` (see recorder_compat.save_to_disk).

        Args:
            path: The dataset folder.
            dataset_metadata: Metadata to store with it (create_dataset's keywords go there).

        Returns:
            The new dataset, loaded.
        """
        return save_to_disk(self, Path(path), dataset_metadata)

    def add_to_dataset(self, dataset: Dataset) -> Dataset:
        """Append everything recorded so far to an existing dataset, as Minari does.

        The running episode is recorded first, truncated. The staging dataset is deleted and the next reset
        starts a new one.

        Args:
            dataset: A Dataset or a view; updated in place to include the new episodes, as Minari's is.

        Returns:
            ``dataset``.

        Raises:
            SpaceMismatchError: Its spaces differ from the collector's.
            CollectorStateError: The collector is closed.
        """
        self._check_open()
        for what, theirs, ours in (
            ("observation", dataset.observation_space, self._dataset_observation_space),
            ("action", dataset.action_space, self._dataset_action_space),
        ):
            if theirs != ours:
                raise SpaceMismatchError(
                    f"cannot add to dataset {dataset.id!r}: its {what} space is {theirs}, the recorded one is {ours}"
                )
        self._end_unfinished()
        self._episode = None
        target_root = dataset.path.parents[len(dataset.id.split("/")) - 1]
        if self._store is not None:
            self._store.flush()  # the staging dataset stays open and intact until the copy succeeded
            staged = load_dataset(self._store.dataset_id, self._root)
            before = open_dataset_at(dataset.path, dataset.id, target_root).total_episodes
            with EpisodeStore.open_at(
                dataset.path, dataset.id, target_root,
                observation_space=self._dataset_observation_space, action_space=self._dataset_action_space,
            ) as target:
                copy_episodes(staged.iterate_episodes(), target)
            self._store.close()
            delete_dataset(self._store.dataset_id, self._root)
            self._store = None
            self._staging_id = None
            self._episodes_recorded = 0
            self._since_flush = 0
            # Minari semantics: the caller's Dataset object sees the appended episodes.
            reload_in_place(dataset, np.arange(before, before + staged.total_episodes, dtype=np.int64))
        return dataset

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorStateError("this DataCollector is closed")

    def _spec_json(self, spec: EnvSpec | None, what: str) -> str | None:
        if spec is None:
            return None
        try:
            return spec.to_json()
        except (TypeError, ValueError) as exc:
            warnings.warn(
                f"the {what} spec {spec.id!r} is not JSON-serializable ({exc}); the dataset will not be able to "
                "recover the environment",
                EnvSpecNotStoredWarning,
                stacklevel=3,
            )
            return None

    def _eval_spec(self, eval_env: str | gym.Env[Any, Any] | EnvSpec | None) -> EnvSpec | None:
        if eval_env is None:
            return None
        if isinstance(eval_env, str):
            return gym.spec(eval_env)
        if isinstance(eval_env, EnvSpec):
            return eval_env
        if isinstance(eval_env, gym.Env):
            if eval_env.spec is None:
                raise ValueError("eval_env has no spec (make it with gym.make, or pass its id or EnvSpec)")
            return eval_env.spec
        raise TypeError(f"eval_env must be an env id, a gymnasium Env or an EnvSpec, got {type(eval_env).__name__}")

    def _next_seed(self) -> int:
        """A fresh autoseed: 63 random bits (fits int64 everywhere), drawn in blocks to keep resets cheap."""
        if not self._seed_block:
            self._seed_block = self._seed_rng.integers(0, 2**63, size=256, dtype=np.int64).tolist()[::-1]
        return self._seed_block.pop()

    def _ensure_store(self) -> EpisodeStore:
        if self._store is None:
            spec = self.env.spec
            env_name = re.sub(r"[^-_\w]", "_", spec.id) if spec is not None else "env"
            stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
            staging_id = f"{STAGING_NAMESPACE}/{env_name}-{stamp}-p{os.getpid()}-{uuid.uuid4().hex[:8]}-v0"
            self._store = EpisodeStore.create(
                staging_id, self._dataset_observation_space, self._dataset_action_space,
                env_spec=self._env_spec_json, root=self._root, shard_steps=self.flush_steps,
            )
            self._staging_id = staging_id
            self._episodes_recorded = 0
            self._since_flush = 0
        return self._store

    def _call_step_callback(self, **kwargs: Any) -> Mapping[str, Any]:
        step_data = self._step_data_callback(env=self.env, **kwargs)
        if not isinstance(step_data, Mapping):
            raise TypeError(f"the StepDataCallback must return a dict, got {type(step_data).__name__}")
        missing = [key for key in ("observation", "action", "reward", "terminated", "truncated", "info") if key not in step_data]
        if missing:
            raise KeyError(f"the StepDataCallback's result lacks the keys {missing}")
        return step_data

    @staticmethod
    def _extras_of(step_data: Mapping[str, Any]) -> dict[InfoPath, Any]:
        extra = {key: value for key, value in step_data.items() if key not in STEP_DATA_KEYS}
        return flatten_info(extra, "extras") if extra else {}

    def _start_episode(
        self, seed: int | None, options: dict[str, Any] | None, obs: Any, info: Mapping[str, Any],
        extras: dict[InfoPath, Any] | None,
    ) -> None:
        episode = _Episode(seed, options)
        episode.obs.append(obs.copy() if type(obs) is np.ndarray else obs)
        if self._obs_nested:
            episode.obs[-1] = [np.array(v) for v in flatten_batch(self._dataset_observation_space, obs)]
        if self._record_infos:
            flat = flatten_info(info, "info")
            episode.infos = {path: [value] for path, value in flat.items()}
        if extras:
            episode.start_extras = tuple(extras)
            episode.extras = {path: [value] for path, value in extras.items()}
        self._episode = episode

    def _flatten_last(self, episode: _Episode) -> None:
        """Nested spaces: keep a copy of each leaf of the last observation/action (envs may reuse arrays)."""
        if self._obs_nested:
            episode.obs[-1] = [np.array(v) for v in flatten_batch(self._dataset_observation_space, episode.obs[-1])]
        if self._act_nested:
            episode.act[-1] = [np.array(v) for v in flatten_batch(self._dataset_action_space, episode.act[-1])]

    def _add_info(self, episode: _Episode, info: Mapping[str, Any]) -> None:
        flat = flatten_info(info, "info")
        assert self._info_keys is not None and episode.infos is not None
        if tuple(flat) != self._info_keys:
            raise _structure_error("info", self._info_keys, tuple(flat), f"at step {len(episode.rew)}")
        for path, value in flat.items():
            episode.infos[path].append(value)

    def _add_step_extras(self, episode: _Episode, extras: dict[InfoPath, Any]) -> None:
        keys = tuple(extras)
        if episode.step_extras is None:
            missing = [p for p in episode.start_extras if p not in extras]
            if missing:
                raise _structure_error("extras", episode.start_extras, keys, "at the first step of the episode")
            episode.step_extras = keys
        elif keys != episode.step_extras:
            raise _structure_error("extras", episode.step_extras, keys, f"at step {len(episode.rew)}")
        for path, value in extras.items():
            episode.extras.setdefault(path, []).append(value)

    def _arrays(self, rows: list[Any], space: gym.Space[Any], nested: bool, what: str) -> Any:
        if not nested:
            return stack_rows(rows, what)
        columns = [stack_rows([row[i] for row in rows], what) for i in range(len(leaves(space)))]
        return unflatten_batch(space, columns)

    def _end_unfinished(self) -> None:
        """Record the running episode if it has steps, truncating its last step (Minari's rule)."""
        episode = self._episode
        if episode is not None and episode.rew:
            if not episode.term[-1]:
                episode.trunc[-1] = True
            self._finish(episode)
        self._episode = None

    def _finish(self, episode: _Episode) -> None:
        """Turn a finished episode into arrays and hand it to the staging store."""
        observations = self._arrays(episode.obs, self._dataset_observation_space, self._obs_nested, "observation")
        actions = self._arrays(episode.act, self._dataset_action_space, self._act_nested, "action")
        rewards = np.asarray(episode.rew, dtype=np.float64)
        terminations = np.asarray(episode.term, dtype=np.bool_)
        truncations = np.asarray(episode.trunc, dtype=np.bool_)
        for what, space, values in (
            ("Observation", self._dataset_observation_space, observations),
            ("Action", self._dataset_action_space, actions),
        ):
            problem = batch_contains(space, values)
            if problem is not None:  # Minari warns and records it anyway
                warnings.warn(f"{what} is not in {what.lower()} space: {problem}", UserWarning, stacklevel=3)
        infos = None
        if episode.infos is not None:
            infos = nest_info({path: stack_rows(values, f"info[{info_name(path)!r}]") for path, values in episode.infos.items()})
        extras = None
        if episode.extras:
            extras = nest_info({path: stack_rows(values, f"extras[{info_name(path)!r}]") for path, values in episode.extras.items()})
        if self._default_metadata:
            metadata = reward_statistics(rewards)
        else:
            metadata = self._episode_metadata_callback(
                {
                    "id": self._episodes_recorded,
                    "observations": observations,
                    "actions": actions,
                    "rewards": rewards,
                    "terminations": terminations,
                    "truncations": truncations,
                    "infos": infos or {},
                }
            )
        store = self._ensure_store()
        store.write_episode(
            observations, actions, rewards, terminations, truncations, seed=episode.seed, env_id=0,
            infos=infos, extras=extras, metadata=metadata or None, options=episode.options,
        )
        self._episodes_recorded += 1
        self._since_flush += 1
        if store.pending_episodes == 0:  # the store committed by itself (flush_steps reached)
            self._since_flush = 0
            self._last_commit = time.monotonic()
        elif self._since_flush >= self.flush_every or (
            self.flush_seconds is not None and time.monotonic() - self._last_commit >= self.flush_seconds
        ):
            self.flush()
