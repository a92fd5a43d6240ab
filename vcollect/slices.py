"""Slices: windows of ``length`` consecutive steps of one episode, the arithmetic rings and datasets share.

A source (a ring, a dataset view) describes the episodes it holds as an episode table: for each episode its
first step's place in a *linear* coordinate (a position in which the episode's steps are consecutive) and
its length T. A window is (episode, start): the episode's steps ``start .. start + length - 1``, counted
from its first step held; with padding a window may begin before the episode (``start < 0``) or run past its
end, and a boolean ``mask`` says which of its rows are steps. The windows an episode offers:

=========  ==========================  =========================
pad        starts                      windows (T steps)
=========  ==========================  =========================
"none"     0 .. T - length             max(T - length + 1, 0)
"start"    1 - length .. T - length    T (each ends at a step)
"end"      0 .. T - 1                  T (each begins at a step)
"both"     1 - length .. T - 1         T + length - 1
=========  ==========================  =========================

Draws are uniform over every window of every episode (``by="window"``: cumulative window counts per
episode and ``searchsorted``, so a call costs the batch, not the steps stored) or over episodes first
(``by="episode"``). Returns-to-go are computed from the window's own rewards and the sum of those after it.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.lib.stride_tricks import as_strided

from vcollect.errors import SliceLengthError

__all__ = [
    "PADS",
    "STACKS",
    "By",
    "Pad",
    "SliceRequest",
    "Stacks",
    "check_slice_request",
    "check_stacks",
    "check_windows",
    "discounted_sums",
    "draw_windows",
    "lowest_start",
    "returns_to_go",
    "shape_rows",
    "slice_generator",
    "strided_stacks",
    "window_returns",
    "window_counts",
    "window_steps",
]

Pad = Literal["none", "start", "end", "both"]
By = Literal["window", "episode"]
PADS: tuple[str, ...] = ("none", "start", "end", "both")
Stacks = Literal["copy", "view"]
STACKS: tuple[str, ...] = ("copy", "view")


@dataclass(frozen=True)
class SliceRequest:
    """One slice call's arguments, checked: how many windows, how long, the padding, how drawn, the discount."""

    batch_size: int
    length: int
    pad: Pad
    by: By
    gamma: float


def _count(name: str, value: Any, low: int) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {value!r}") from None
    if number < low:
        raise ValueError(f"{name} must be >= {low}, got {number}")
    return number


def check_slice_request(batch_size: Any, length: Any, pad: Any = "none", by: Any = "window",
                        gamma: Any = 1.0) -> SliceRequest:
    """The arguments of ``sample_slices`` checked, else a ValueError naming the bad one and what it may be."""
    size = _count("batch_size", batch_size, 0)
    steps = _count("length", length, 1)
    if pad not in PADS:
        raise ValueError(f"pad must be one of {', '.join(map(repr, PADS))}, got {pad!r}")
    if by not in ("window", "episode"):
        raise ValueError(f"by must be 'window' (each window equally likely) or 'episode', got {by!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be a discount factor, a real number in [0, 1] (1: plain sums), got {gamma!r}")
    return SliceRequest(size, steps, pad, by, float(gamma))


def check_stacks(stacks: Any) -> Stacks:
    """``stacks`` checked, else a ValueError saying what it may be."""
    if stacks not in STACKS:
        raise ValueError(f"stacks must be 'copy' (observations materialised, writable) or 'view' (read-only views "
                         f"over each window's frames, read once), got {stacks!r}")
    return stacks  # type: ignore[no-any-return]


def strided_stacks(frames: np.ndarray, shift: int, length: int, k: int) -> np.ndarray:
    """(batch, length, k, ...) read-only views of ``frames`` (batch, rows, ...): row i's stack is frames
    ``shift + i`` to ``shift + i + k - 1``; (batch, length, ...) rows ``shift + i`` for k = 1."""
    if k == 1:
        return as_strided(frames[:, shift:], (frames.shape[0], length, *frames.shape[2:]),
                          frames.strides, writeable=False)
    step = frames.strides[1]
    return as_strided(frames[:, shift:], (frames.shape[0], length, k, *frames.shape[2:]),
                      (frames.strides[0], step, step, *frames.strides[2:]), writeable=False)


def slice_generator(rng: np.random.Generator | None, seed: Any, default: np.random.Generator) -> np.random.Generator:
    """The generator a slice call draws with: ``rng``, else a new one seeded by ``seed``, else ``default``."""
    if rng is not None and seed is not None:
        raise ValueError("give rng (a numpy Generator) or seed, not both")
    if rng is not None:
        return rng
    return default if seed is None else np.random.default_rng(seed)


def lowest_start(length: int, pad: str) -> int:
    """The first window start of every episode: ``1 - length`` where windows may be padded at the start."""
    return 1 - length if pad in ("start", "both") else 0


def window_counts(lengths: np.ndarray, length: int, pad: str) -> np.ndarray:
    """How many windows each episode of ``lengths`` steps offers (the module docstring's table)."""
    extra = (length - 1) * ((pad in ("start", "both")) + (pad in ("end", "both")))
    return np.maximum(np.asarray(lengths, dtype=np.int64) - (length - 1) + extra, 0)


def draw_windows(lengths: np.ndarray, request: SliceRequest, rng: np.random.Generator,
                 describe: Callable[[int], str]) -> tuple[np.ndarray, np.ndarray]:
    """``request.batch_size`` windows drawn with replacement: (episode of each, as an index into
    ``lengths``; its start, counted from the episode's first step).

    Uniform over all windows (``by="window"``), or over the episodes offering one and then over that
    episode's windows (``by="episode"``). ``describe(k)`` names episode k in the error raised when none
    offers a window.

    Raises:
        SliceLengthError: No episode offers a window (all shorter than ``length`` with ``pad="none"``).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    size = request.batch_size
    if size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    counts = window_counts(lengths, request.length, request.pad)
    check_windows(counts, lengths, request, describe)
    low = lowest_start(request.length, request.pad)
    if request.by == "episode":
        offering = np.flatnonzero(counts)
        episodes = offering[rng.integers(0, offering.size, size=size)]
        return episodes, low + rng.integers(0, counts[episodes])
    cum = np.cumsum(counts)
    u = rng.integers(0, int(cum[-1]), size=size)
    episodes = np.searchsorted(cum, u, side="right")
    return episodes, low + u - (cum[episodes] - counts[episodes])


def check_windows(counts: np.ndarray, lengths: np.ndarray, request: SliceRequest,
                  describe: Callable[[int], str]) -> None:
    """SliceLengthError unless some episode offers a window (``counts``: each episode's), naming the longest."""
    if counts.any():
        return
    if not lengths.size:
        raise SliceLengthError("there are no episodes to slice: collect or store some steps first",
                               length=request.length, longest_steps=0)
    longest = int(np.argmax(lengths))
    steps = int(lengths[longest])
    raise SliceLengthError(
        f"no episode holds {request.length} consecutive steps with pad='none': the longest, {describe(longest)}, "
        f"has {steps}; ask for length <= {steps}, or pad='start', 'end' or 'both' to take shorter episodes padded "
        "(mask says which rows are steps)",
        length=request.length, longest_steps=steps,
    )


def window_steps(lengths: np.ndarray, starts: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, mask), both (batch, length): each window row's step in its episode clamped to the episode
    (padded rows repeat its first or last step, so they can be gathered), and whether the row is a step."""
    begin = np.asarray(starts, dtype=np.int64)
    steps = begin[:, None] + np.arange(length, dtype=np.int64)
    ends = np.asarray(lengths, dtype=np.int64)
    if begin.size and int(begin.min()) >= 0 and int((ends - begin).min()) >= length:  # no window padded
        return steps, np.ones(steps.shape, dtype=bool)
    last = ends[:, None] - 1
    mask = (steps >= 0) & (steps <= last)
    return np.clip(steps, 0, last), mask


def discounted_sums(rewards: np.ndarray, cum: np.ndarray | None, first: np.ndarray, count: np.ndarray,
                    gamma: float) -> np.ndarray:
    """For each i, ``sum_{j < count[i]} gamma**j * rewards[first[i] + j]``: from the running sums ``cum``
    (``cum[k]``: the sum of ``rewards[:k]``) when ``gamma == 1``, else term by term over the rows asked."""
    first = np.asarray(first, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    if gamma == 1.0 and cum is not None:
        return cum.take(first + count) - cum.take(first)
    total = int(count.sum())
    if total == 0:
        return np.zeros(len(first))
    owner = np.repeat(np.arange(len(first)), count)
    within = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    terms = rewards.take(first[owner] + within) * np.power(gamma, within)
    return np.bincount(owner, weights=terms, minlength=len(first))


def window_returns(rewards: np.ndarray, cum: np.ndarray, first: np.ndarray, lengths: np.ndarray, starts: np.ndarray,
                   steps: np.ndarray, mask: np.ndarray, window_rewards: np.ndarray, gamma: float) -> np.ndarray:
    """(batch, length) returns-to-go of windows of episodes whose steps lie at linear ``first`` on (``rewards``
    and their running sums ``cum``, a leading 0): ``steps`` and ``mask`` as :func:`window_steps` gives them,
    ``window_rewards`` the windows' rewards (0 at padded rows). Plain sums are differences of ``cum``;
    discounted ones run backward over the window from the sum after it."""
    if gamma == 1.0:
        out = cum.take(first + lengths)[:, None] - cum.take(first[:, None] + steps)
        if not mask.all():
            out[~mask] = 0.0
        return out
    last = np.minimum(np.asarray(starts, dtype=np.int64) + steps.shape[1], lengths)  # the step after each window
    after = discounted_sums(rewards, None, first + last, lengths - last, gamma)
    return returns_to_go(window_rewards, mask, after, gamma)


def returns_to_go(rewards: np.ndarray, mask: np.ndarray, after: np.ndarray, gamma: float) -> np.ndarray:
    """(batch, length) returns-to-go of windows: at each step row the discounted sum of its reward and
    every later one of its episode; 0 at padded rows.

    Args:
        rewards: The windows' rewards, 0 at padded rows.
        mask: Which rows are steps.
        after: For each window, the discounted sum of the rewards after its last step row, counted from
            the step after it (0 where the window reaches the episode's end).
        gamma: The discount.
    """
    if gamma == 1.0:
        out = np.cumsum(rewards[:, ::-1], axis=1)[:, ::-1] + after[:, None]
    else:
        out = np.empty(rewards.shape)
        acc = np.asarray(after, dtype=np.float64)
        # rows padded past the end hold reward 0 and ``after`` is 0 there: they carry 0 to the last step row
        for j in range(rewards.shape[1] - 1, -1, -1):
            acc = rewards[:, j] + gamma * acc
            out[:, j] = acc
    out[~mask] = 0.0
    return out


def shape_rows(tree: Any, batch: int, length: int, padded: np.ndarray | None) -> Any:
    """A gathered batch of ``batch * length`` rows (nested dicts/tuples of arrays) as (batch, length, ...)
    arrays, rows where ``padded`` is true set to 0."""
    if isinstance(tree, dict):
        return {key: shape_rows(value, batch, length, padded) for key, value in tree.items()}
    if isinstance(tree, tuple):
        return tuple(shape_rows(value, batch, length, padded) for value in tree)
    out = np.asarray(tree).reshape(batch, length, *np.shape(tree)[1:])
    if padded is not None:
        if not out.flags.writeable:
            out = out.copy()
        out[padded] = 0
    return out
