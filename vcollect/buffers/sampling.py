"""Replay sampling from the rings: uniform draws of step rows, frame stacks gathered by index, the batch.

Functions of a ring's flat arrays (``VectorRingBuffer`` internals), kept apart from the ring's write path.
A row is a *step row* when it holds a transition (``has``); the row after a step row holds its next
observation and belongs to the same episode; the row before a step row is a step row of the same episode
or not a step row at all (an episode's final row, or the ring's newest row before its oldest one).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from vcollect.spaces import unflatten_batch

if TYPE_CHECKING:
    from vcollect.buffers.ring import VectorRingBuffer
    from vcollect.buffers.sum_tree import SumTree

# Rounds of redrawing rejected candidates before falling back to listing every step row.
_REDRAW_ROUNDS = 16
# Below 1 step row in this many rows, listing the step rows is cheaper than drawing candidates.
_MIN_SHARE = 32


def ring_capacity(num_envs: int, capacity: int | None, total_size: int | None) -> int:
    """Rows per env ring: ``capacity``, or ``ceil(total_size / num_envs)`` as Tianshou's VectorReplayBuffer
    splits ``total_size`` between its ``buffer_num`` buffers; exactly one of the two."""
    if (capacity is None) == (total_size is None):
        raise ValueError(
            "give exactly one of capacity (rows per env) and total_size (rows in all, split between the envs), "
            f"got capacity={capacity!r}, total_size={total_size!r}"
        )
    if capacity is not None:
        return int(capacity)
    if int(num_envs) < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return -(-int(total_size) // int(num_envs))  # type: ignore[arg-type]


def check_count(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high], else a ValueError naming it and the range."""
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {value!r}") from None
    if number < low or (high is not None and number > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bounds}, got {number}")
    return number


def draw_rows(has: np.ndarray, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """``batch_size`` flat step rows drawn uniformly with replacement.

    Candidates are drawn from every row and those that hold no step are dropped: the kept ones, taken in
    order, are independent uniform draws of step rows. Each round draws what is still missing, scaled by
    the share kept so far, so a ring still filling up takes few rounds; no pass over the whole ring unless
    under 1 row in ``_MIN_SHARE`` is a step (then the step rows are listed once).
    """
    batch_size = check_count("batch_size", batch_size, 1)
    rows = rng.integers(0, has.size, size=batch_size)
    ok = has[rows]
    if ok.all():
        return rows
    kept, drawn = [rows[ok]], batch_size
    have = int(kept[0].size)
    for _ in range(_REDRAW_ROUNDS):
        share = have / drawn
        if share < 1 / _MIN_SHARE:
            break
        more = rng.integers(0, has.size, size=int((batch_size - have) / share * 1.25) + 8)
        drawn += more.size
        more = more[has[more]]
        kept.append(more)
        have += more.size
        if have >= batch_size:
            return np.concatenate(kept)[:batch_size]
    stored = np.flatnonzero(has)
    if stored.size == 0:
        raise ValueError("cannot sample from a buffer that holds no transitions: collect some steps first")
    rest = stored[rng.integers(0, stored.size, size=batch_size - have)]
    return np.concatenate([*kept, rest])


def draw_priority_rows(
    tree: SumTree, batch_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, float]:
    """``batch_size`` flat step rows drawn with replacement in proportion to their leaves in ``tree``, their
    leaf values (an array of their own) and the smallest of them.

    Values are drawn in (0, total], so a leaf of 0 (a row holding no step) is never found in exact
    arithmetic; the few that rounding could still land on are drawn again.
    """
    batch_size = check_count("batch_size", batch_size, 1)
    if not tree.total > 0.0:
        raise ValueError("cannot sample from a buffer that holds no transitions: collect some steps first")
    uniform = rng.random(batch_size)
    rows, leaf = tree.sample(np.subtract(1.0, uniform, out=uniform))
    low = float(leaf.min())
    if low > 0.0:
        return rows, leaf, low
    bad = np.flatnonzero(leaf <= 0.0)  # rows holding no step have leaf 0 (the caller synced the tree)
    for _ in range(_REDRAW_ROUNDS):
        again, again_leaf = tree.sample(1.0 - rng.random(bad.size))
        rows[bad], leaf[bad] = again, again_leaf
        bad = bad[again_leaf <= 0.0]
        if not bad.size:
            return rows, leaf, float(leaf.min())
    raise RuntimeError(f"prioritized sampling kept finding empty rows ({bad.size}); the sum tree is inconsistent")


def stack_rows(rows: np.ndarray, stack_num: int, has: np.ndarray, capacity: int) -> np.ndarray:
    """(len(rows), stack_num) flat rows: each row's k - 1 predecessors in its episode, oldest first, the
    episode's first row (or the oldest one still in the ring) repeated where the episode is shorter."""
    stack = np.empty((len(rows), stack_num), dtype=np.intp)
    stack[:, -1] = cur = rows
    for j in range(stack_num - 2, -1, -1):
        prev = cur - 1 + capacity * (cur % capacity == 0)  # the row before, inside the env's own ring
        cur = np.where(has[prev], prev, cur)
        stack[:, j] = cur
    return stack


def gather_transitions(ring: VectorRingBuffer, rows: np.ndarray, stack_num: int = 1) -> dict[str, Any]:
    """The batch of the step rows ``rows`` (see ``VectorRingBuffer.sample``), observations stacked k deep.
    Gathers use ``take`` (about twice as fast as fancy indexing for rows of a 2-d array)."""
    stack_num = check_count("stack_num", stack_num, 1, ring.capacity)
    nxt = ring._next_flat.take(rows)
    if stack_num == 1:
        obs_idx, next_idx = rows, nxt
    else:
        obs_idx = stack_rows(rows, stack_num, ring._has_flat, ring.capacity)
        next_idx = stack_rows(nxt, stack_num, ring._has_flat, ring.capacity)
    term, trunc = ring._term_flat.take(rows), ring._trunc_flat.take(rows)
    return {
        "observations": unflatten_batch(ring.observation_space, [a.take(obs_idx, axis=0) for a in ring._obs_flat]),
        "actions": unflatten_batch(ring.action_space, [a.take(rows, axis=0) for a in ring._act_flat]),
        "rewards": ring._rew_flat.take(rows),
        "next_observations": unflatten_batch(ring.observation_space, [a.take(next_idx, axis=0) for a in ring._obs_flat]),
        "terminations": term,
        "truncations": trunc,
        "dones": term | trunc,
        "indices": rows,
        "extras": {name: column.take(rows, axis=0) for name, column in ring.extras.items()},  # episode-done hooks' values
    }
