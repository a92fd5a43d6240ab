"""What one `collect` call did: counts, speed, and episode return/length statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

__all__ = ["CollectStats", "SummaryStats"]


class AbandonedEpisode(NamedTuple):
    """An episode given up because its env's worker failed and was replaced (``max_restarts``): not stored,
    not counted as collected.

    Attributes:
        env_id: The env id whose episode it was.
        steps: The steps the episode had taken (recorded in the rings, never stored).
        error: Why the worker was replaced: the env's exception, or how the process or actor died.
    """

    env_id: int
    steps: int
    error: str


@dataclass(frozen=True)
class SummaryStats:
    """Mean, standard deviation, minimum and maximum of a sequence of numbers."""

    mean: float
    std: float
    min: float
    max: float

    @classmethod
    def from_sequence(cls, values: np.ndarray) -> SummaryStats | None:
        """Summarise ``values``; None when it is empty (no episode completed)."""
        array = np.asarray(values, dtype=np.float64)
        if array.size == 0:
            return None
        return cls(
            mean=float(array.mean()),
            std=float(array.std()),
            min=float(array.min()),
            max=float(array.max()),
        )

    def __str__(self) -> str:
        return f"{self.mean:.4g} ± {self.std:.3g} [{self.min:.4g}, {self.max:.4g}]"


@dataclass(frozen=True)
class CollectStats:
    """Result of ``Collector.collect``, with Tianshou's field names.

    ``returns`` and ``lens`` hold whole-episode values for the episodes that completed during the
    call, including steps those episodes took in earlier calls. ``abandoned``: the episodes given up in the
    call because their env's worker failed and was replaced (backends built with ``max_restarts``), each
    with its env id, steps and the error; their steps are counted in ``n_collected_steps`` (they were
    collected, as an unfinished episode's are), the episodes are neither stored nor counted as collected.
    """

    n_collected_steps: int
    n_collected_episodes: int
    collect_time: float
    returns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    lens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    abandoned: tuple[AbandonedEpisode, ...] = ()

    @property
    def n_abandoned_episodes(self) -> int:
        """Episodes given up in the call because their env's worker failed (see ``abandoned``)."""
        return len(self.abandoned)

    @property
    def collect_speed(self) -> float:
        """Steps per second over the call (0 when no time elapsed)."""
        return self.n_collected_steps / self.collect_time if self.collect_time > 0 else 0.0

    @property
    def returns_stat(self) -> SummaryStats | None:
        """Statistics of the completed episodes' returns; None when none completed."""
        return SummaryStats.from_sequence(self.returns)

    @property
    def lens_stat(self) -> SummaryStats | None:
        """Statistics of the completed episodes' lengths; None when none completed."""
        return SummaryStats.from_sequence(self.lens)

    @classmethod
    def merge(cls, parts: list[CollectStats], collect_time: float | None = None) -> CollectStats:
        """Combine the stats of several collectors (e.g. distributed workers) into one.

        ``collect_time`` defaults to the longest part's time, as parts run concurrently.
        """
        if not parts:
            return cls(0, 0, 0.0 if collect_time is None else collect_time)
        return cls(
            n_collected_steps=sum(p.n_collected_steps for p in parts),
            n_collected_episodes=sum(p.n_collected_episodes for p in parts),
            collect_time=max(p.collect_time for p in parts) if collect_time is None else collect_time,
            returns=np.concatenate([p.returns for p in parts]),
            lens=np.concatenate([p.lens for p in parts]),
            abandoned=tuple(a for p in parts for a in p.abandoned),
        )

    def __str__(self) -> str:
        lines = [
            f"CollectStats: {self.n_collected_steps} steps, {self.n_collected_episodes} episodes "
            f"in {self.collect_time:.3f} s ({self.collect_speed:,.0f} steps/s)",
            f"  return: {self.returns_stat if self.returns_stat is not None else 'n/a (no episode completed)'}",
            f"  length: {self.lens_stat if self.lens_stat is not None else 'n/a (no episode completed)'}",
        ]
        if self.abandoned:
            envs = sorted({a.env_id for a in self.abandoned})
            lines.append(f"  abandoned: {self.n_abandoned_episodes} episodes (env ids {envs}) whose env workers were restarted")
        return "\n".join(lines)
