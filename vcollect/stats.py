"""What one `collect` call did: counts, speed, and episode return/length statistics."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import numpy as np

__all__ = ["CollectStats", "EpisodeValues", "Extendable", "Moments", "SummaryStats"]

FOLD_EVERY = 4096
"""EpisodeValues that keep no arrays fold their values into their Moments once this many are held."""


class AbandonedEpisode(NamedTuple):
    """An episode given up because its env's worker failed and was replaced (``max_restarts``), or because
    its env took a step that was never recorded (recording the step before it raised): not stored, not counted
    as collected.

    Attributes:
        env_id: The env id whose episode it was.
        steps: The steps the episode had taken (recorded in the rings, never stored).
        error: Why the worker was replaced (the env's exception, or how the process or actor died), or why the
            step was dropped.
    """

    env_id: int
    steps: int
    error: str


@dataclass(frozen=True)
class SummaryStats:
    """Mean, standard deviation, minimum and maximum of a sequence of numbers.

    Attributes:
        mean: The mean.
        std: The population standard deviation.
        min: The smallest number.
        max: The largest number.
    """

    mean: float
    std: float
    min: float
    max: float

    @classmethod
    def from_sequence(cls, values: np.ndarray) -> SummaryStats | None:
        """Summarise ``values``.

        Args:
            values: The numbers (any array-like of floats).

        Returns:
            Their statistics; None when ``values`` is empty (no episode completed).
        """
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
class Moments:
    """Count, mean, sum of squared deviations from the mean (M2), minimum and maximum of a set of numbers:
    what their SummaryStats needs, in constant space, and mergeable (Chan, Golub and LeVeque's pairwise
    update), so that numbers seen in batches are summarised without keeping them.

    Attributes:
        count: How many numbers.
        mean: Their mean (0 when there are none).
        m2: The sum of their squared deviations from the mean (population variance = m2 / count).
        min: The smallest (inf when there are none).
        max: The largest (-inf when there are none).
    """

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = math.inf
    max: float = -math.inf

    @classmethod
    def of(cls, values: np.ndarray | Iterable[float]) -> Moments:
        """The moments of ``values`` (computed with numpy, in one pass over the array).

        Args:
            values: The numbers, an array or any iterable of floats.

        Returns:
            Their moments (the empty Moments when there are none).
        """
        array = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=np.float64)
        if array.size == 0:
            return cls()
        mean = float(array.mean())
        return cls(int(array.size), mean, float(np.square(array - mean).sum()), float(array.min()), float(array.max()))

    def combine(self, other: Moments) -> Moments:
        """The moments of both sets of numbers together.

        Args:
            other: The moments of the other set.

        Returns:
            The moments of the union of both sets.
        """
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        count = self.count + other.count
        delta = other.mean - self.mean
        return Moments(
            count=count,
            mean=self.mean + delta * other.count / count,
            m2=self.m2 + other.m2 + delta * delta * self.count * other.count / count,
            min=min(self.min, other.min),
            max=max(self.max, other.max),
        )

    def summary(self) -> SummaryStats | None:
        """Mean, population standard deviation, minimum and maximum of the numbers.

        Returns:
            Their statistics; None when there are no numbers.
        """
        if self.count == 0:
            return None
        return SummaryStats(mean=self.mean, std=math.sqrt(max(self.m2, 0.0) / self.count), min=self.min, max=self.max)


class Extendable(Protocol):
    """Where the returns or lengths of finished episodes are reported: a list, or EpisodeValues."""

    def extend(self, values: Iterable[Any], /) -> None:
        """Add ``values`` (numbers) at the end.

        Args:
            values: The values of finished episodes, in the order they finished.
        """
        ...


class EpisodeValues:
    """The returns (or lengths) of the episodes a collect call finishes, reported as they finish.

    With ``keep=True`` every value is kept, for ``CollectStats.returns``/``lens``; with ``keep=False`` only
    their Moments are, folded in every FOLD_EVERY values, so that a call of any length holds a bounded
    amount of them.

    Args:
        keep: Keep every value (True) or only their moments (False).
    """

    def __init__(self, keep: bool = True) -> None:
        self.keep = bool(keep)
        self._held: list[float] = []
        self._folded = Moments()

    def extend(self, values: Iterable[float], /) -> None:
        """Add the values of finished episodes, in the order they finished.

        Args:
            values: The values (returns or lengths) to add.
        """
        self._held.extend(values)
        if not self.keep and len(self._held) >= FOLD_EVERY:
            self._fold()

    def __len__(self) -> int:
        """How many values were reported."""
        return self._folded.count + len(self._held)

    @property
    def held(self) -> int:
        """How many values are held as they are (all of them where kept; fewer than FOLD_EVERY otherwise)."""
        return len(self._held)

    def array(self, dtype: type[np.generic]) -> np.ndarray:
        """Every value, in order, as an array.

        Args:
            dtype: The array's dtype.

        Returns:
            The values; an empty array when the values are not kept.
        """
        return np.asarray(self._held if self.keep else [], dtype=dtype)

    def moments(self) -> Moments:
        """The moments of every value reported.

        Returns:
            Their moments (the held values are folded in first when they are not kept).
        """
        if self.keep:
            return Moments.of(self._held)
        self._fold()
        return self._folded

    def _fold(self) -> None:
        self._folded = self._folded.combine(Moments.of(self._held))
        self._held = []


@dataclass(frozen=True)
class CollectStats:
    """Result of ``Collector.collect``, with Tianshou's field names.

    ``returns`` and ``lens`` hold whole-episode values for the episodes that completed during the
    call, including steps those episodes took in earlier calls. A call that keeps no per-episode values
    (``collect(keep_episode_stats=False)``, as the CLI collects) leaves them empty and sets
    ``returns_moments``/``lens_moments`` instead: their count, mean, M2, minimum and maximum, from which
    ``returns_stat``/``lens_stat`` are read. ``abandoned``: the episodes given up in the
    call because their env's worker failed and was replaced (backends built with ``max_restarts``), each
    with its env id, steps and the error; their steps are counted in ``n_collected_steps`` (they were
    collected, as an unfinished episode's are), the episodes are neither stored nor counted as collected.

    Attributes:
        n_collected_steps: Transitions collected in the call.
        n_collected_episodes: Episodes completed in the call.
        collect_time: Seconds the call took.
        returns: The completed episodes' returns (empty when per-episode values were not kept).
        lens: The completed episodes' lengths (empty when per-episode values were not kept).
        abandoned: The episodes given up because their env's worker was replaced.
        returns_moments: The returns' moments, where per-episode values were not kept; else None.
        lens_moments: The lengths' moments, where per-episode values were not kept; else None.
    """

    n_collected_steps: int
    n_collected_episodes: int
    collect_time: float
    returns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    lens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    abandoned: tuple[AbandonedEpisode, ...] = ()
    returns_moments: Moments | None = None
    lens_moments: Moments | None = None

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
        if self.returns_moments is not None:
            return self.returns_moments.summary()
        return SummaryStats.from_sequence(self.returns)

    @property
    def lens_stat(self) -> SummaryStats | None:
        """Statistics of the completed episodes' lengths; None when none completed."""
        if self.lens_moments is not None:
            return self.lens_moments.summary()
        return SummaryStats.from_sequence(self.lens)

    def summarised(self) -> CollectStats:
        """These stats with the episodes' returns and lengths kept only as their moments (arrays emptied), as
        ``collect(keep_episode_stats=False)`` reports them.

        Returns:
            The same stats (of the same class), or self where they keep only moments already.
        """
        if self.returns_moments is not None and self.lens_moments is not None and not self.returns.size:
            return self
        return replace(
            self,
            returns=self.returns[:0],
            lens=self.lens[:0],
            returns_moments=self.returns_moments if self.returns_moments is not None else Moments.of(self.returns),
            lens_moments=self.lens_moments if self.lens_moments is not None else Moments.of(self.lens),
        )

    @classmethod
    def merge(cls, parts: list[CollectStats], collect_time: float | None = None) -> CollectStats:
        """Combine the stats of several collectors (e.g. distributed workers) into one.

        Where a part kept no per-episode values (it has moments), the merged stats keep none either: their
        moments combine every part's.

        Args:
            parts: The stats to combine.
            collect_time: The merged call's time; defaults to the longest part's, as parts run
                concurrently.

        Returns:
            One CollectStats counting every part's steps, episodes and abandoned episodes.
        """
        if not parts:
            return cls(0, 0, 0.0 if collect_time is None else collect_time)
        returns, lens = np.concatenate([p.returns for p in parts]), np.concatenate([p.lens for p in parts])
        returns_moments = lens_moments = None
        if any(p.returns_moments is not None or p.lens_moments is not None for p in parts):
            returns_moments, lens_moments = Moments(), Moments()
            for p in parts:
                returns_moments = returns_moments.combine(p.returns_moments or Moments.of(p.returns))
                lens_moments = lens_moments.combine(p.lens_moments or Moments.of(p.lens))
            returns, lens = returns[:0], lens[:0]
        return cls(
            n_collected_steps=sum(p.n_collected_steps for p in parts),
            n_collected_episodes=sum(p.n_collected_episodes for p in parts),
            collect_time=max(p.collect_time for p in parts) if collect_time is None else collect_time,
            returns=returns,
            lens=lens,
            abandoned=tuple(a for p in parts for a in p.abandoned),
            returns_moments=returns_moments,
            lens_moments=lens_moments,
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
