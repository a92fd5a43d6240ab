"""ThrottledBar: collect(progress=True)'s bar counts every update and moves the shown bar a few times a second."""

from __future__ import annotations

import io

import pytest
from tqdm import tqdm

from vcollect.collecting.progress import CHECKS_PER_INTERVAL, ThrottledBar


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


class RecordingBar:
    """Records what the throttled bar shows."""

    def __init__(self) -> None:
        self.updates: list[int] = []
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.updates.append(n)

    def close(self) -> None:
        self.closed = True


def test_updates_are_counted_and_shown_once_per_interval() -> None:
    clock, shown = FakeClock(), RecordingBar()
    bar = ThrottledBar(shown, interval=0.1, clock=clock)
    for _ in range(1000):  # 1000 steps of 1 ms: 1 s
        clock.now += 0.001
        bar.update(8)
    assert bar.n == 8000
    # moved about 10 times (once per 0.1 s), never per step, and never by more than was counted
    assert 8 <= len(shown.updates) <= 11, shown.updates
    assert sum(shown.updates) <= 8000
    # the clock is read a few times per interval, not on every update
    assert clock.reads <= 1 + 10 * CHECKS_PER_INTERVAL * 2, clock.reads
    bar.close()
    assert sum(shown.updates) == 8000 and shown.closed  # close shows the final count


def test_slow_steps_are_shown_as_they_come() -> None:
    clock, shown = FakeClock(), RecordingBar()
    bar = ThrottledBar(shown, interval=0.1, clock=clock)
    for _ in range(5):  # steps slower than the interval: every one is shown
        clock.now += 0.5
        bar.update(3)
    assert shown.updates == [3] * 5


def test_a_step_rate_that_drops_is_noticed_within_a_bounded_number_of_updates() -> None:
    clock, shown = FakeClock(), RecordingBar()
    bar = ThrottledBar(shown, interval=0.1, clock=clock)
    for _ in range(100_000):  # fast steps: the stride grows
        clock.now += 1e-6
        bar.update()
    moved = len(shown.updates)
    for _ in range(5000):  # then 10 ms steps: shown again within the stride's bound
        clock.now += 0.01
        bar.update()
        if len(shown.updates) > moved:
            break
    assert len(shown.updates) > moved
    assert clock.now - 100.0 - 0.1 < 60  # noticed well within a minute of slow steps


def test_a_tqdm_wrapped_ends_at_the_count() -> None:
    out = io.StringIO()
    bar = ThrottledBar(tqdm(total=500, file=out, mininterval=0))
    for _ in range(100):
        bar.update(5)
    bar.close()
    assert "500/500" in out.getvalue()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval must be > 0"):
        ThrottledBar(RecordingBar(), interval=0)
