"""A collector's calls, asked and answered: collect's count, episode order and reset's seed checked, each
env's episode quota, the loop run for the call, and the CollectStats a collect call returns.

``collect(n_step=n)`` asks a loop for exactly n transitions; ``collect(n_episode=n)`` gives each env a
quota of n // N episodes, one more for n % N envs drawn from the collector's generator. What the loop
recorded into the call's CollectCall becomes the CollectStats the call returns. Asked for Tianshou's order
(``episode_order="finished_first"``), a loop that steps envs on request shares the episodes as Tianshou does.
"""

from __future__ import annotations

import numpy as np

from vcollect.collecting.ledger import TransitionLedger
from vcollect.collecting.loops import StepLoop, SubsetLoop
from vcollect.collecting.step_context import CollectCall
from vcollect.stats import AbandonedEpisode, CollectStats

__all__ = [
    "call_stats",
    "checked_count",
    "checked_episode_order",
    "checked_seed",
    "count_failed_call",
    "episode_quota",
    "run_loop",
]


def checked_count(n_step: object, n_episode: object) -> int:
    """The count a collect call asks for: exactly one of ``n_step`` / ``n_episode``, a positive integer.

    Args:
        n_step: Transitions asked for, or None.
        n_episode: Whole episodes asked for, or None.

    Returns:
        The count given.

    Raises:
        ValueError: Both or neither are given, or the count is not a positive integer (bools refused).
    """
    if (n_step is None) == (n_episode is None):
        raise ValueError("pass exactly one of n_step or n_episode to collect()")
    count = n_step if n_step is not None else n_episode
    if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 1:
        raise ValueError(f"n_step / n_episode must be a positive integer, got {count!r}")
    return int(count)


def checked_episode_order(order: str, loop: StepLoop, envs_name: str, loop_kind: str) -> bool:
    """Whether ``collect``'s ``episode_order`` asks for Tianshou's order, which needs a loop that steps envs on
    request.

    Args:
        order: ``"quota"`` or ``"finished_first"``.
        loop: The collector's step loop.
        envs_name: The backend's class name, for the error.
        loop_kind: The backend's loop kind (its capabilities), for the error.

    Returns:
        True for ``"finished_first"``.

    Raises:
        ValueError: Another order, or ``"finished_first"`` on a backend whose envs all step at once.
    """
    if order not in ("quota", "finished_first"):
        raise ValueError(f"episode_order must be 'quota' or 'finished_first', got {order!r}")
    if order == "finished_first" and not isinstance(loop, SubsetLoop):
        raise ValueError(
            f"episode_order='finished_first' needs a backend that steps envs on request (dummy, subprocess, "
            f"Ray); {envs_name} does not (its loop is {loop_kind!r}): use episode_order='quota'"
        )
    return order == "finished_first"


def run_loop(loop: StepLoop, count: int, quota: np.ndarray | None, finished_first: bool, call: CollectCall) -> int:
    """Run the loop for one call: ``count`` transitions (``quota`` None), each env's ``quota`` of episodes, or
    ``count`` episodes in Tianshou's order (``finished_first``: a SubsetLoop, see checked_episode_order).

    Args:
        loop: The collector's step loop.
        count: The transitions or episodes asked for.
        quota: Each env's episodes (an episodes call), or None (a steps call).
        finished_first: Tianshou's order for an episodes call.
        call: The call's CollectCall (the loop records into it).

    Returns:
        The transitions the call reports.
    """
    if quota is None:
        return loop.collect_steps(count, call)
    if finished_first:
        assert isinstance(loop, SubsetLoop)
        return loop.collect_episodes_finished_first(count, call)
    return loop.collect_episodes(quota, call)


def checked_seed(seed: int | None) -> int | None:
    """The seed a reset is given, refusing a bool (Tianshou's ``reset(False)`` means reset_buffer=False).

    Args:
        seed: The first argument of ``reset``.

    Returns:
        The seed (None: keep the generator).

    Raises:
        TypeError: ``seed`` is a bool.
    """
    if isinstance(seed, bool):
        raise TypeError(
            f"reset(seed) got {seed!r}: the first argument of vcollect's reset is the seed; pass "
            "reset_buffer= (and reset_stats=) by keyword"
        )
    return seed


def episode_quota(n_episode: int, num_envs: int, rng: np.random.Generator) -> np.ndarray:
    """Episodes each env owes: n // N, plus one for n % N envs drawn at random.

    Args:
        n_episode: Whole episodes the call asks for.
        num_envs: The number of envs (N).
        rng: The collector's generator, which draws the envs that owe one more.

    Returns:
        One int64 quota per env id, summing to ``n_episode``.
    """
    quota = np.full(num_envs, n_episode // num_envs, dtype=np.int64)
    extra = n_episode % num_envs
    if extra:
        quota[rng.choice(num_envs, size=extra, replace=False)] += 1
    return quota


def call_stats(
    call: CollectCall, steps: int, elapsed: float, abandoned: tuple[AbandonedEpisode, ...]
) -> CollectStats:
    """What a collect call reports: its counts and time, and its episodes' returns and lengths (every one,
    or only their moments where the call keeps no per-episode values).

    Args:
        call: The call, with the returns and lengths of the episodes it finished.
        steps: The transitions it reports.
        elapsed: Its duration in seconds.
        abandoned: The episodes given up in it (their envs were replaced).

    Returns:
        The call's CollectStats.
    """
    kept = call.returns.keep
    return CollectStats(
        n_collected_steps=steps,
        n_collected_episodes=len(call.returns),
        collect_time=elapsed,
        returns=call.returns.array(np.float64),
        lens=call.lens.array(np.int64),
        abandoned=abandoned,
        returns_moments=None if kept else call.returns.moments(),
        lens_moments=None if kept else call.lens.moments(),
    )


def count_failed_call(ledger: TransitionLedger, exc: BaseException) -> tuple[int, int]:
    """End a collect call that raised: the steps and episodes its ledger had reported early, named on ``exc``.

    A long call's ledger reports what the call is certain to report as it comes; when the call then raises,
    those transitions are no longer held for a later call, so the collector adds them to
    ``collect_step``/``collect_episode`` and a note on the exception says so (from Python 3.11).

    Args:
        ledger: The collector's ledger, its call still open.
        exc: The exception the call raises.

    Returns:
        (steps, episodes) counted before the failure.
    """
    steps, episodes = ledger.close_call()
    add_note = getattr(exc, "add_note", None)
    if steps and add_note is not None:
        add_note(
            f"this collect call had counted {steps} steps and {episodes} episodes before it failed (added to "
            "collect_step/collect_episode); a later call reports only what was recorded after them"
        )
    return steps, episodes
