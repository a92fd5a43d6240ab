"""Live collection figures: steps/s, episodes, the mean return of the last 100 episodes and each env's step
rate, handed a few times a second to monitors (``Collector(..., monitor=...)``; ``vcollect collect --live``
shows them beside the progress bar, ``--tensorboard DIR`` writes them as TensorBoard scalars).

The step loops pay nothing per step for them: an :class:`EpisodeTally` is told of episode ends only (one
vectorised add per batch of ends), and each env's steps are read when the figures are taken, as its finished
episodes' steps plus the running episode's (the rings' count). The figures are taken when the progress bar
moves (at most every ``interval`` seconds) and once more when a collect call ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "RECENT_EPISODES",
    "EpisodeTally",
    "FiguresLog",
    "LiveFeed",
    "LiveFigures",
    "Monitor",
    "TensorBoardMonitor",
    "as_monitors",
    "live_feed",
]

RECENT_EPISODES = 100
"""The mean return is taken over this many of the latest episodes."""


@dataclass(frozen=True)
class LiveFigures:
    """What a monitor is given, since the collector was built.

    Attributes:
        elapsed: Seconds of collecting (summed over collect calls).
        steps: Steps recorded (every env's).
        episodes: Episodes finished.
        steps_per_s: Steps per second since the figures before (over all calls for the first).
        mean_return: Mean return of the latest (up to 100) finished episodes; None before the first.
        env_steps: Steps recorded by each env id.
        env_steps_per_s: Each env's steps per second since the figures before: a slow env stands out.
    """

    elapsed: float
    steps: int
    episodes: int
    steps_per_s: float
    mean_return: float | None
    env_steps: np.ndarray
    env_steps_per_s: np.ndarray

    def summary(self) -> str:
        """One short line for beside a progress bar: rates, episodes, mean return, the slowest env."""
        parts = [f"{_si(self.steps_per_s)} steps/s", f"{self.episodes:,} ep"]
        if self.mean_return is not None:
            parts.append(f"R100 {self.mean_return:.4g}")
        rates = self.env_steps_per_s
        if rates.size > 1:
            slow = int(np.argmin(rates))
            parts.append(f"env/s {_si(float(np.median(rates)))} median, slowest env {slow} {_si(float(rates[slow]))}")
        return " | ".join(parts)


def _si(value: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


@runtime_checkable
class Monitor(Protocol):
    """What ``Collector(..., monitor=...)`` takes: anything with ``update(figures)``."""

    def update(self, figures: LiveFigures) -> None:
        """Take the latest figures (called a few times a second while collecting, and at each call's end)."""
        ...


class FiguresLog:
    """A monitor that keeps every figure it is given (``history``; ``last``), e.g. to plot or test them."""

    def __init__(self) -> None:
        self.history: list[LiveFigures] = []

    @property
    def last(self) -> LiveFigures | None:
        """The latest figures, None before any."""
        return self.history[-1] if self.history else None

    def update(self, figures: LiveFigures) -> None:
        """Keep ``figures``."""
        self.history.append(figures)


class TensorBoardMonitor:
    """Writes the figures as TensorBoard scalars (torch's ``SummaryWriter``; needs torch and tensorboard),
    the step count as the x axis: ``collect/steps_per_s``, ``collect/episodes``, ``collect/mean_return_100``
    and ``collect/env_steps_per_s/<env id>``.

    Args:
        log_dir: The folder the event file is written in.
        per_env: Write each env's step rate too (one scalar per env id).

    Raises:
        ImportError: torch's SummaryWriter (or tensorboard) is not installed, naming what to install.
    """

    def __init__(self, log_dir: str, per_env: bool = True) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ImportError(
                "TensorBoard output needs torch and tensorboard: pip install 'vcollect[torch,tensorboard]'"
            ) from exc
        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.per_env = per_env

    def update(self, figures: LiveFigures) -> None:
        """Write the figures at step ``figures.steps``."""
        step = figures.steps
        self.writer.add_scalar("collect/steps_per_s", figures.steps_per_s, step)
        self.writer.add_scalar("collect/episodes", figures.episodes, step)
        if figures.mean_return is not None:
            self.writer.add_scalar("collect/mean_return_100", figures.mean_return, step)
        if self.per_env:
            for env_id, rate in enumerate(figures.env_steps_per_s.tolist()):
                self.writer.add_scalar(f"collect/env_steps_per_s/{env_id}", rate, step)

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def as_monitors(monitor: Monitor | Sequence[Monitor] | None) -> tuple[Monitor, ...]:
    """The monitors a collector was given (one, several or none), each checked to have ``update``."""
    if monitor is None:
        return ()
    items = tuple(monitor) if isinstance(monitor, (list, tuple)) else (monitor,)
    for item in items:
        if not callable(getattr(item, "update", None)):
            raise TypeError(f"monitor must have an update(figures) method, got {type(item).__name__}")
    return items


class EpisodeTally:
    """Episode ends as the loops report them: each env's finished steps, the count, the latest returns."""

    def __init__(self, num_envs: int) -> None:
        self.finished_steps = np.zeros(num_envs, dtype=np.int64)
        self.episodes = 0
        self._recent = np.zeros(RECENT_EPISODES, dtype=np.float64)

    def add(self, env_ids: np.ndarray, lengths: np.ndarray, returns: np.ndarray) -> None:
        """Episodes ended: their env ids, lengths and returns (in the order they ended)."""
        np.add.at(self.finished_steps, env_ids, lengths)
        n = len(returns)
        at = (self.episodes + np.arange(max(0, n - RECENT_EPISODES), n)) % RECENT_EPISODES
        self._recent[at] = np.asarray(returns, dtype=np.float64)[-RECENT_EPISODES:]
        self.episodes += n

    def mean_return(self) -> float | None:
        """Mean return of the latest (up to 100) episodes; None before the first."""
        if self.episodes == 0:
            return None
        return float(self._recent[: min(self.episodes, RECENT_EPISODES)].mean())


class LiveFeed:
    """Takes the figures from a tally and the rings' running episode lengths, and hands them to monitors at
    most every ``interval`` seconds of collecting.

    Args:
        monitors: Who is given the figures.
        tally: The collector's episode tally.
        running_lengths: Gives each env's running episode's steps so far (the rings' count), when taken.
        interval: Seconds between two figures (besides those forced at the end of a call).
        clock: The monotonic clock read.
    """

    def __init__(self, monitors: Sequence[Monitor], tally: EpisodeTally, running_lengths: Callable[[], np.ndarray],
                 interval: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.monitors = tuple(monitors)
        self.tally = tally
        self.running_lengths = running_lengths
        self.interval = float(interval)
        self.clock = clock
        self.bar: Any = None
        """A tqdm to write the summary beside (``set_postfix_str``) while a call shows one."""
        self._elapsed = 0.0  # collecting time of calls ended
        self._started: float | None = None
        self._last_time = 0.0
        self._last_steps = np.zeros_like(tally.finished_steps)
        self._due = 0.0

    def begin(self, bar: Any = None) -> None:
        """A collect call starts (with the tqdm shown, or None)."""
        self.bar = bar
        self._started = self.clock()
        self._due = self._started + self.interval

    def moved(self) -> None:
        """The progress bar moved: take the figures if they are due."""
        if self.clock() >= self._due:
            self.take()

    def end(self) -> None:
        """The call ends: take the figures once more and stop counting its time."""
        self.take()
        if self._started is not None:
            self._elapsed += self.clock() - self._started
            self._started = None
        self.bar = None

    def take(self) -> LiveFigures:
        """The figures now, handed to every monitor (and written beside the bar)."""
        now = self.clock()
        elapsed = self._elapsed + (now - self._started if self._started is not None else 0.0)
        env_steps = self.tally.finished_steps + self.running_lengths()
        span = elapsed - self._last_time
        if span > 0:  # an episode dropped unfinished (a reset) takes its steps back: no rate below 0
            env_rates = np.maximum(env_steps - self._last_steps, 0) / span
        else:
            env_rates = np.zeros(env_steps.shape, dtype=np.float64)
        figures = LiveFigures(
            elapsed=elapsed,
            steps=int(env_steps.sum()),
            episodes=self.tally.episodes,
            steps_per_s=float(env_rates.sum()),
            mean_return=self.tally.mean_return(),
            env_steps=env_steps,
            env_steps_per_s=env_rates,
        )
        if span > 0:
            self._last_time, self._last_steps = elapsed, env_steps
        self._due = now + self.interval
        for monitor in self.monitors:
            monitor.update(figures)
        if self.bar is not None:
            self.bar.set_postfix_str(figures.summary(), refresh=False)
        return figures


def live_feed(monitors: Sequence[Monitor], tally: EpisodeTally | None,
              running_lengths: Callable[[], np.ndarray]) -> LiveFeed | None:
    """A collector's live feed: None when no monitor is given or the collector keeps no tally.

    Args:
        monitors: Who is given the figures (``as_monitors``' result).
        tally: The collector's episode tally, or None.
        running_lengths: Gives each env's running episode's steps so far.

    Returns:
        The LiveFeed, or None.
    """
    if not monitors or tally is None:
        return None
    return LiveFeed(monitors, tally, running_lengths)
