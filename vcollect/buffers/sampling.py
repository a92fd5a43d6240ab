"""Replay sampling from the rings: uniform draws of step rows, frame stacks gathered by index, n-step
returns walked forward by index, the batch.

Functions of a ring's columns (:class:`~vcollect.buffers.columns.RingColumns`), which the ring writes. A
row is a *step row* when it holds a transition (``has``); the row after a step row holds its next
observation and belongs to the same episode, and is itself a step row exactly when it holds the episode's
next transition (not when it is the episode's final row or the env's newest one); the row before a step
row is a step row of the same episode or not a step row at all (an episode's final row, or the ring's
newest row before its oldest one).
"""

from __future__ import annotations

import functools
import numbers
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from vcollect.spaces import unflatten_batch

if TYPE_CHECKING:
    from vcollect.buffers.columns import RingColumns
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


def sample_rows(columns: RingColumns, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """The step rows of ``sample(batch_size)``: ``batch_size`` uniform draws, or with ``batch_size=0`` every
    step row (``every_step_row``), as Tianshou's ``sample(0)`` gives all its data (on-policy updates)."""
    if check_count("batch_size", batch_size, 0) == 0:
        return every_step_row(columns)
    return draw_rows(columns.has, batch_size, rng)


def check_rows(indices: Any, size: int) -> np.ndarray:
    """``indices`` as a flat intp array of row ids in [0, size), else an IndexError saying what they must be."""
    idx = np.asarray(indices).reshape(-1)
    if idx.dtype != np.intp and idx.size:
        if idx.dtype.kind not in "iu":
            raise IndexError(f"indices must be integer flat row ids as sample() returns them, got {indices!r}")
        idx = idx.astype(np.intp)  # a uint64 beyond intp wraps negative: refused below
    # one reduction for both bounds: a negative index is a huge unsigned one
    if idx.size and idx.view(np.uintp).max() >= size:
        raise IndexError(f"indices must be flat row ids in [0, {size}) as sample() returns them, got {indices!r}")
    return idx


def transitions_at(columns: RingColumns, indices: Any) -> dict[str, Any]:
    """The transitions now held at flat rows ``indices`` (Tianshou's ``buffer[indices]``), as ``sample``
    returns them; rows holding no transition (never written, an episode's final row, or the env's newest)
    are refused. Like Tianshou's, a row rewritten since it was sampled gives its new transition."""
    idx = check_rows(indices, columns.has.size)
    empty = idx[~columns.has.take(idx)]
    if empty.size:
        raise IndexError(
            f"rows {empty[:8].tolist()} hold no transition (an episode's final or an env's newest observation, "
            "or never written): index with a batch's indices, as sample() returns them"
        )
    return gather_transitions(columns, idx)


def every_step_row(columns: RingColumns) -> np.ndarray:
    """Every step row, env by env, each env's in the order its steps were taken (the row after an env's
    newest row is its oldest one), as Tianshou's buffers list theirs for ``sample(0)``."""
    capacity = columns.capacity
    first = columns.last_rows % capacity + 1  # each env's oldest row, as a position in its own ring
    rows = ((first[:, None] + np.arange(capacity)) % capacity + columns.env_ids[:, None] * capacity).reshape(-1)
    rows = rows[columns.has.take(rows)]
    if rows.size == 0:
        raise ValueError("cannot sample from a buffer that holds no transitions: collect some steps first")
    return rows


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


def check_nstep(n_step: Any, gamma: Any) -> tuple[int, float] | None:
    """``(n_step, gamma)`` checked (an int >= 1, a real in [0, 1]), or None when neither is given."""
    if n_step is None and gamma is None:
        return None
    if n_step is None or gamma is None:
        raise ValueError(
            "n_step and gamma go together: pass both (e.g. sample(64, n_step=3, gamma=0.99)) or neither, "
            f"got n_step={n_step!r}, gamma={gamma!r}"
        )
    steps = check_count("n_step", n_step, 1)
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be a discount factor, a real number in [0, 1] (e.g. 0.99), got {gamma!r}")
    return steps, float(gamma)


@functools.lru_cache(maxsize=32)
def discount_powers(gamma: float, n_step: int) -> np.ndarray:
    """``gamma ** m`` for m in 0..n_step by repeated products, as Tianshou's table of them (read-only)."""
    powers = np.ones(n_step + 1)
    powers[1:] = np.cumprod(np.full(n_step, gamma))
    powers.flags.writeable = False
    return powers


def nstep_targets(
    columns: RingColumns, rows: np.ndarray, nxt: np.ndarray, done: np.ndarray, stack_num: int, n_step: int,
    gamma: float,
) -> dict[str, Any]:
    """The n-step keys of the batch of step rows ``rows`` (``nxt``: their next rows, ``done``: their steps'
    terminations or truncations), see gather_transitions.

    Walks at most n - 1 rows forward from every sampled row at once, a row going on while its step did
    not end the episode and the row after it is a step row (the episode's next transition; the env's
    newest step has none yet). The sum runs backward, ``r + gamma * (r' + ...)``, as Tianshou's does.
    """
    has, rew, term, trunc = columns.has, columns.rewards, columns.terminations, columns.truncations
    next_rows = columns.next_rows
    cur, ahead = rows, nxt
    chain, moved = [rows], []  # chain[j]: step t + j's row (the last one, once stopped); moved[j]: went past it
    steps = np.ones(len(rows), dtype=np.intp)  # m, the steps taken from each sampled row
    live = np.greater(has.take(ahead), done)  # the next row holds a step and this one did not end the episode
    for _ in range(n_step - 1):
        if not np.count_nonzero(live):  # (cheaper than live.any() on small arrays)
            break
        cur = np.where(live, ahead, cur)
        steps += live
        chain.append(cur)
        moved.append(live)
        ahead = next_rows.take(cur)
        live = live & np.greater(has.take(ahead), term.take(cur) | trunc.take(cur))
    returns = rew.take(cur)
    for j in range(len(moved) - 1, -1, -1):
        step_j = rew.take(chain[j])
        returns = np.where(moved[j], step_j + gamma * returns, step_j)
    boot = ahead if stack_num == 1 else stack_rows(ahead, stack_num, has, columns.capacity)  # step t+m-1's next row
    return {
        "n_step_returns": returns,
        "n_step_next_observations": unflatten_batch(columns.observation_space,
                                                    [a.take(boot, axis=0) for a in columns.obs]),
        "n_step_discounts": np.where(term.take(cur), 0.0, discount_powers(gamma, len(chain)).take(steps)),
    }


def gather_transitions(
    columns: RingColumns, rows: np.ndarray, stack_num: int = 1, n_step: int | None = None,
    gamma: float | None = None, observations: bool = True,
) -> dict[str, Any]:
    """The batch of the step rows ``rows``, what the rings' ``sample`` returns: a dict of ``observations``,
    ``actions``, ``rewards``, ``next_observations``, ``terminations``, ``truncations``, ``dones`` (either
    flag), ``indices`` (flat row ids, ``env_id * capacity + row``: Tianshou's ``sample`` returns them beside
    its Batch) and ``extras`` (episode-done hooks' columns).

    ``stack_num=k`` stacks observations over the last k steps of the same episode, shape (batch, k, ...),
    oldest first, the episode's first frame repeated before its start (as Tianshou's ``stack_num``), and
    the next observations likewise (the stack the agent sees one step later); rows are gathered by index,
    never stored k times. Frames older than the oldest row still in the ring repeat that row, as Tianshou.

    ``n_step=n`` with ``gamma`` (both or neither; Tianshou's ``compute_nstep_return``, DQN's
    ``n_step_return_horizon``) adds, from each sampled step t taking m steps (up to n, stopping after a step
    that terminates or truncates the episode, and at the env's newest step, which has no successor yet):
    ``n_step_returns`` (float64), the sum over j < m of ``gamma**j * reward[t + j]``;
    ``n_step_next_observations``, the observation after step t + m - 1, stacked as ``next_observations``;
    ``n_step_discounts`` (float64), ``gamma**m``, 0 where step t + m - 1 terminated (a truncation still
    bootstraps). The target is ``n_step_returns + n_step_discounts * Q(n_step_next_observations)``; with
    n_step=1 these are ``rewards``, ``next_observations`` and ``gamma * ~terminations``.

    ``observations=False`` leaves out ``observations`` and ``next_observations`` (a caller gathering them its
    own way). Gathers use ``take`` (about twice as fast as fancy indexing for rows of a 2-d array).
    """
    capacity = columns.capacity
    stack_num = check_count("stack_num", stack_num, 1, capacity)
    nstep = check_nstep(n_step, gamma)
    nxt = columns.next_rows.take(rows)
    if stack_num == 1 or not observations:
        obs_idx, next_idx = rows, nxt
    else:
        obs_idx = stack_rows(rows, stack_num, columns.has, capacity)
        next_idx = stack_rows(nxt, stack_num, columns.has, capacity)
    term, trunc = columns.terminations.take(rows), columns.truncations.take(rows)
    done = term | trunc
    obs_at = columns.observations

    batch: dict[str, Any] = {"observations": obs_at(obs_idx)} if observations else {}
    batch["actions"] = columns.actions(rows)
    batch["rewards"] = columns.rewards.take(rows)
    if observations:
        batch["next_observations"] = obs_at(next_idx)
    batch.update(
        terminations=term,
        truncations=trunc,
        dones=done,
        indices=rows,
        extras={name: column.take(rows, axis=0) for name, column in columns.extras.items()},  # episode-done hooks'
    )
    if nstep is not None:
        batch.update(nstep_targets(columns, rows, nxt, done, stack_num, *nstep))
    return batch
