"""DistributedCollector: one Collector per Ray actor, exact totals, every worker writing into one dataset.

Each worker actor builds its own local vector env (``make_vector(env, envs_per_worker, backend)``), its
own policy (``policy_fn(observation_space, action_space)``, called inside the worker), a Collector with
its own ring buffers and, with a ``store``, its own writer appending shards to the shared dataset. A
``collect`` call is one actor call per worker with that worker's exact quota; observations, actions and
episodes never travel through Ray, only the quotas in and each worker's CollectStats out. Weights are
put in the object store once per ``set_policy_weights`` and fetched by every worker.

Worker methods never raise through Ray: they reply ``(True, value)`` or ``(False, _RemoteFailure)`` and
the driver raises the failure again, as the same exception type where it can, naming the worker. A worker
whose actor died raises EnvWorkerError naming it; the DistributedCollector can then only be closed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vcollect.envs.ray_env import ensure_ray, require_ray
from vcollect.errors import CollectorStateError, DatasetNotFoundError, EnvWorkerError, VCollectError
from vcollect.stats import CollectStats
from vcollect.store.naming import dataset_path, parse_dataset_id, resolve_root

if TYPE_CHECKING:
    from vcollect.store.writer import EpisodeStore

__all__ = ["COLLECTOR_KINDS", "DistributedCollector", "derive_seeds"]

COLLECTOR_KINDS = ("sync", "async")
"""Values of DistributedCollector(collector=...): vcollect.collector.Collector or vcollect.async_collector's."""

_CLOSE_TIMEOUT_S = 60.0
_TRACEBACK_MARK = "\n--- original traceback ---\n"


def _collector_class(kind: str) -> type:
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


def derive_seeds(seed: int | None, num_workers: int) -> tuple[int, list[int]]:
    """(root entropy, one seed per worker) from numpy's SeedSequence(seed).spawn: independent streams,
    the same for the same seed. With seed None the root entropy is drawn (and returned, to reproduce)."""
    root = np.random.SeedSequence(seed)
    entropy = int(root.entropy)  # type: ignore[arg-type]
    return entropy, [int(child.generate_state(1, np.uint64)[0]) for child in root.spawn(num_workers)]


# --------------------------------------------------------------------------------------------------
# worker side


@dataclass(frozen=True)
class _WorkerSpec:
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
    store_kwargs: dict[str, Any] = field(default_factory=dict)
    seed_every_reset: bool = True
    unfinished: str = "drop"


@dataclass(frozen=True)
class _RemoteFailure:
    """An exception raised in a worker, in a form that crosses Ray and is raised again by the driver."""

    exc_type: type[BaseException] | None  # None: not a builtin or vcollect type (may not import on the driver)
    type_name: str
    message: str
    traceback_text: str
    env_error: bool = False  # an EnvWorkerError: env_id is global, message has no "env N:" prefix
    env_id: int | None = None

    @classmethod
    def of(cls, exc: BaseException, env_id_offset: int) -> _RemoteFailure:
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


class _CollectorWorker:
    """The body of a worker actor. Every public method replies (True, value) or (False, _RemoteFailure)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.offset = 0
        self.collector: Any = None
        self.writer: EpisodeStore | None = None
        self.started = False

    def _guard(self, fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
        try:
            return True, fn(*args)
        except Exception as exc:
            return False, _RemoteFailure.of(exc, self.offset)

    def setup(self, spec: _WorkerSpec) -> tuple[bool, Any]:
        """Build the vector env, policy, store writer and collector; reply with pid, node and spaces."""
        return self._guard(self._setup, spec)

    def collect(self, n_step: int | None, n_episode: int | None, random: bool) -> tuple[bool, Any]:
        """Collect this worker's quota, commit its episodes as a shard, reply with its CollectStats."""
        return self._guard(self._collect, n_step, n_episode, random)

    def set_weights(self, weights: Any) -> tuple[bool, Any]:
        """policy.load_state_dict(weights) (Ray hands the object-store value in, not the reference)."""
        return self._guard(self._set_weights, weights)

    def reset(self, seed: int | None) -> tuple[bool, Any]:
        """Reset the collector (every env, the buffer), re-seeding its generator when seed is given."""
        return self._guard(self._reset, seed)

    def close(self) -> tuple[bool, Any]:
        """Close the collector (commits pending episodes) and the store writer; reply committed episodes."""
        return self._guard(self._close)

    def _setup(self, spec: _WorkerSpec) -> dict[str, Any]:
        from vcollect.envs import make_vector

        self.offset = spec.env_id_offset
        cls = _collector_class(spec.collector)
        envs = make_vector(spec.env, spec.num_envs, spec.backend, env_kwargs=spec.env_kwargs, **spec.backend_kwargs)
        try:
            obs_space, act_space = envs.single_observation_space, envs.single_action_space
            policy = None if spec.policy_fn is None else spec.policy_fn(obs_space, act_space)
            if spec.store_id is not None:  # the writer shifts env ids to the global ones itself
                self.writer = _open_store(spec, obs_space, act_space)
            self.collector = cls(
                policy, envs, store=self.writer, seed=spec.seed, seed_every_reset=spec.seed_every_reset,
                unfinished=spec.unfinished,
            )
        except BaseException:
            envs.close()
            if self.writer is not None:
                self.writer.close()
            raise
        return {
            "pid": os.getpid(),
            "node": require_ray().util.get_node_ip_address(),
            "observation_space": obs_space,
            "action_space": act_space,
        }

    def _collect(self, n_step: int | None, n_episode: int | None, random: bool) -> CollectStats:
        stats = self.collector.collect(
            n_step=n_step, n_episode=n_episode, random=random, reset_before_collect=not self.started
        )
        self.started = True
        if self.writer is not None:
            self.writer.flush()
        return stats  # type: ignore[no-any-return]

    def _set_weights(self, weights: Any) -> None:
        policy = self.collector.policy
        load = getattr(policy, "load_state_dict", None)
        if not callable(load):
            raise TypeError(
                f"the workers' policy ({type(policy).__name__}) has no load_state_dict(weights): policy_fn must "
                "return a policy that takes new weights, e.g. a TorchPolicy"
            )
        load(weights)

    def _reset(self, seed: int | None) -> None:
        self.collector.reset(seed=seed)
        self.started = True

    def _close(self) -> int:
        try:
            if self.collector is not None:
                self.collector.close()
        finally:
            if self.writer is not None:
                self.writer.close()
        return 0 if self.writer is None else int(self.writer.committed_episodes)


def _open_store(spec: _WorkerSpec, obs_space: gym.Space, act_space: gym.Space) -> EpisodeStore:
    """The worker's own writer to the shared dataset, storing global env ids (local id + the worker's offset)."""
    from vcollect.store import EpisodeStore

    assert spec.store_id is not None
    try:
        return EpisodeStore.open(
            spec.store_id, spec.root, observation_space=obs_space, action_space=act_space,
            env_id_offset=spec.env_id_offset, **spec.store_kwargs,
        )
    except DatasetNotFoundError as exc:
        raise DatasetNotFoundError(
            f"dataset {spec.store_id!r} is not reachable at {str(dataset_path(spec.store_id, spec.root))!r} "
            f"from this worker: every worker appends to the same directory, so it must be on a filesystem that "
            f"all Ray nodes mount at that path, and the dataset must exist (EpisodeStore.create). ({exc})"
        ) from exc


@functools.lru_cache(maxsize=1)
def _remote_worker() -> Any:
    return require_ray().remote(_CollectorWorker)


# --------------------------------------------------------------------------------------------------
# driver side


class DistributedCollector:
    """Run one Collector per Ray actor and collect exact totals across them into one dataset.

    ``env`` is what make_vector takes (an env id or a zero-argument factory); every worker builds
    ``envs_per_worker`` envs on ``backend``. ``policy_fn(observation_space, action_space) -> Policy`` runs in
    each worker (None: only ``collect(random=True)``). ``store`` is the id of an existing dataset under
    ``root`` (resolved here with the default rules, so every worker uses the same path, which must be on a
    filesystem all nodes share); every worker appends its own shards, with global env ids
    ``worker_index * envs_per_worker + local env id``. Worker seeds come from ``SeedSequence(seed).spawn``.
    ``collector`` is "sync" (Collector) or "async" (AsyncCollector); ``seed_every_reset`` goes to it
    (False: only each env's first reset is seeded, as Tianshou seeds), and so does ``unfinished`` (what
    becomes of the episodes still running when the workers close: see Collector). Uses the connected Ray cluster, or
    starts a local Ray instance when Ray is not initialised. ``worker_options`` go to the actor's
    ``.options(...)`` (default ``num_cpus=1``: give a subproc worker as many CPUs as it has envs);
    ``env_kwargs``/``backend_kwargs`` go to make_vector and ``store_kwargs`` (shard_steps, compression) to
    EpisodeStore.open. Setup waits at most ``startup_timeout`` seconds for the actors to be placed.
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
        unfinished: str = "drop",
        env_kwargs: Mapping[str, Any] | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        store_kwargs: Mapping[str, Any] | None = None,
        worker_options: Mapping[str, Any] | None = None,
        startup_timeout: float = 300.0,
    ) -> None:
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker)):
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        _collector_class(collector)  # a missing AsyncCollector fails here, before any actor starts
        if unfinished not in ("drop", "truncate"):
            raise ValueError(f"unfinished must be 'drop' or 'truncate', got {unfinished!r}")
        if store is not None:
            parse_dataset_id(store)
        if store_kwargs and "env_id_offset" in store_kwargs:
            raise ValueError("store_kwargs cannot set env_id_offset: each worker's writer gets its own global offset")
        self._closed = True  # until the workers exist
        self._ray = ensure_ray()
        self.num_workers = int(num_workers)
        self.envs_per_worker = int(envs_per_worker)
        self.num_envs = self.num_workers * self.envs_per_worker
        self.store_id = store
        self.root = None if store is None else str(resolve_root(root))
        self.seed, self.worker_seeds = derive_seeds(seed, self.num_workers)
        self.last_worker_stats: dict[int, CollectStats] = {}
        self._dead: set[int] = set()
        self._next_worker = 0
        self._info: list[dict[str, Any]] = [{} for _ in range(self.num_workers)]
        actor_cls = _remote_worker().options(**{"num_cpus": 1, **dict(worker_options or {})})
        self._workers: list[Any] = [actor_cls.remote(w) for w in range(self.num_workers)]
        self._closed = False
        specs = {
            w: (
                _WorkerSpec(
                    env=env,
                    env_kwargs=dict(env_kwargs or {}),
                    backend=backend,
                    backend_kwargs=dict(backend_kwargs or {}),
                    num_envs=self.envs_per_worker,
                    env_id_offset=w * self.envs_per_worker,
                    policy_fn=policy_fn,
                    seed=self.worker_seeds[w],
                    collector=collector,
                    store_id=store,
                    root=self.root,
                    store_kwargs=dict(store_kwargs or {}),
                    seed_every_reset=seed_every_reset,
                    unfinished=unfinished,
                ),
            )
            for w in range(self.num_workers)
        }
        try:
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
        """Per worker: pid, node (IP address), observation_space, action_space."""
        return [dict(info) for info in self._info]

    def collect(self, n_step: int | None = None, n_episode: int | None = None, *, random: bool = False) -> CollectStats:
        """Collect exactly n_step transitions or exactly n_episode episodes over all workers.

        The total is split into per-worker quotas (n // W or one more; the extra ones rotate over the
        workers from call to call); each worker collects its quota like Collector.collect and commits its
        episodes to the dataset before replying, so afterwards the dataset holds every episode completed
        in the call. Returns the merged stats, timed on the driver. ``random=True`` samples actions.
        A worker that fails or dies does not stop the others: they finish (and commit) their quotas,
        then the first failure is raised; a dead worker's is EnvWorkerError naming it.
        """
        self._check_usable()
        if (n_step is None) == (n_episode is None):
            raise ValueError("pass exactly one of n_step or n_episode to collect()")
        target = n_step if n_step is not None else n_episode
        if not isinstance(target, int | np.integer) or isinstance(target, bool) or target < 1:
            raise ValueError(f"n_step / n_episode must be a positive integer, got {target!r}")
        quotas = self._quotas(int(target))
        calls = {
            w: (q if n_step is not None else None, q if n_episode is not None else None, bool(random))
            for w, q in enumerate(quotas)
            if q > 0
        }
        start = time.perf_counter()
        results = self._call("collect", calls, "collect")
        elapsed = time.perf_counter() - start
        self.last_worker_stats = {w: results[w] for w in sorted(results)}
        return CollectStats.merge(list(self.last_worker_stats.values()), collect_time=elapsed)

    def set_policy_weights(self, weights: Any) -> None:
        """Put ``weights`` (e.g. a torch state_dict) in the object store once and load them into every
        worker's policy (``policy.load_state_dict``); returns when all workers have them."""
        self._check_usable()
        ref = self._ray.put(weights)
        self._call("set_weights", {w: (ref,) for w in range(self.num_workers)}, "set_policy_weights")

    def reset(self, seed: int | None = None) -> None:
        """Reset every worker's collector (unfinished episodes are dropped); a seed re-derives the worker
        seeds as the constructor does."""
        self._check_usable()
        seeds: list[int | None] = [None] * self.num_workers
        if seed is not None:
            self.seed, self.worker_seeds = derive_seeds(seed, self.num_workers)
            seeds = list(self.worker_seeds)
        self._call("reset", {w: (seeds[w],) for w in range(self.num_workers)}, "reset")

    def close(self) -> None:
        """Close every live worker (committing its pending episodes), then kill the actors; idempotent.

        Dead workers are skipped. A worker that fails to commit raises here, after all were shut down.
        """
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        error: Exception | None = None
        try:
            live = [w for w in range(self.num_workers) if w not in self._dead]
            refs = {w: self._workers[w].close.remote() for w in live}
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=_CLOSE_TIMEOUT_S)
            for w, ref in refs.items():
                try:
                    ok, value = ray.get(ref, timeout=0)
                except ray.exceptions.RayError:  # dead or not done in time: its committed shards stay valid
                    continue
                if not ok and error is None:
                    error = self._rebuild(w, value)
        finally:
            self._kill_all()
        if error is not None:
            raise error

    def __enter__(self) -> DistributedCollector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"dead workers {sorted(self._dead)}" if self._dead else "running"
        return (
            f"DistributedCollector({self.num_workers} workers x {self.envs_per_worker} envs, "
            f"store={self.store_id!r}, {state})"
        )

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

        The first failure (worker order) is raised once every call has finished; a dead worker becomes
        EnvWorkerError naming it. With a timeout, workers that did not reply in time raise TimeoutError.
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
                self._dead.add(w)
                errors.append(self._death_error(w, what, exc))
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
            if len(errors) > 1 and hasattr(first, "add_note"):
                first.add_note(f"{len(errors) - 1} other worker(s) failed too: {[str(e)[:200] for e in errors[1:]]}")
            raise first
        return results

    def _death_error(self, w: int, what: str, exc: BaseException) -> EnvWorkerError:
        lines = str(exc).strip().splitlines()
        reason = next((line.strip() for line in lines if "dead because" in line or "died" in line), "")
        return EnvWorkerError(
            None,
            f"{self._name(w)} died during {what}{': ' + reason if reason else ''}. The shards it committed stay "
            "valid (episodes it had not committed are lost); close() this DistributedCollector and make a "
            "new one",
            str(exc),
        )

    def _rebuild(self, w: int, failure: _RemoteFailure) -> Exception:
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
        if hasattr(exc, "add_note"):
            exc.add_note(f"--- traceback in {where} ---\n{failure.traceback_text.rstrip()}")
        return exc

    def _kill_all(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            return
        for actor in self._workers:
            with contextlib.suppress(Exception):
                ray.kill(actor)
