"""The worker side of DistributedCollector: what one Ray actor runs (a vector env, a policy, a Collector and
its episode sink), and how its failures cross Ray back to the driver.

Worker methods never raise through Ray: they reply ``(True, value)`` or ``(False, RemoteFailure)`` and the
driver raises the failure again. A worker's sink is either its own EpisodeStore on a filesystem all nodes
share, or (``transport="object_store"``) a RemoteSink sending its episodes to the driver-side writer actor.
"""

from __future__ import annotations

import functools
import importlib
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vcollect.distributed.transport import RemoteSink
from vcollect.envs.ray_env import require_ray
from vcollect.errors import DatasetNotFoundError, EnvWorkerError
from vcollect.stats import CollectStats
from vcollect.store.layout.naming import dataset_path
from vcollect.store.write.options import StoreOptions

if TYPE_CHECKING:
    from vcollect.store.write.writer import EpisodeStore

COLLECTOR_KINDS = ("sync", "async")
"""Values of DistributedCollector(collector=...): vcollect.collector.Collector or vcollect.async_collector's."""

_TRACEBACK_MARK = "\n--- original traceback ---\n"


def collector_class(kind: str) -> type:
    """The collector class a worker runs: Collector for "sync", AsyncCollector for "async".

    ImportError when "async" is asked for and this vcollect has no vcollect.async_collector.
    """
    if kind == "sync":
        from vcollect.collector import Collector

        return Collector
    if kind != "async":
        raise ValueError(f"collector must be one of {COLLECTOR_KINDS}, got {kind!r}")
    try:
        module = importlib.import_module("vcollect.async_collector")
        cls = module.AsyncCollector
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            "collector='async' runs vcollect.async_collector.AsyncCollector in every worker, but it cannot be "
            f"imported from this vcollect ({exc}); use collector='sync' or upgrade vcollect"
        ) from exc
    return cls  # type: ignore[no-any-return]


@dataclass(frozen=True)
class WorkerReply(CollectStats):
    """A worker's CollectStats plus what the driver needs if the worker dies later: each local env's steps
    already collected in its unfinished episode (counted by this or an earlier call, stored by none yet),
    the names of the shards its writer has committed, and the episodes (and their steps) its writer holds
    in none of those shards yet: they are the first ones its next shards commit."""

    carry: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    shards: tuple[str, ...] = ()
    pending_episodes: int = 0
    pending_steps: int = 0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to build its vector env, policy, collector and store writer."""

    env: Any
    env_kwargs: dict[str, Any]
    backend: str
    backend_kwargs: dict[str, Any]
    num_envs: int
    env_id_offset: int
    policy_fn: Callable[[gym.Space, gym.Space], Any] | None
    seed: int
    collector: str
    store_id: str | None
    root: str | None
    store_options: StoreOptions = field(default_factory=StoreOptions)  # its env_id_offset: replaced by the one above
    seed_every_reset: bool = True
    exploration_noise: bool = False
    unfinished: str = "drop"
    unfinished_hint: str = "DistributedCollector(..., unfinished='truncate')"  # named by the dropped-episodes warning
    sink_actor: Any = None  # transport="object_store": the driver-side ShardWriterActor (store_id is then None)
    sink_key: str = ""  # this worker generation's writer name at the sink actor
    max_in_flight: int = 4
    weights: Any = None  # an ObjectRef of the last set_policy_weights (given to a replacement worker)
    validate: bool = True
    stage_blocks: bool = True
    check_finite: bool = False
    flush_every_call: bool = True  # False: the sink commits per shard size, and on flush/reset/close
    remote: str | None = None  # a remote's URL: the worker writes to a dataset of its own and uploads each shard
    remote_options: dict[str, Any] | None = None  # the remote's fsspec storage options
    dataset_info: bytes | None = None  # with a remote: the dataset.json the worker's own copy starts from


@dataclass(frozen=True)
class RemoteFailure:
    """An exception raised in a worker, in a form that crosses Ray and is raised again by the driver."""

    exc_type: type[BaseException] | None  # None: not a builtin or vcollect type (may not import on the driver)
    type_name: str
    message: str
    traceback_text: str
    env_error: bool = False  # an EnvWorkerError: env_id is global, message has no "env N:" prefix
    env_id: int | None = None

    @classmethod
    def of(cls, exc: BaseException, env_id_offset: int) -> RemoteFailure:
        """Describe exc; an EnvWorkerError's local env id becomes the global one."""
        trace = traceback.format_exc()
        kind = type(exc)
        name = f"{kind.__module__}.{kind.__qualname__}"
        if isinstance(exc, EnvWorkerError):
            text = str(exc).split(_TRACEBACK_MARK, 1)[0]
            prefix = f"env {exc.env_id}: " if exc.env_id is not None else "an env worker: "
            text = text[len(prefix):] if text.startswith(prefix) else text
            env_id = None if exc.env_id is None else exc.env_id + env_id_offset
            local = "" if exc.env_id is None else f"local env {exc.env_id}: "
            return cls(kind, name, local + text, exc.traceback_text or trace, env_error=True, env_id=env_id)
        portable = kind.__module__ == "builtins" or kind.__module__.split(".")[0] == "vcollect"
        return cls(kind if portable else None, name, str(exc), trace)


class CollectorWorker:
    """The body of a worker actor. Every public method replies (True, value) or (False, RemoteFailure)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.offset = 0
        self.collector: Any = None
        self.writer: EpisodeStore | RemoteSink | None = None
        self.started = False
        self.remote: Any = None  # with a remote: where each committed shard is uploaded
        self.local_root: str | None = None  # with a remote: the worker's own datasets root
        self.store_id: str | None = None

    def _guard(self, fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        try:
            return True, fn(*args)
        except Exception as exc:
            return False, RemoteFailure.of(exc, self.offset)

    def setup(self, spec: WorkerSpec) -> tuple[bool, Any]:
        """Build the vector env, policy, store writer and collector; reply with pid, node and spaces."""
        return self._guard(self._setup, spec)

    def collect(
        self, n_step: int | None, n_episode: int | None, random: bool, keep_episode_stats: bool = True
    ) -> tuple[bool, Any]:
        """Collect this worker's quota (with ``flush_every_call``, commit its episodes as a shard), reply with
        its CollectStats (without ``keep_episode_stats``, its episodes' returns and lengths as moments only:
        a reply of a bounded size however many episodes)."""
        return self._guard(self._collect, n_step, n_episode, random, keep_episode_stats)

    def flush(self) -> tuple[bool, Any]:
        """Commit every episode the writer holds; reply its writer's shard names."""
        return self._guard(self._flush)

    def set_weights(self, weights: Any) -> tuple[bool, Any]:
        """policy.load_state_dict(weights) (Ray hands the object-store value in, not the reference)."""
        return self._guard(self._set_weights, weights)

    def reset(self, seed: int | None) -> tuple[bool, Any]:
        """Reset the collector (every env, the buffer), re-seeding its generator when seed is given; commit
        the episodes it stored truncated (unfinished="truncate") and reply its writer's shard names."""
        return self._guard(self._reset, seed)

    def close(self) -> tuple[bool, Any]:
        """Close the collector (commits pending episodes) and the store writer; reply committed episodes."""
        return self._guard(self._close)

    def _setup(self, spec: WorkerSpec) -> dict[str, Any]:
        from vcollect.envs import make_vector

        self.offset = spec.env_id_offset
        self.flush_every_call = spec.flush_every_call
        cls = collector_class(spec.collector)
        envs = make_vector(spec.env, spec.num_envs, spec.backend, env_kwargs=spec.env_kwargs, **spec.backend_kwargs)
        try:
            obs_space, act_space = envs.single_observation_space, envs.single_action_space
            policy = None if spec.policy_fn is None else spec.policy_fn(obs_space, act_space)
            if spec.store_id is not None and spec.remote is not None:
                spec = self._local_copy(spec)
            if spec.store_id is not None:  # the writer shifts env ids to the global ones itself
                self.writer = _open_store(spec, obs_space, act_space)
            elif spec.sink_actor is not None:
                self.writer = RemoteSink(spec.sink_actor, spec.sink_key, obs_space, act_space, spec.max_in_flight)
            if spec.weights is not None and policy is not None:
                policy.load_state_dict(require_ray().get(spec.weights))
            self.collector = cls(
                policy, envs, store=self.writer, seed=spec.seed, seed_every_reset=spec.seed_every_reset,
                exploration_noise=spec.exploration_noise, unfinished=spec.unfinished,
                unfinished_hint=spec.unfinished_hint, validate=spec.validate,
                stage_blocks=spec.stage_blocks, check_finite=spec.check_finite,
            )
        except BaseException:
            envs.close()
            if self.writer is not None:
                self.writer.close()
            raise
        ray = require_ray()
        return {
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "writer": None if self.writer is None else self.writer.writer_name,
            "observation_space": obs_space,
            "action_space": act_space,
        }

    def _local_copy(self, spec: WorkerSpec) -> WorkerSpec:
        """Start the worker's own copy of the dataset (its dataset.json) in a folder of its own, and the remote
        its shards go to; the spec then names that folder as the root."""
        import tempfile

        from vcollect.remote.location import open_remote
        from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR
        from vcollect.store.layout.manifest import MANIFEST_DIR

        assert spec.store_id is not None and spec.dataset_info is not None
        self.remote = open_remote(spec.remote, storage_options=spec.remote_options)
        self.local_root = tempfile.mkdtemp(prefix="vcollect-worker-")
        self.store_id = spec.store_id
        folder = dataset_path(spec.store_id, self.local_root)
        (folder / SHARDS_DIR).mkdir(parents=True)
        (folder / MANIFEST_DIR).mkdir()
        (folder / DATASET_FILE).write_bytes(spec.dataset_info)
        return replace(spec, root=self.local_root)

    def _upload(self) -> None:
        """Send the shards committed so far, with their manifest lines, to the remote (none without one)."""
        if self.remote is not None and self.store_id is not None:
            from vcollect.remote.upload import upload_to

            upload_to(self.remote, self.store_id, self.local_root, metadata=False)

    def _collect(self, n_step: int | None, n_episode: int | None, random: bool, keep_episode_stats: bool) -> WorkerReply:
        stats = self.collector.collect(
            n_step=n_step, n_episode=n_episode, random=random, reset_before_collect=not self.started,
            keep_episode_stats=keep_episode_stats,
        )
        self.started = True
        if self.writer is not None and self.flush_every_call:
            self.writer.flush()
        buffer = self.collector.buffer
        carry = np.zeros(buffer.num_envs, dtype=np.int64)
        unfinished = buffer.unfinished()
        carry[unfinished] = buffer.episode_lengths[unfinished]
        shards, episodes, steps = self._written()
        self._upload()  # every shard the reply names is on the remote before the driver counts it
        # episodes given up on restarted envs, named by their env ids across all workers (as stored)
        abandoned = tuple(a._replace(env_id=a.env_id + self.offset) for a in stats.abandoned)
        return WorkerReply(stats.n_collected_steps, stats.n_collected_episodes, stats.collect_time, stats.returns,
                           stats.lens, returns_moments=stats.returns_moments, lens_moments=stats.lens_moments,
                           abandoned=abandoned, carry=carry, shards=shards, pending_episodes=episodes,
                           pending_steps=steps)

    def _written(self) -> tuple[tuple[str, ...], int, int]:
        """(committed shard names, episodes and steps held in none of them), read as one consistent snapshot:
        a background commit that settles between the reads is read again."""
        if self.writer is None:
            return (), 0, 0
        while True:
            shards = self.writer.shards_written
            episodes, steps = self.writer.pending_episodes, self.writer.pending_steps
            if len(self.writer.shards_written) == len(shards):
                return tuple(p.name for p in shards), int(episodes), int(steps)

    def _flush(self) -> tuple[str, ...]:
        if self.writer is None:
            return ()
        self.writer.flush()
        names = tuple(p.name for p in self.writer.shards_written)
        self._upload()
        return names

    def _set_weights(self, weights: Any) -> None:
        policy = self.collector.policy
        load = getattr(policy, "load_state_dict", None)
        if not callable(load):
            raise TypeError(
                f"the workers' policy ({type(policy).__name__}) has no load_state_dict(weights): policy_fn must "
                "return a policy that takes new weights, e.g. a TorchPolicy"
            )
        load(weights)

    def _reset(self, seed: int | None) -> tuple[str, ...]:
        self.collector.reset(seed=seed)
        self.started = True
        if self.writer is None:
            return ()
        self.writer.flush()  # committed now, the steps they carried are no longer owed by this worker
        names = tuple(p.name for p in self.writer.shards_written)
        self._upload()
        return names

    def _close(self) -> int:
        try:
            if self.collector is not None:
                self.collector.close()
        finally:
            if self.writer is not None:
                self.writer.close()
        self._upload()
        if self.local_root is not None:
            import shutil

            shutil.rmtree(self.local_root, ignore_errors=True)
        return 0 if self.writer is None else int(self.writer.committed_episodes)


def _open_store(spec: WorkerSpec, obs_space: gym.Space, act_space: gym.Space) -> EpisodeStore:
    """The worker's own writer to the shared dataset, storing global env ids (local id + the worker's offset)."""
    from vcollect.store import EpisodeStore

    assert spec.store_id is not None
    try:
        return EpisodeStore.open(
            spec.store_id, spec.root, observation_space=obs_space, action_space=act_space,
            options=spec.store_options, env_id_offset=spec.env_id_offset,
        )
    except DatasetNotFoundError as exc:
        raise DatasetNotFoundError(
            f"dataset {spec.store_id!r} is not reachable at {str(dataset_path(spec.store_id, spec.root))!r} "
            f"from this worker: every worker appends to the same directory, so it must be on a filesystem that "
            f"all Ray nodes mount at that path, and the dataset must exist (EpisodeStore.create). ({exc})"
        ) from exc


@functools.lru_cache(maxsize=1)
def remote_worker() -> Any:
    """CollectorWorker as a Ray actor class (made once, when first needed)."""
    return require_ray().remote(CollectorWorker)
