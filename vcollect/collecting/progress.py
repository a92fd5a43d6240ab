"""ThrottledBar: the progress bar ``collect(progress=True)`` shows, counted per step and drawn a few times a second.

NoBar stands in when no bar is shown; ``call_bar`` picks the bar of one collect call (a live monitor's feed
is moved with it).

The step loops report every vector step (``bar.update(k)``). A tqdm does its own bookkeeping on every
update; here an update only adds to a counter and, every ``stride`` updates, reads the clock. The shown
tqdm is moved on at most once per ``interval`` seconds, so showing the bar costs about what not showing
it costs. The stride adapts to the step rate: the clock is read about ``CHECKS_PER_INTERVAL`` times per
interval however fast or slow the steps are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm

from vcollect.monitor import LiveFeed

__all__ = ["CHECKS_PER_INTERVAL", "NoBar", "ThrottledBar", "call_bar"]

CHECKS_PER_INTERVAL = 4
"""Clock reads aimed at per interval: the bar lags the count by at most about 1/4 of an interval more."""

_MAX_STRIDE = 4096
"""The most updates between two clock reads (a step rate that drops sharply is noticed within this many)."""


class ThrottledBar:
    """A progress bar whose ``update`` counts and whose wrapped bar (a tqdm) is moved on a few times a second.

    Args:
        bar: the bar shown (anything with ``update(n)`` and ``close()``, e.g. a tqdm); it is moved on by the
            count added since it was last moved, at most once per ``interval``, and closed by :meth:`close`.
        interval: seconds between two moves of ``bar`` (tqdm's own default redraw period, 0.1 s).
        clock: the monotonic clock read (seconds).
        on_move: called each time the bar is moved on (live figures taken then: vcollect.monitor).
        on_close: called when the bar is closed, before ``bar`` is (a live feed's last figures).
    """

    def __init__(self, bar: Any, interval: float = 0.1, clock: Callable[[], float] = time.monotonic,
                 on_move: Callable[[], None] | None = None, on_close: Callable[[], None] | None = None) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.bar = bar
        self.on_move = on_move
        self.on_close = on_close
        self.n = 0
        """The count so far (every update added in, shown or not yet)."""
        self.interval = float(interval)
        self._clock = clock
        self._shown = 0
        self._stride = 1
        self._left = 1
        now = clock()
        self._checked = now
        self._due = now + self.interval

    def update(self, n: int = 1) -> None:
        """Add ``n`` to the count; every ``stride`` calls, read the clock and move the bar on when it is due."""
        self.n += n
        self._left -= 1
        if self._left <= 0:
            self._check()

    def _check(self) -> None:
        now = self._clock()
        spent = now - self._checked
        self._checked = now
        aim = self.interval / CHECKS_PER_INTERVAL
        # at most twice the stride per check, so a step rate that falls is noticed soon
        grown = self._stride * 2 if spent <= 0 else int(self._stride * aim / spent)
        self._stride = max(1, min(grown, self._stride * 2, _MAX_STRIDE))
        self._left = self._stride
        if now >= self._due:
            self._move()
            if self.on_move is not None:
                self.on_move()
            self._due = now + self.interval

    def _move(self) -> None:
        if self.n != self._shown:
            self.bar.update(self.n - self._shown)
            self._shown = self.n

    def close(self) -> None:
        """Move the bar to the final count and close it."""
        try:
            if self.on_close is not None:
                self.on_close()
        finally:
            try:
                self._move()
            finally:
                self.bar.close()


class NoBar:
    """The progress bar when none is shown: a disabled tqdm costs ~15 us a call, ~10% of a one-step collect."""

    n = 0

    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""



def call_bar(total: int, unit: str, show: bool, live: LiveFeed | None) -> ThrottledBar | NoBar:
    """The progress bar of one collect call: a tqdm of ``total`` ``unit`` when ``show``; with a live feed,
    the feed begins with the call, takes its figures as the bar moves and ends when the bar is closed.

    Args:
        total: What the call asks for (steps or episodes).
        unit: The tqdm's unit ("step" or "ep").
        show: Whether a tqdm is shown.
        live: The collector's live feed (vcollect.monitor), or None.

    Returns:
        The bar the step loops update; its ``close`` closes the tqdm and ends the feed.
    """
    shown = tqdm(total=total, unit=unit) if show else None
    if live is not None:
        live.begin(shown)
        return ThrottledBar(shown if shown is not None else NoBar(), on_move=live.moved, on_close=live.end)
    return ThrottledBar(shown) if shown is not None else NoBar()
