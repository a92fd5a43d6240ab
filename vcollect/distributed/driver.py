"""DistributedCollector: one Collector per Ray actor, exact totals, every worker writing into one dataset.

Each worker actor builds its own local vector env (``make_vector(env, envs_per_worker, backend)``), its
own policy (``policy_fn(observation_space, action_space)``, called inside the worker), a Collector with
its own ring buffers and, with a ``store``, its own episode sink: an EpisodeStore appending shards to the
dataset on a filesystem all nodes share (``transport="shared_fs"``), or a RemoteSink sending episodes
through Ray's object store to one writer actor on the driver's node (``transport="object_store"``). A
``collect`` call is one actor call per worker with that worker's exact quota. A worker's sink commits a
shard whenever the store's ``shard_steps``/``shard_bytes`` are pending, and on ``flush``, ``reset`` and
``close`` (``flush_every_call``: after every call too). Weights are put in the object store once per
``set_policy_weights`` and fetched by every worker (and by replacements).

With ``max_worker_restarts``, a worker that dies is replaced by a new actor (same index and env ids, a
new seed); what it had committed counts (read back from its shards), the rest of its quota is collected
by the replacement, so the call still returns exact totals. Worker methods never raise through Ray (see
distributed_worker); the driver raises their failures again, naming the worker.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.distributed.salvage import committed_in_call, remote_writer_lines, writer_shards
from vcollect.distributed.transport import writer_actor
from vcollect.distributed.worker import (
    COLLECTOR_KINDS,
    RemoteFailure,
    WorkerReply,
    WorkerSpec,
    collector_class,
    remote_worker,
)
from vcollect.envs.ray_env import ensure_ray
from vcollect.errors import (
    CollectorStateError,
    EnvWorkerError,
    UnfinishedEpisodesWarning,
    VCollectError,
    WorkerLostError,
)
from vcollect.remote.location import open_remote
from vcollect.remote.upload import upload_to
from vcollect.stats import CollectStats
from vcollect.store.layout.dataset_info import DATASET_FILE, read_side_file
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.write.options import StoreOptions, merge_store_options

__all__ = ["COLLECTOR_KINDS", "TRANSPORTS", "DistributedCollector", "derive_seeds", "replacement_seed"]

TRANSPORTS = ("shared_fs", "object_store")
"""Values of DistributedCollector(transport=...): how episodes reach the dataset."""

_CLOSE_TIMEOUT_S = 60.0


def derive_seeds(seed: int | None, num_workers: int) -> tuple[int, list[int]]:
    """The workers' seeds, from numpy's SeedSequence(seed).spawn: independent streams, the same for the same seed.

    Args:
        seed: The root seed (None: the root entropy is drawn, and returned to reproduce the run).
        num_workers: How many worker seeds.

    Returns:
        (root entropy, one seed per worker).
    """
    root = np.random.SeedSequence(seed)
    entropy = int(root.entropy)  # type: ignore[arg-type]
    return entropy, [int(child.generate_state(1, np.uint64)[0]) for child in root.spawn(num_workers)]


def replacement_seed(entropy: int, worker: int, generation: int) -> int:
    """The seed of a replacement worker: SeedSequence(entropy, spawn_key=(worker, generation)), a stream
    distinct from every original worker's (spawn_key (worker,)) and other replacement's.

    Args:
        entropy: The root entropy :func:`derive_seeds` returned.
        worker: The worker index replaced.
        generation: Which replacement of that worker (1 for the first).

    Returns:
        The replacement's seed.
    """
    seq = np.random.SeedSequence(entropy, spawn_key=(worker, generation))
    return int(seq.generate_state(1, np.uint64)[0])


class DistributedCollector:
    """Run one Collector per Ray actor and collect exact totals across them into one dataset.

    Uses the connected Ray cluster, or starts a local one. Every worker's episodes go to their own shards,
    with global env ids ``worker_index * envs_per_worker + local env id``.

    Args:
        env: What make_vector takes (an env id or a zero-argument factory).
        policy_fn: ``policy_fn(observation_space, action_space) -> Policy``, run in each worker (None: only
            ``collect(random=True)``).
        num_workers: How many worker actors.
        envs_per_worker: The envs each worker builds.
        backend: The backend each worker builds its envs on.
        store: The id of an existing dataset under ``root`` (resolved here, on the driver); None: no store.
        root: The datasets root ``store`` lies under.
        seed: Worker seeds come from ``SeedSequence(seed).spawn`` (None: drawn).
        collector: "sync" (Collector) or "async" (AsyncCollector).
        seed_every_reset: Goes to each worker's collector, as to a Collector in this process.
        exploration_noise: The same (the policy's ``add_exploration_noise``, e.g. EpsilonGreedy's).
        unfinished: The same: "drop" or "truncate".
        unfinished_hint: How the workers' UnfinishedEpisodesWarning tells the user to ask for "truncate", for
            an entry point that makes this collector for its user (None: ``DistributedCollector(...,
            unfinished='truncate')``).
        validate: The same.
        stage_blocks: The same.
        check_finite: The same.
        flush_every_call: Commit every worker's episodes before its ``collect`` replies, so the dataset holds
            exactly the episodes reported after every call; False commits a shard per
            ``shard_steps``/``shard_bytes`` and the rest on :meth:`flush`, :meth:`reset` and :meth:`close`
            (the dataset holds exactly the episodes reported after those). None: True when
            ``max_worker_restarts`` > 0 (a replaced worker's uncommitted episodes, counted by earlier calls,
            could not be collected again), else False.
        env_kwargs: Go to make_vector.
        backend_kwargs: Go to make_vector.
        store_kwargs: StoreOptions fields by name, overriding ``store_options``.
        store_options: A :class:`~vcollect.store.StoreOptions` (shard size, compression, background commits)
            for every worker's EpisodeStore.open; each writer's env_id_offset is the worker's, set here.
        worker_options: Go to the actor's ``.options(...)`` (default ``num_cpus=1``).
        startup_timeout: Seconds setup (and a replacement's) waits for the actors to be placed.
        max_worker_restarts: How many times each worker may be replaced after its actor dies (0: a death
            raises, naming the worker; the collector can then only be closed).
        transport: "shared_fs": each worker writes the shards itself, so the path must be on a filesystem
            all nodes mount; "object_store": workers send episodes through Ray's object store to a writer
            actor on the driver's node, so only the driver's node needs the dataset.
        max_in_flight: With "object_store", the unanswered batches each worker may have.
        worker_timeout: Seconds ``collect`` waits for the next worker reply (None: no limit); past it the
            workers still running are killed and handled as dead ones (replaced while restarts last, else
            WorkerLostError), so a worker whose env hangs in-process cannot hang the driver. A worker
            replies once per call, after its whole quota: pick a limit above the longest quota's time.
        remote: A remote's URL (``s3://``, ``gs://``, ``file://``): each worker writes to a dataset of its own
            on its own node and uploads every shard it committed, with its manifest line, before it replies;
            ``close`` publishes the dataset's metadata (the dataset under ``root`` on the driver) on the remote
            last. No shared filesystem; a worker that dies leaves only whole, uploaded shards, which count.
        remote_options: The remote's fsspec storage options.

    Raises:
        ValueError: A count out of range, an unknown ``unfinished`` or ``transport``, an env_id_offset in
            the store options, ``flush_every_call=False`` with restarts, a bad ``worker_timeout``, or
            ``remote`` without ``store`` or with ``transport="object_store"``.
        InvalidDatasetIdError: ``store`` is malformed.
    """

    def __init__(
        self,
        env: str | Callable[..., gym.Env],
        policy_fn: Callable[[gym.Space, gym.Space], Any] | None,
        *,
        num_workers: int,
        envs_per_worker: int,
        backend: str = "dummy",
        store: str | None = None,
        root: str | os.PathLike[str] | None = None,
        seed: int | None = None,
        collector: str = "sync",
        seed_every_reset: bool = True,
        exploration_noise: bool = False,
        unfinished: str = "drop",
        unfinished_hint: str | None = None,
        validate: bool = True,
        stage_blocks: bool = True,
        check_finite: bool = False,
        flush_every_call: bool | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        store_kwargs: Mapping[str, Any] | None = None,
        store_options: StoreOptions | None = None,
        worker_options: Mapping[str, Any] | None = None,
        startup_timeout: float = 300.0,
        max_worker_restarts: int = 0,
        transport: str = "shared_fs",
        max_in_flight: int = 4,
        worker_timeout: float | None = None,
        remote: str | None = None,
        remote_options: Mapping[str, Any] | None = None,
    ) -> None:
        for name, value, low in (("num_workers", num_workers, 1), ("envs_per_worker", envs_per_worker, 1),
                                 ("max_worker_restarts", max_worker_restarts, 0), ("max_in_flight", max_in_flight, 1)):
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < low:
                what = "a positive integer" if low == 1 else "an integer >= 0"
                raise ValueError(f"{name} must be {what}, got {value!r}")
        collector_class(collector)  # a missing AsyncCollector fails here, before any actor starts
        if unfinished not in ("drop", "truncate"):
            raise ValueError(f"unfinished must be 'drop' or 'truncate', got {unfinished!r}")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if store is not None:
            parse_dataset_id(store)
        if remote is not None and (store is None or transport != "shared_fs"):
            raise ValueError("remote= needs store= (the dataset whose shards the workers upload) and "
                             "transport='shared_fs' (each worker then writes to a folder of its own)")
        if store_kwargs and "env_id_offset" in store_kwargs:
            raise ValueError("store_kwargs cannot set env_id_offset: each worker's writer gets its own global offset")
        if store_options is not None and store_options.env_id_offset:
            raise ValueError("store_options cannot set env_id_offset: each worker's writer gets its own global offset")
        options = merge_store_options(store_options, dict(store_kwargs or {}), "DistributedCollector's store_kwargs")
        if flush_every_call is None:
            flush_every_call = max_worker_restarts > 0
        elif not flush_every_call and max_worker_restarts > 0:
            raise ValueError(
                "flush_every_call=False cannot be used with max_worker_restarts > 0: a replaced worker's "
                "uncommitted episodes were counted by earlier calls and could not be collected again"
            )
        self._closed = True  # until the workers exist
        self._ray = ensure_ray()
        self.num_workers = int(num_workers)
        self.envs_per_worker = int(envs_per_worker)
        self.num_envs = self.num_workers * self.envs_per_worker
        self.store_id = store
        self.transport = transport
        self.max_worker_restarts = int(max_worker_restarts)
        self.root = None if store is None else str(resolve_root(root))
        self.remote = None if remote is None else open_remote(remote, storage_options=remote_options)
        dataset_info = None
        if self.remote is not None:
            assert store is not None
            dataset_info = read_side_file(dataset_path(store, self.root) / DATASET_FILE)
        self.seed, self.worker_seeds = derive_seeds(seed, self.num_workers)
        self.last_worker_stats: dict[int, CollectStats] = {}
        self.restarts = [0] * self.num_workers
        """Per worker index: how many times it was replaced."""
        self._dead: set[int] = set()
        self._next_worker = 0
        self._info: list[dict[str, Any]] = [{} for _ in range(self.num_workers)]
        self._known: list[set[str]] = [set() for _ in range(self.num_workers)]
        self._carry = [np.zeros(self.envs_per_worker, dtype=np.int64) for _ in range(self.num_workers)]
        self._owed = [0] * self.num_workers  # per worker: counted steps lost with a worker replaced between calls
        # per worker: (episodes, steps) its writer held uncommitted at its last reply, counted by earlier calls
        self._pending = [(0, 0)] * self.num_workers
        self.flush_every_call = bool(flush_every_call)
        self._weights: Any = None
        self._actor_cls = remote_worker().options(**{"num_cpus": 1, **dict(worker_options or {})})
        self._startup_timeout = float(startup_timeout)
        if worker_timeout is not None and not worker_timeout > 0:
            raise ValueError(f"worker_timeout must be > 0 seconds or None, got {worker_timeout!r}")
        self._worker_timeout = worker_timeout
        self._sink: Any = None
        self._workers: list[Any] = [self._actor_cls.remote(w) for w in range(self.num_workers)]
        self._closed = False
        use_sink = store is not None and transport == "object_store"
        base = WorkerSpec(
            env=env, env_kwargs=dict(env_kwargs or {}), backend=backend, backend_kwargs=dict(backend_kwargs or {}),
            num_envs=self.envs_per_worker, env_id_offset=0, policy_fn=policy_fn, seed=0, collector=collector,
            store_id=None if use_sink else store, root=None if use_sink else self.root,
            store_options=options, seed_every_reset=seed_every_reset,
            exploration_noise=bool(exploration_noise), unfinished=unfinished, max_in_flight=int(max_in_flight),
            unfinished_hint=unfinished_hint or "DistributedCollector(..., unfinished='truncate')",
            validate=bool(validate), stage_blocks=bool(stage_blocks), check_finite=bool(check_finite),
            flush_every_call=self.flush_every_call,
            remote=None if self.remote is None else self.remote.url,
            remote_options=None if remote_options is None else dict(remote_options), dataset_info=dataset_info,
        )
        try:
            if use_sink:
                self._sink = self._start_sink(options)
                base = replace(base, sink_actor=self._sink)
            self._base_spec = base
            specs = {w: (self._spec(w),) for w in range(self.num_workers)}
            infos = self._call("setup", specs, "setup", timeout=startup_timeout)
        except BaseException:
            self._closed = True
            self._kill_all()
            raise
        self._info = [infos[w] for w in range(self.num_workers)]
        self.observation_space: gym.Space = self._info[0]["observation_space"]
        self.action_space: gym.Space = self._info[0]["action_space"]

    # ------------------------------------------------------------------ public API

    @property
    def workers(self) -> list[Any]:
        """The worker actor handles, by worker index."""
        return list(self._workers)

    @property
    def worker_info(self) -> list[dict[str, Any]]:
        """Per worker: pid, node (IP address), node_id (Ray's), writer (its shards' writer name), spaces."""
        return [dict(info) for info in self._info]

    @property
    def writer_actor(self) -> Any:
        """transport="object_store": the actor that writes the dataset (None otherwise)."""
        return self._sink

    def collect(
        self,
        n_step: int | None = None,
        n_episode: int | None = None,
        *,
        random: bool = False,
        keep_episode_stats: bool = True,
    ) -> CollectStats:
        """Collect exactly n_step transitions or exactly n_episode episodes over all workers.

        The total is split into per-worker quotas (n // W or one more; the extra ones rotate over the
        workers from call to call); each worker collects its quota like Collector.collect (and with
        ``flush_every_call`` commits its episodes before replying). A worker that dies with restarts left is replaced: its episodes committed
        in the call count, the rest of its quota goes to the replacement, and so do the steps of its
        unfinished episodes that earlier calls counted but it never stored; the totals stay exact. A
        worker that fails otherwise, or dies with none left, does not stop the others: they finish their
        quotas, then the first failure is raised (a death as WorkerLostError carrying the stats so far); a
        worker that failed without dying is counted nothing in the call and still owes what it owed.

        ``keep_episode_stats=False`` (as the CLI collects): workers reply, and the stats keep, only the
        moments of the episodes' returns and lengths (``returns_moments``/``lens_moments``), so a call of
        any length ships and holds a bounded amount per worker.

        Args:
            n_step: Transitions to collect over all workers.
            n_episode: Episodes to collect over all workers (give exactly one of the two).
            random: Act with random actions instead of the workers' policies.
            keep_episode_stats: Keep every episode's return and length; False keeps only their moments.

        Returns:
            The workers' stats merged.

        Raises:
            ValueError: Not exactly one of ``n_step``/``n_episode``, or a count that is not a positive int.
            CollectorStateError: The collector is closed, or a worker died in an earlier call.
            WorkerLostError: A worker died with no restarts left.
        """
        self._check_usable()
        if (n_step is None) == (n_episode is None):
            raise ValueError("pass exactly one of n_step or n_episode to collect()")
        target = n_step if n_step is not None else n_episode
        if not isinstance(target, int | np.integer) or isinstance(target, bool) or target < 1:
            raise ValueError(f"n_step / n_episode must be a positive integer, got {target!r}")
        by_steps = n_step is not None
        quotas = self._quotas(int(target))
        parts: dict[int, list[CollectStats]] = {w: [] for w in range(self.num_workers)}
        # steps counted by an earlier call, lost unstored: collected again, uncounted
        owed_now, self._owed = self._owed, [0] * self.num_workers
        owed_parts = {w: CollectStats(-owed, 0, 0.0) for w, owed in enumerate(owed_now) if owed}
        for w, part in owed_parts.items():
            parts[w].append(part)
            quotas[w] += owed_now[w] if by_steps else 0
        remaining = {w: q for w, q in enumerate(quotas) if q > 0}
        errors: list[Exception] = []
        failed: set[int] = set()  # workers whose call failed without dying: they still owe what they owed
        ray = self._ray
        start = time.perf_counter()
        running = {self._submit_collect(w, remaining[w], by_steps, random, keep_episode_stats): w for w in remaining}
        while running:
            ready, _ = ray.wait(list(running), num_returns=1, timeout=self._worker_timeout)
            if not ready:  # no reply within worker_timeout: the silent workers are killed, then read as dead
                for silent in running.values():
                    with contextlib.suppress(Exception):
                        ray.kill(self._workers[silent])
                continue
            w = running.pop(ready[0])
            try:
                ok, value = ray.get(ready[0])
            except ray.exceptions.RayActorError as exc:
                with contextlib.suppress(Exception):  # an unreachable actor must not commit after it is read
                    ray.kill(self._workers[w])
                lost = self._salvage(w)
                if not keep_episode_stats:
                    lost = lost.summarised()
                parts[w].append(lost)
                remaining[w] -= lost.n_collected_steps if by_steps else lost.n_collected_episodes
                failure = self._replace_or_fail(w, "collect", exc)
                if failure is not None:
                    errors.append(failure)
                elif remaining[w] > 0:
                    running[self._submit_collect(w, remaining[w], by_steps, random, keep_episode_stats)] = w
                continue
            except ray.exceptions.RayError as exc:
                errors.append(VCollectError(f"{self._name(w)}: the Ray call for collect failed: {exc}"))
                failed.add(w)
                continue
            if not ok:
                errors.append(self._rebuild(w, value))
                failed.add(w)
                continue
            reply: WorkerReply = value
            parts[w].append(reply)
            remaining[w] = 0
            self._carry[w] = reply.carry
            self._known[w] = set(reply.shards)
            self._pending[w] = (reply.pending_episodes, reply.pending_steps)
        elapsed = time.perf_counter() - start
        for w in failed & owed_parts.keys():  # not collected again in this call: still owed, not yet settled
            self._owed[w] += owed_now[w]
            parts[w] = [p for p in parts[w] if p is not owed_parts[w]]
        self.last_worker_stats = {
            w: CollectStats.merge(p, collect_time=max((s.collect_time for s in p), default=0.0))
            for w, p in sorted(parts.items()) if p
        }
        stats = CollectStats.merge(list(self.last_worker_stats.values()), collect_time=elapsed)
        if not keep_episode_stats:
            self.last_worker_stats = {w: s.summarised() for w, s in self.last_worker_stats.items()}
            stats = stats.summarised()
        if errors:
            first = errors[0]
            if isinstance(first, WorkerLostError):
                first.stats = stats
            first.add_note(
                f"collected so far in this call (counted, committed where a store is used): "
                f"{stats.n_collected_steps} steps, {stats.n_collected_episodes} episodes"
            )
            if len(errors) > 1:
                first.add_note(f"{len(errors) - 1} other worker(s) failed too: {[str(e)[:200] for e in errors[1:]]}")
            raise first
        return stats

    def flush(self) -> None:
        """Commit every episode the workers' writers hold; after it the dataset holds exactly the episodes
        the calls reported (nothing to do without a store, or with ``flush_every_call``)."""
        self._check_usable()
        if self.store_id is None or self.flush_every_call:
            return
        shards = self._call("flush", {w: () for w in range(self.num_workers)}, "flush")
        for w, names in shards.items():
            self._known[w] = set(names)
            self._pending[w] = (0, 0)

    def set_policy_weights(self, weights: Any) -> None:
        """Put ``weights`` in the object store once and load them into every worker's policy
        (``policy.load_state_dict``); returns when all workers have them. The reference is kept, so a
        replacement worker starts with the latest weights.

        Args:
            weights: The weights, e.g. a torch state_dict.

        Raises:
            CollectorStateError: The collector is closed, or a worker died earlier.
        """
        self._check_usable()
        ref = self._ray.put(weights)
        self._weights = ref
        self._call("set_weights", {w: (ref,) for w in range(self.num_workers)}, "set_policy_weights")

    def reset(self, seed: int | None = None) -> None:
        """Reset every worker's collector (unfinished episodes are dropped, or stored truncated and committed:
        ``unfinished``).

        Args:
            seed: Re-derives the worker seeds as the constructor does (None: keep them).

        Raises:
            CollectorStateError: The collector is closed, or a worker died earlier.
        """
        self._check_usable()
        seeds: list[int | None] = [None] * self.num_workers
        if seed is not None:
            self.seed, self.worker_seeds = derive_seeds(seed, self.num_workers)
            seeds = list(self.worker_seeds)
        shards = self._call("reset", {w: (seeds[w],) for w in range(self.num_workers)}, "reset")
        for w, names in shards.items():
            self._known[w] = set(names)
            self._pending[w] = (0, 0)
        self._carry = [np.zeros(self.envs_per_worker, dtype=np.int64) for _ in range(self.num_workers)]

    def close(self) -> None:
        """Close every live worker (committing its pending episodes), then kill the actors; idempotent.

        Dead workers are skipped; the steps their unfinished episodes carried (counted by earlier calls,
        never stored, and now never collected again) are named in an UnfinishedEpisodesWarning rather than
        lost silently. A worker that fails to commit raises here, after all were shut down.
        """
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        error: Exception | None = None
        lost = list(self._dead)
        try:
            live = [w for w in range(self.num_workers) if w not in self._dead]
            refs = {w: self._workers[w].close.remote() for w in live}
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=_CLOSE_TIMEOUT_S)
            for w, ref in refs.items():
                try:
                    ok, value = ray.get(ref, timeout=0)
                except ray.exceptions.RayError:  # dead or not done in time: its committed shards stay valid
                    lost.append(w)
                    continue
                if not ok and error is None:
                    error = self._rebuild(w, value)
        finally:
            self._kill_all()
        self._warn_lost_carry(lost)
        if error is not None:
            raise error
        if self.remote is not None:  # the workers' shards are all there: the dataset's metadata goes last
            assert self.store_id is not None
            upload_to(self.remote, self.store_id, self.root)

    def _warn_lost_carry(self, workers: list[int]) -> None:
        """UnfinishedEpisodesWarning naming the workers whose counted steps no call will store: those of the
        unfinished episodes of the ``workers`` that could not close, and those owed by replaced ones; and the
        episodes those workers had written but not committed."""
        unclosed = set(workers)
        lost = {w: self._owed[w] + (int(self._carry[w].sum()) if w in unclosed else 0)
                for w in range(self.num_workers)}
        lost = {w: n for w, n in lost.items() if n}
        if lost:
            warnings.warn(
                "workers " + ", ".join(f"{w} ({n} steps)" for w, n in lost.items()) + " died after their last "
                "collect: the steps of their unfinished episodes, counted by earlier calls, were not stored "
                "(close before a worker dies, or collect(n_episode=...) to end on whole episodes)",
                UnfinishedEpisodesWarning,
                stacklevel=3,
            )
        uncommitted = {w: self._pending[w] for w in sorted(unclosed) if self._pending[w][0]}
        if uncommitted:
            warnings.warn(
                "workers " + ", ".join(f"{w} ({e} episodes, {s} steps)" for w, (e, s) in uncommitted.items())
                + " died holding finished episodes, counted by earlier calls, that were not committed yet "
                "(flush() after a collect, or flush_every_call=True, to commit them as each call ends)",
                UnfinishedEpisodesWarning,
                stacklevel=3,
            )

    def __enter__(self) -> DistributedCollector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"dead workers {sorted(self._dead)}" if self._dead else "running"
        return (
            f"DistributedCollector({self.num_workers} workers x {self.envs_per_worker} envs, "
            f"store={self.store_id!r}, transport={self.transport!r}, {state})"
        )

    # ------------------------------------------------------------------ workers and replacements

    def _start_sink(self, store_options: StoreOptions) -> Any:
        """The writer actor, pinned to this (the driver's) node, where the dataset is."""
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        actor = writer_actor().options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)
        ).remote(self.store_id, self.root, store_options)
        ray.get(actor.node_and_pid.remote(), timeout=self._startup_timeout)
        return actor

    def _spec(self, w: int) -> WorkerSpec:
        """Worker w's spec for its current generation (a new sink key for each)."""
        offset = w * self.envs_per_worker
        key = ""
        if self._sink is not None:
            key = self._ray.get(self._sink.open.remote(offset), timeout=self._startup_timeout)
        return replace(self._base_spec, env_id_offset=offset, seed=self.worker_seeds[w], sink_key=key,
                       weights=self._weights)

    def _submit_collect(self, w: int, quota: int, by_steps: bool, random: bool, keep_episode_stats: bool) -> Any:
        return self._workers[w].collect.remote(
            quota if by_steps else None, None if by_steps else quota, bool(random), bool(keep_episode_stats)
        )

    def _salvage(self, w: int) -> CollectStats:
        """Stats of what dead worker w committed since its last reply, less the steps its unfinished episodes
        carried from earlier calls (committed_in_call); nothing when it has no store."""
        writer = self._info[w].get("writer")
        if self.store_id is None or writer is None:
            return CollectStats(0, 0, 0.0)
        summaries = None
        if self._sink is not None:
            names = self._ray.get(self._sink.drop.remote(writer), timeout=_CLOSE_TIMEOUT_S)
        elif self.remote is not None:  # what counts is what reached the remote: the rest died with the worker
            summaries = remote_writer_lines(self.remote, self.store_id, writer)
            names = list(summaries)
        else:
            names = writer_shards(self._dataset_dir(), writer)
        new = sorted(n for n in names if n not in self._known[w])
        carry, self._carry[w] = self._carry[w], np.zeros(self.envs_per_worker, dtype=np.int64)  # accounted here
        (episodes, steps) = self._pending[w]
        stats, found, found_steps = committed_in_call(self._dataset_dir(), new, carry, episodes, summaries)
        self._pending[w] = (episodes - found, steps - found_steps)  # the rest died uncommitted with the worker
        return stats

    def _dataset_dir(self) -> Path:
        assert self.store_id is not None
        return dataset_path(self.store_id, self.root)

    def _replace_or_fail(self, w: int, what: str, exc: BaseException) -> Exception | None:
        """Worker w's actor died during ``what``: start its replacement (None) or say why it cannot (the error).

        Steps its unfinished episodes carried (counted, never stored; collect's _salvage has taken them
        already) are owed: the next collect has them collected again and does not count them."""
        death = self._death_error(w, what, exc)
        if self.store_id is not None:
            self._owed[w] += int(self._carry[w].sum())
        while self.restarts[w] < self.max_worker_restarts:
            self.restarts[w] += 1
            with contextlib.suppress(Exception):
                self._ray.kill(self._workers[w])
            self.worker_seeds[w] = replacement_seed(self.seed, w, self.restarts[w])
            self._workers[w] = self._actor_cls.remote(w)
            self._known[w], self._carry[w] = set(), np.zeros(self.envs_per_worker, dtype=np.int64)
            self._pending[w] = (0, 0)
            self._info[w] = {}
            try:
                self._info[w] = self._call("setup", {w: (self._spec(w),)}, "setup", timeout=self._startup_timeout)[w]
                return None
            except Exception as setup_exc:  # noqa: BLE001 - a replacement that cannot start uses up a restart
                death.add_note(f"replacement {self.restarts[w]} of worker {w} failed to start: {setup_exc}")
        self._dead.add(w)
        return death

    # ------------------------------------------------------------------ internals

    def _check_usable(self) -> None:
        if self._closed:
            raise CollectorStateError("this DistributedCollector is closed; make a new one")
        if self._dead:
            raise CollectorStateError(
                f"distributed worker(s) {sorted(self._dead)} died earlier; close() this DistributedCollector "
                "and make a new one (the shards they committed stay valid)"
            )

    def _quotas(self, total: int) -> list[int]:
        quotas = np.full(self.num_workers, total // self.num_workers, dtype=np.int64)
        extra = total % self.num_workers
        if extra:
            quotas[(self._next_worker + np.arange(extra)) % self.num_workers] += 1
            self._next_worker = (self._next_worker + extra) % self.num_workers
        return [int(q) for q in quotas]

    def _name(self, w: int) -> str:
        lo = w * self.envs_per_worker
        where = f"global env ids {lo}..{lo + self.envs_per_worker - 1}"
        info = self._info[w]
        if "pid" in info:
            where += f", pid {info['pid']} on {info['node']}"
        return f"distributed worker {w} ({where})"

    def _call(
        self, method: str, args: Mapping[int, Sequence[Any]], what: str, timeout: float | None = None
    ) -> dict[int, Any]:
        """Call ``method`` on the workers in args, wait for all of them, and return their values by worker.

        The first failure (worker order) is raised once every call has finished; a dead worker is replaced
        while it has restarts left (a replacement gets the latest weights and a fresh reset, so
        set_weights/reset need not be repeated), else becomes WorkerLostError. With a timeout, workers that
        did not reply in time raise TimeoutError.
        """
        ray = self._ray
        refs = {w: getattr(self._workers[w], method).remote(*a) for w, a in args.items()}
        if timeout is not None:
            _, late = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
            if late:
                slow = sorted(w for w, ref in refs.items() if ref in late)
                raise TimeoutError(
                    f"distributed workers {slow} did not finish {what} within {timeout} s; each asks for "
                    f"resources like num_cpus=1 (worker_options) and the cluster has "
                    f"{ray.available_resources()} available"
                )
        results: dict[int, Any] = {}
        errors: list[Exception] = []
        for w, ref in refs.items():
            try:
                ok, value = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                failure = self._death_error(w, what, exc) if method == "setup" else self._replace_or_fail(w, what, exc)
                if failure is not None:
                    self._dead.add(w)
                    errors.append(failure)
                continue
            except ray.exceptions.RayError as exc:
                errors.append(VCollectError(f"{self._name(w)}: the Ray call for {what} failed: {exc}"))
                continue
            if ok:
                results[w] = value
            else:
                errors.append(self._rebuild(w, value))
        if errors:
            first = errors[0]
            if len(errors) > 1:
                first.add_note(f"{len(errors) - 1} other worker(s) failed too: {[str(e)[:200] for e in errors[1:]]}")
            raise first
        return results

    def _death_error(self, w: int, what: str, exc: BaseException) -> WorkerLostError:
        lines = str(exc).strip().splitlines()
        reason = next((line.strip() for line in lines if "dead because" in line or "died" in line), "")
        restarts = f" after {self.restarts[w]} replacement(s)" if self.restarts[w] else ""
        return WorkerLostError(
            f"{self._name(w)} died during {what}{': ' + reason if reason else ''}{restarts}. The shards it "
            "committed stay valid (episodes it had not committed are lost); close() this DistributedCollector "
            "and make a new one (or pass max_worker_restarts to replace dead workers)",
            str(exc),
        )

    def _rebuild(self, w: int, failure: RemoteFailure) -> Exception:
        """The worker's exception, raised again on the driver with the worker named in its message."""
        where = self._name(w)
        if failure.env_error:
            return EnvWorkerError(failure.env_id, f"in {where}: {failure.message}", failure.traceback_text)
        exc: BaseException | None = None
        if failure.exc_type is not None:
            with contextlib.suppress(Exception):
                exc = failure.exc_type(f"{where}: {failure.message}")
        if not isinstance(exc, Exception):
            exc = VCollectError(f"{where} raised {failure.type_name}: {failure.message}")
        exc.add_note(f"--- traceback in {where} ---\n{failure.traceback_text.rstrip()}")
        return exc

    def _kill_all(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            return
        for actor in [*self._workers, *([self._sink] if self._sink is not None else [])]:
            with contextlib.suppress(Exception):
                ray.kill(actor)
