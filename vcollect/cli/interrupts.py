"""Ctrl-C during ``vcollect collect``: the InterruptGuard, and GuardedSink, the store writes it must not cut."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.envs.registration import EnvSpec

if TYPE_CHECKING:
    from vcollect.store import EpisodeStore


class InterruptGuard:
    """Ctrl-C handling for ``collect``: SIGINT raises KeyboardInterrupt, but never inside a store write.

    Inside :meth:`critical` a SIGINT is held back and raised when the section ends, so an episode is
    buffered whole or not at all and a shard commit is never cut. After :meth:`saving` further SIGINTs
    are ignored, so the final commit of the finished episodes completes.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self._depth = 0
        self._pending = False
        self._saving = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.interrupted = True
        if self._saving:
            return
        if self._depth:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A section a SIGINT must not cut; a SIGINT received inside is raised when it ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and self._pending and not self._saving:
            self._pending = False
            raise KeyboardInterrupt

    def saving(self) -> None:
        """From now on ignore SIGINT (the finished episodes are being committed)."""
        self._saving = True


class GuardedSink:
    """The EpisodeSink ``collect`` writes to: an EpisodeStore whose every write and commit runs inside the
    InterruptGuard's critical section. It forwards the whole EpisodeSink protocol (not just part of it), so
    the collector keeps handing it episodes in batches, as it would the store itself."""

    def __init__(self, store: EpisodeStore, guard: InterruptGuard) -> None:
        self.store = store
        self.guard = guard
        self.observation_space = store.observation_space
        self.action_space = store.action_space

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
        """Buffer several finished episodes in the store; a Ctrl-C never cuts the batch in half."""
        self._guarded(self.store.write_episodes, (observations, actions, rewards, terminations, truncations, lengths),
                      seeds, env_ids, options, infos)

    def take_episodes(
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
        """The store's ``take_episodes`` (arrays handed over, kept uncopied); a Ctrl-C never cuts the batch."""
        self._guarded(self.store.take_episodes, (observations, actions, rewards, terminations, truncations, lengths),
                      seeds, env_ids, options, infos)

    def _guarded(
        self,
        write: Callable[..., None],
        arrays: tuple[Any, ...],
        seeds: Sequence[int | None],
        env_ids: Sequence[int],
        options: Sequence[Mapping[str, Any] | None] | None,
        infos: Sequence[Mapping[str, Any] | None] | None,
    ) -> None:
        """One batch written inside the guard's critical section; ``infos=`` passed only when given (a store
        without an infos parameter still takes every other batch)."""
        extra: dict[str, Any] = {} if infos is None else {"infos": infos}
        with self.guard.critical():
            write(*arrays, seeds=seeds, env_ids=env_ids, options=options, **extra)

    def write_episode(self, observations: Any, actions: Any, rewards: Any, terminations: Any, truncations: Any,
                      **kwargs: Any) -> None:
        """Buffer one finished episode in the store (the collector's route for recorded infos), whole."""
        with self.guard.critical():
            self.store.write_episode(observations, actions, rewards, terminations, truncations, **kwargs)

    def record_env_spec(self, spec: EnvSpec) -> bool:
        """Record the env spec in the store's dataset unless it has one (AcceptsEnvSpec); never cut by Ctrl-C."""
        with self.guard.critical():
            return self.store.record_env_spec(spec)

    def flush(self) -> None:
        """Commit the pending episodes as a shard; a Ctrl-C never cuts the commit."""
        with self.guard.critical():
            self.store.flush()

    def close(self) -> None:
        """Commit what is left and close the store; a Ctrl-C never cuts the commit."""
        with self.guard.critical():
            self.store.close()

