"""Env restarts: what an out-of-process backend that replaces failed envs reports, and its budget.

A backend built with ``max_restarts=K`` (SubprocVectorEnv, RayVectorEnv) declares
``EnvCapabilities.restarts_envs``. When, inside a synchronous step, reset or step_reset, a worker process
(or Ray actor) dies or an env raises, the backend replaces that worker with a new one holding the same env
ids and new envs (built, not reset), and the call returns normally: the replaced env ids' rows of its result
mean nothing (reward 0, neither terminated nor truncated, never among the restarted ids of a step_reset),
and ``take_restarts()`` lists them with the error. The async half does the same while ``recv`` or
``recv_reset`` waits: the steps and resets in flight of the replaced env ids are dropped (never returned),
and a ``recv``/``recv_reset`` left with nothing of its kind in flight by a replacement returns no env ids
instead of raising. The collector abandons the episode each of them was in
and resets them with the next seed of their streams. After K replacements the next failure raises
EnvWorkerError as a backend without restarts does, its message saying the budget is spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["EnvRestart", "RestartBudget", "RestartsEnvs", "check_max_restarts"]


@dataclass(frozen=True)
class EnvRestart:
    """One env id whose worker (process or actor) was replaced.

    Attributes:
        env_id: The env id (its new env is built, not reset).
        error: Why its worker was replaced: the exception an env raised, or how the worker died.
        traceback_text: The traceback where that happened ("" when the worker died without one).
    """

    env_id: int
    error: str
    traceback_text: str = ""


@runtime_checkable
class RestartsEnvs(Protocol):
    """What a backend that declares ``restarts_envs`` offers: the env ids it replaced since last asked."""

    def take_restarts(self) -> list[EnvRestart]:
        """The env ids replaced since the last call (each once), oldest first; the list is then emptied."""
        ...


def check_max_restarts(max_restarts: int) -> int:
    """A backend's ``max_restarts`` argument: an int >= 0.

    Raises:
        ValueError: anything else (a bool, a negative number, a float).
    """
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
    return max_restarts


class RestartBudget:
    """How many worker replacements a backend may still make, and the records of those it made.

    Args:
        max_restarts: Replacements allowed over the backend's life (0: none; every failure raises).
    """

    def __init__(self, max_restarts: int) -> None:
        self.max_restarts = check_max_restarts(max_restarts)
        self.used = 0
        self._records: list[EnvRestart] = []

    def allows(self, workers: int = 1) -> bool:
        """Whether ``workers`` more replacements fit the budget."""
        return self.used + workers <= self.max_restarts

    def spend(self, env_ids: list[int], error: str, traceback_text: str = "") -> None:
        """Count one replacement (a worker holding ``env_ids``) and record each of its env ids."""
        self.used += 1
        self._records.extend(EnvRestart(env_id, error, traceback_text) for env_id in env_ids)

    @property
    def pending(self) -> bool:
        """Whether replacements were made since the last take."""
        return bool(self._records)

    def take(self) -> list[EnvRestart]:
        """The records since the last take (see RestartsEnvs.take_restarts)."""
        records, self._records = self._records, []
        return records

    def spent_note(self) -> str:
        """What a failure past the budget adds to its message (empty for a backend without restarts)."""
        if self.max_restarts == 0:
            return ""
        return (
            f" (not restarted: the restart budget max_restarts={self.max_restarts} is spent; an env that fails "
            "again and again is restarted at most that many times)"
        )
