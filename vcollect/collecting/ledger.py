"""TransitionLedger: transitions already recorded but not yet reported in a CollectStats.

Some collection cannot stop on an exact count: a backend that steps every env at once, steps still in
flight when an async call had to stop early, or a backend that returns results in fixed-size batches.
Those transitions are written to the rings and the store like any other, and the ledger remembers
them (oldest first) so that a later ``collect`` call reports each of them exactly once: its steps in
that call's ``n_collected_steps`` and, where it ended an episode, that episode in its ``returns``/``lens``.

While a call is open (``open_call``) the ledger reports early, into the call's returns and lengths, the
transitions the call is certain to report (the oldest ones up to its n_step, or each env's up to its
quota-th episode end) once it holds more than SETTLE_AT: it keeps only counts of them, so that one long
call holds a bounded number of transitions however many it collects.
"""

from __future__ import annotations

import numpy as np

from vcollect.stats import Extendable

__all__ = ["SETTLE_AT", "TransitionLedger"]

SETTLE_AT = 1 << 12
"""Transitions held beyond which an open call's certain ones are reported early (then again this many later)."""

_NEVER = 1 << 62


class TransitionLedger:
    """A FIFO of unreported transitions: the env id of each, and the return/length of the episodes they end.

    Pushed in chronological order (env ids distinct within one push); taken either as the oldest n
    transitions (``take_steps``) or, per env, up to and including its q-th episode end
    (``take_episodes``). ``episode_ends[env_id]`` counts the episode ends held for each env. Between
    ``open_call`` and ``close_call`` the transitions the call will report are reported early, and still
    counted by ``len`` and ``episode_ends`` until the call's ``take_steps``/``take_episodes``.
    """

    def __init__(self, num_envs: int, settle_at: int = SETTLE_AT) -> None:
        """Make an empty ledger.

        Args:
            num_envs: How many env ids there are.
            settle_at: Transitions held beyond which an open call's certain ones are reported early.
        """
        self.num_envs = int(num_envs)
        self.settle_at = int(settle_at)
        self._ends = np.zeros(self.num_envs, dtype=np.int64)
        self._ids: list[np.ndarray] = []
        self._ended: list[np.ndarray] = []
        self._returns: list[np.ndarray] = []  # one value per *ended* transition, in order
        self._lens: list[np.ndarray] = []
        self._count = 0
        # push_rows() blocks of steps not yet turned into the env id form above (all newer than it), in
        # order: (k, num_envs) masks of the rows that are transitions (None: all) and that ended an episode
        self._row_stepped: list[np.ndarray | None] = []
        self._row_ended: list[np.ndarray] = []
        self._row_counts: list[int] = []  # transitions of each
        self._rows_counted = 0  # how many of the push_rows() steps are in _ends already
        # the open call (open_call): its request, where it reports, and what was reported early (counted
        # in _ends and len(), but no longer held)
        self._goal: int | None = None
        self._quota: np.ndarray | None = None
        self._out: tuple[Extendable, Extendable] | None = None
        self._settle_at = _NEVER
        self._settled_steps = 0
        self._settled_episodes = 0
        self._settled_ends = np.zeros(self.num_envs, dtype=np.int64)

    def __len__(self) -> int:
        """Number of transitions held (those an open call reported early included)."""
        return self._count + self._settled_steps

    @property
    def held(self) -> int:
        """Transitions held one by one (an open call's early reported ones are only counted): what a ledger's
        memory grows with."""
        return self._count

    def open_call(
        self,
        returns_out: Extendable,
        lens_out: Extendable,
        *,
        n_step: int | None = None,
        quota: np.ndarray | None = None,
    ) -> None:
        """Start a collect call that asks for ``n_step`` transitions or each env's ``quota`` of episodes, and
        reports into ``returns_out``/``lens_out``: from now on the transitions it is certain to report are
        reported there early. Its ``take_steps``/``take_episodes`` must be given the same outputs.

        Args:
            returns_out: Where the call reports its episodes' returns.
            lens_out: Where it reports their lengths.
            n_step: The transitions the call reports (a steps call).
            quota: The episodes each env owes in the call (an episodes call); not changed until its take.

        Raises:
            ValueError: Not exactly one of ``n_step`` / ``quota``.
        """
        if (n_step is None) == (quota is None):
            raise ValueError("open_call takes exactly one of n_step or quota")
        self.close_call()
        self._goal = None if n_step is None else int(n_step)
        self._quota = None if quota is None else np.array(quota, dtype=np.int64)
        self._out = (returns_out, lens_out)
        self._settle_at = self.settle_at

    def close_call(self) -> tuple[int, int]:
        """End the open call (if any; its take ends it too). Returns the transitions and episodes it reported
        early that no take counted: (0, 0) after the call's take; what a call that failed had reported (no
        longer held: the caller counts them)."""
        unreported = self._end_settled()
        self._goal, self._quota, self._out = None, None, None
        self._settle_at = _NEVER
        return unreported

    def _end_settled(self) -> tuple[int, int]:
        """Forget what the open call reported early (out of _ends and len()); returns (steps, episodes)."""
        settled = (self._settled_steps, self._settled_episodes)
        if settled[0]:
            self._ends -= self._settled_ends
            self._settled_ends[:] = 0
            self._settled_steps = self._settled_episodes = 0
        return settled

    def _settle(self) -> None:
        """Report early what the open call is certain to report: the oldest transitions up to its n_step, or
        each env's up to its quota-th episode end (the take functions on the held transitions)."""
        assert self._out is not None
        returns_out, lens_out = self._out
        self._count_row_ends()
        self._ends -= self._settled_ends  # the held ones' ends only, for the takes
        held_ends = self._ends.copy()
        if self._goal is not None:
            steps = self._take_held_steps(self._goal - self._settled_steps, returns_out, lens_out)
        else:
            assert self._quota is not None
            steps = self._take_held_episodes(self._quota - self._settled_ends, returns_out, lens_out)[0]
        ended = held_ends - self._ends
        self._settled_ends += ended
        self._ends += self._settled_ends
        self._settled_steps += steps
        self._settled_episodes += int(ended.sum())
        self._settle_at = self._count + self.settle_at

    @property
    def episode_ends(self) -> np.ndarray:
        """Episode ends held per env id (an open call's early reported ones included): one array, kept up to
        date in place (push_rows() steps are counted in when it is read, so that a step after which no one
        reads the counts costs nothing)."""
        self._count_row_ends()
        return self._ends

    def _count_row_ends(self) -> None:
        rows = self._row_ended
        if self._rows_counted < len(rows):
            for ended in rows[self._rows_counted :]:
                self._ends += ended[0] if len(ended) == 1 else ended.sum(axis=0)
            self._rows_counted = len(rows)

    def push(self, env_ids: np.ndarray, ended: np.ndarray, returns: list[float], lens: list[int]) -> None:
        """Hold one transition per env id; ``ended`` (bool) marks those that ended an episode, whose
        whole-episode return and length are ``returns``/``lens`` (in env_ids order). The arrays are kept,
        not copied: do not modify them afterwards."""
        if len(env_ids) == 0:
            return
        if self._row_ended:
            self._flush_rows()
        self._ids.append(env_ids)
        self._ended.append(ended)
        self._count += len(env_ids)
        if len(returns):
            self._returns.append(np.asarray(returns, dtype=np.float64))
            self._lens.append(np.asarray(lens, dtype=np.int64))
            self._ends[env_ids[ended]] += 1
        if self._count > self._settle_at:
            self._settle()

    def push_rows(
        self, stepped: np.ndarray | None, ended: np.ndarray, returns: np.ndarray, lens: np.ndarray
    ) -> None:
        """Hold the transitions of one step of every env, or of k steps: ``ended`` is a bool per env id
        (k, num_envs), marking the transitions that ended an episode, and ``stepped`` the same shape bool
        mask of the rows that are transitions (None: all are); ``returns``/``lens`` are the whole-episode
        return and length of each episode end, step by step and in env id order within a step.

        What ``push`` holds for the same transitions, at a fraction of the per-step cost: env ids and
        episode-end flags are made in bulk, when transitions are taken. The arrays are kept, not copied:
        do not modify them afterwards.
        """
        if ended.ndim == 1:
            ended = ended[None]
            stepped = None if stepped is None else stepped[None]
        n = ended.size if stepped is None else int(np.count_nonzero(stepped))
        self._row_stepped.append(stepped)
        self._row_ended.append(ended)
        self._row_counts.append(n)
        self._count += n
        if len(returns):
            self._returns.append(returns)
            self._lens.append(lens)
        if self._count > self._settle_at:
            self._settle()

    def _rows_as_ids(self, first: int) -> tuple[np.ndarray, np.ndarray]:
        """Env ids and episode-end flags of the push_rows() steps from index ``first`` on, in order."""
        stepped, ended = self._row_stepped[first:], self._row_ended[first:]
        flags = np.concatenate(ended) if len(ended) > 1 else ended[0]
        if all(mask is None for mask in stepped):
            ids = np.tile(np.arange(self.num_envs, dtype=np.int64), len(flags))
            return ids, flags.reshape(-1)
        mask = np.concatenate([np.ones_like(e) if s is None else s for s, e in zip(stepped, ended)])
        # row-major: step by step, env ids ascending within a step
        return mask.nonzero()[1].astype(np.int64, copy=False), flags[mask]

    def _flush_rows(self) -> None:
        """Turn the push_rows() steps held into the env id form, in chronological order."""
        self._count_row_ends()
        ids, ended = self._rows_as_ids(0)
        self._ids.append(ids)
        self._ended.append(ended)
        self._row_stepped, self._row_ended, self._row_counts = [], [], []
        self._rows_counted = 0

    def _joined(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self._row_ended:
            self._flush_rows()
        if len(self._ids) != 1:
            self._ids = [np.concatenate(self._ids).astype(np.int64, copy=False)] if self._ids else [np.zeros(0, np.int64)]
            self._ended = [np.concatenate(self._ended)] if self._ended else [np.zeros(0, bool)]
        if len(self._returns) != 1:
            self._returns = [np.concatenate(self._returns)] if self._returns else [np.zeros(0)]
            self._lens = [np.concatenate(self._lens)] if self._lens else [np.zeros(0, np.int64)]
        return self._ids[0], self._ended[0], self._returns[0], self._lens[0]

    def _keep(self, taken: np.ndarray, returns_out: Extendable, lens_out: Extendable) -> int:
        """Report the transitions marked in ``taken`` (episode ends into the lists), keep the others."""
        ids, ended, rets, lens = self._joined()
        taken_ends = taken[ended]
        returns_out.extend(rets[taken_ends].tolist())
        lens_out.extend(lens[taken_ends].tolist())
        self._ends -= np.bincount(ids[taken & ended], minlength=self.num_envs)  # _joined() counted every row in
        kept = ~taken
        self._ids, self._ended = [ids[kept]], [ended[kept]]
        self._returns, self._lens = [rets[~taken_ends]], [lens[~taken_ends]]
        n_taken = int(np.count_nonzero(taken))
        self._count -= n_taken
        return n_taken

    def take_steps(self, n: int, returns_out: Extendable, lens_out: Extendable) -> int:
        """Report the oldest min(n, len) transitions; returns how many (an open call's early ones included:
        ``n`` is the call's whole request)."""
        settled = self.close_call()[0]
        return settled + self._take_held_steps(n - settled, returns_out, lens_out)

    def _take_held_steps(self, n: int, returns_out: Extendable, lens_out: Extendable) -> int:
        """take_steps on the transitions held."""
        if self._count == 0 or n <= 0:
            return 0
        if self._count - n <= sum(self._row_counts):
            return self._take_all_but_rows(n, returns_out, lens_out)
        taken = np.zeros(self._count, dtype=bool)
        taken[: min(n, self._count)] = True
        return self._keep(taken, returns_out, lens_out)

    def _take_all_but_rows(self, n: int, returns_out: Extendable, lens_out: Extendable) -> int:
        """take_steps where the transitions kept all come from the last push_rows() steps (the usual case:
        a collect call leaves less than one step over). Only those steps are turned into env ids."""
        keep, first, held = max(self._count - n, 0), len(self._row_counts), 0
        while held < keep:  # the steps holding the newest `keep` transitions
            first -= 1
            held += self._row_counts[first]
        if keep:
            ids, ended = self._rows_as_ids(first)
            ids, ended = ids[held - keep :], ended[held - keep :]
        else:
            ids, ended = np.zeros(0, np.int64), np.zeros(0, bool)
        rets = np.concatenate(self._returns) if self._returns else np.zeros(0)
        lens = np.concatenate(self._lens) if self._lens else np.zeros(0, np.int64)
        n_ends = len(rets) - int(np.count_nonzero(ended))  # the kept episode ends are the newest ones
        returns_out.extend(rets[:n_ends].tolist())
        lens_out.extend(lens[:n_ends].tolist())
        self._ids, self._ended = [ids], [ended]
        self._returns, self._lens = [rets[n_ends:]], [lens[n_ends:]]
        self._row_stepped, self._row_ended, self._row_counts = [], [], []
        self._rows_counted = 0
        self._ends[:] = np.bincount(ids[ended], minlength=self.num_envs)
        taken = self._count - keep
        self._count = keep
        return taken

    def take_episodes(self, quota: np.ndarray, returns_out: Extendable, lens_out: Extendable) -> tuple[int, int]:
        """Report, for each env, its transitions up to and including its ``quota[env]``-th episode end.

        ``quota`` is decreased by the episodes reported. Returns (transitions, episodes) reported (an open
        call's early ones included: ``quota`` is the call's whole request).
        """
        settled_ends = self._settled_ends.copy()
        steps, episodes = self.close_call()
        quota -= settled_ends
        taken = self._take_held_episodes(quota, returns_out, lens_out)
        return steps + taken[0], episodes + taken[1]

    def _take_held_episodes(self, quota: np.ndarray, returns_out: Extendable, lens_out: Extendable) -> tuple[int, int]:
        """take_episodes on the transitions held."""
        if self._count == 0:
            return 0, 0
        ids, ended, _, _ = self._joined()
        # episode ends of the same env strictly before each transition (an exclusive per-env cumsum)
        order = np.argsort(ids, kind="stable")
        ends_sorted = ended[order].astype(np.int64)
        inclusive = np.cumsum(ends_sorted)
        ids_sorted = ids[order]
        starts = np.flatnonzero(np.r_[True, ids_sorted[1:] != ids_sorted[:-1]])
        base = inclusive[starts] - ends_sorted[starts]
        group_base = np.repeat(base, np.diff(np.r_[starts, ids.size]))
        before = np.empty_like(inclusive)
        before[order] = inclusive - ends_sorted - group_base
        taken = before < quota[ids]
        n_episodes = int(np.count_nonzero(taken & ended))
        quota -= np.bincount(ids[taken & ended], minlength=self.num_envs)
        return self._keep(taken, returns_out, lens_out), n_episodes
