"""No shared filesystem: workers send finished episodes through Ray's object store to one writer actor.

``ShardWriterActor`` runs on the driver's node (the node that holds the dataset) and owns one EpisodeStore
per worker generation, so each worker's shards carry their own writer name, as they do when workers write
themselves. A worker's ``RemoteSink`` (an EpisodeSink) submits each batch of episodes as an actor call and
keeps at most ``max_in_flight`` of them unanswered: when the writer falls behind, the worker waits
(back-pressure) instead of filling the object store. Batches are held by the actor until the worker's
``flush`` and then committed as one shard by EpisodeStore (write to a temporary name, fsync, rename), so a
worker that dies leaves nothing half-written and its uncommitted batches are dropped, never committed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from vcollect.envs.ray_env import require_ray
from vcollect.errors import CollectorStateError
from vcollect.store.write.options import StoreOptions

__all__ = ["RemoteSink", "ShardWriterActor", "writer_actor"]

_SINK_TIMEOUT_S = 300.0


class ShardWriterActor:
    """The driver-side writer: per key (a worker generation's writer name) an EpisodeStore and the batches
    received since that worker's last flush."""

    def __init__(self, dataset_id: str, root: str, store_options: StoreOptions) -> None:
        self.dataset_id, self.root, self.store_options = dataset_id, root, store_options
        self._stores: dict[str, Any] = {}
        self._pending: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}
        self._held_steps: dict[str, int] = {}
        self._dropped: set[str] = set()
        self._spec_offered = False

    def open(self, env_id_offset: int) -> str:
        """Open a writer storing global env ids (local + env_id_offset); returns its key (its writer name)."""
        from vcollect.store import EpisodeStore

        store = EpisodeStore.open(self.dataset_id, self.root, options=self.store_options,
                                  env_id_offset=env_id_offset)
        self._stores[store.writer_name] = store
        self._pending[store.writer_name] = []
        return store.writer_name

    def record_env_spec(self, key: str, spec: EnvSpec) -> bool:
        """Record ``spec`` in the dataset through the key's writer unless the dataset has an env spec
        (EpisodeStore.record_env_spec); True when it did. Only the first offer reaches the dataset: every
        worker runs the same env."""
        if self._spec_offered:
            return False
        self._spec_offered = True
        return bool(self._stores[key].record_env_spec(spec))

    def node_and_pid(self) -> tuple[str, int]:
        """(Ray node id, process id) of this actor: where the dataset is written."""
        return require_ray().get_runtime_context().get_node_id(), os.getpid()

    def write(self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Hold one write_episodes batch (ignored once the key is dropped); commit the key's held batches as
        a shard once they reach the store's shard_steps, as a worker's own EpisodeStore would."""
        if key in self._dropped:
            return
        self._pending[key].append((args, kwargs))
        self._held_steps[key] = self._held_steps.get(key, 0) + int(np.sum(args[5]))
        if self._held_steps[key] >= self._stores[key].shard_steps:
            self.flush(key)

    def flush(self, key: str) -> tuple[list[str], int]:
        """Commit the key's held batches as one shard; returns the names of every shard the key committed
        and its committed episodes."""
        store = self._stores[key]
        batches, self._pending[key], self._held_steps[key] = self._pending[key], [], 0
        for args, kwargs in batches:
            store.write_episodes(*args, **kwargs)
        store.flush()
        return [p.name for p in store.shards_written], int(store.committed_episodes)

    def drop(self, key: str) -> list[str]:
        """The key's worker died: forget its held batches (never committed) and close its writer; returns
        the names of the shards it had committed."""
        self._dropped.add(key)
        self._pending.pop(key, None)
        store = self._stores.pop(key, None)
        if store is None:
            return []
        store.close()  # nothing pending in the store itself: batches reach it only inside flush()
        return [p.name for p in store.shards_written]

    def close(self, key: str) -> int:
        """Commit what the key holds and close its writer; returns its committed episodes."""
        if key not in self._stores:
            return 0
        self.flush(key)
        store = self._stores.pop(key)
        store.close()
        return int(store.committed_episodes)


@functools.lru_cache(maxsize=1)
def writer_actor() -> Any:
    """ShardWriterActor as a Ray actor class (made once, when first needed)."""
    return require_ray().remote(ShardWriterActor)


class RemoteSink:
    """A worker's EpisodeSink that forwards every batch to the ShardWriterActor under its key.

    ``flush`` returns once the writer has committed everything sent before it, so a worker that flushes
    after each collect replies only when its episodes are in the dataset (as with its own EpisodeStore).
    ``record_env_spec`` (AcceptsEnvSpec) has the writer record the collector's env spec in a dataset that has
    none, as a worker's own EpisodeStore would.
    ``stalls`` counts the times a write waited for the writer (back-pressure).
    """

    def __init__(
        self, actor: Any, key: str, observation_space: gym.Space[Any], action_space: gym.Space[Any],
        max_in_flight: int,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.writer_name = key
        self.max_in_flight = int(max_in_flight)
        self.stalls = 0
        self._actor = actor
        self._in_flight: list[Any] = []
        self._shards: list[str] = []
        self._committed = 0
        self._sent_episodes = 0  # since the last flush
        self._sent_steps = 0
        self._closed = False

    def record_env_spec(self, spec: EnvSpec) -> bool:
        """Have the writer record ``spec`` as the dataset's env spec unless it has one; True when it did.

        Raises:
            CollectorStateError: The sink is closed.
        """
        if self._closed:
            raise CollectorStateError(f"RemoteSink {self.writer_name} is closed")
        ref = self._actor.record_env_spec.remote(self.writer_name, spec)
        return bool(require_ray().get(ref, timeout=_SINK_TIMEOUT_S))

    @property
    def shards_written(self) -> list[Path]:
        """Names (as paths relative to the dataset's shards directory) of the shards committed for this sink."""
        return [Path(name) for name in self._shards]

    def write_episodes(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        lengths: Sequence[int] | np.ndarray,
        *,
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None] | None = None,
        infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> None:
        """Send the batch (Ray copies the arrays when the call is made); wait first while too many are unanswered."""
        if self._closed:
            raise CollectorStateError(f"RemoteSink {self.writer_name} is closed")
        ray = require_ray()
        while len(self._in_flight) >= self.max_in_flight:
            self.stalls += 1
            ray.get(self._in_flight.pop(0), timeout=_SINK_TIMEOUT_S)
        args = (observations, actions, rewards, terminations, truncations, np.asarray(lengths))
        kwargs = {"seeds": list(seeds), "env_ids": list(env_ids), "options": options, "infos": infos}
        self._in_flight.append(self._actor.write.remote(self.writer_name, args, kwargs))
        self._sent_episodes += len(args[5])
        self._sent_steps += int(np.sum(args[5]))

    def flush(self) -> None:
        """Wait for every batch sent, then have the writer commit them as one shard."""
        if self._closed:
            return
        ray = require_ray()
        refs, self._in_flight = self._in_flight, []
        ray.get(refs, timeout=_SINK_TIMEOUT_S)
        self._shards, self._committed = ray.get(self._actor.flush.remote(self.writer_name), timeout=_SINK_TIMEOUT_S)
        self._sent_episodes = self._sent_steps = 0

    def close(self) -> None:
        """Commit what is left and close this key at the writer; idempotent."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        require_ray().get(self._actor.close.remote(self.writer_name), timeout=_SINK_TIMEOUT_S)

    @property
    def committed_episodes(self) -> int:
        """Episodes the writer has committed for this sink, as of the last flush."""
        return self._committed

    @property
    def pending_episodes(self) -> int:
        """Episodes sent since the last flush: in none of ``shards_written`` (the writer may have committed
        some of them since, as the first episodes of its next shards)."""
        return self._sent_episodes

    @property
    def pending_steps(self) -> int:
        """Steps of the episodes sent since the last flush."""
        return self._sent_steps
