"""TransitionLedger: transitions already recorded but not yet reported in a CollectStats.

Some collection cannot stop on an exact count: a backend that steps every env at once, steps still in
flight when an async call had to stop early, or a backend that returns results in fixed-size batches.
Those transitions are written to the rings and the store like any other, and the ledger remembers
them (oldest first) so that a later ``collect`` call reports each of them exactly once: its steps in
that call's ``n_collected_steps`` and, where it ended an episode, that episode in its ``returns``/``lens``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TransitionLedger"]


class TransitionLedger:
    """A FIFO of unreported transitions: the env id of each, and the return/length of the episodes they end.

    Pushed in chronological order (env ids distinct within one push); taken either as the oldest n
    transitions (``take_steps``) or, per env, up to and including its q-th episode end
    (``take_episodes``). ``episode_ends[env_id]`` counts the episode ends held for each env.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = int(num_envs)
        self.episode_ends = np.zeros(self.num_envs, dtype=np.int64)
        self._ids: list[np.ndarray] = []
        self._ended: list[np.ndarray] = []
        self._returns: list[np.ndarray] = []  # one value per *ended* transition, in order
        self._lens: list[np.ndarray] = []
        self._count = 0

    def __len__(self) -> int:
        """Number of transitions held."""
        return self._count

    def push(self, env_ids: np.ndarray, ended: np.ndarray, returns: list[float], lens: list[int]) -> None:
        """Hold one transition per env id; ``ended`` (bool) marks those that ended an episode, whose
        whole-episode return and length are ``returns``/``lens`` (in env_ids order). The arrays are kept,
        not copied: do not modify them afterwards."""
        if len(env_ids) == 0:
            return
        self._ids.append(env_ids)
        self._ended.append(ended)
        self._count += len(env_ids)
        if len(returns):
            self._returns.append(np.asarray(returns, dtype=np.float64))
            self._lens.append(np.asarray(lens, dtype=np.int64))
            self.episode_ends[env_ids[ended]] += 1

    def _joined(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if len(self._ids) != 1:
            self._ids = [np.concatenate(self._ids).astype(np.int64, copy=False)] if self._ids else [np.zeros(0, np.int64)]
            self._ended = [np.concatenate(self._ended)] if self._ended else [np.zeros(0, bool)]
        if len(self._returns) != 1:
            self._returns = [np.concatenate(self._returns)] if self._returns else [np.zeros(0)]
            self._lens = [np.concatenate(self._lens)] if self._lens else [np.zeros(0, np.int64)]
        return self._ids[0], self._ended[0], self._returns[0], self._lens[0]

    def _keep(self, taken: np.ndarray, returns_out: list[float], lens_out: list[int]) -> int:
        """Report the transitions marked in ``taken`` (episode ends into the lists), keep the others."""
        ids, ended, rets, lens = self._joined()
        taken_ends = taken[ended]
        returns_out.extend(rets[taken_ends].tolist())
        lens_out.extend(lens[taken_ends].tolist())
        self.episode_ends -= np.bincount(ids[taken & ended], minlength=self.num_envs)
        kept = ~taken
        self._ids, self._ended = [ids[kept]], [ended[kept]]
        self._returns, self._lens = [rets[~taken_ends]], [lens[~taken_ends]]
        n_taken = int(np.count_nonzero(taken))
        self._count -= n_taken
        return n_taken

    def take_steps(self, n: int, returns_out: list[float], lens_out: list[int]) -> int:
        """Report the oldest min(n, len) transitions; returns how many."""
        if self._count == 0 or n <= 0:
            return 0
        taken = np.zeros(self._count, dtype=bool)
        taken[: min(n, self._count)] = True
        return self._keep(taken, returns_out, lens_out)

    def take_episodes(self, quota: np.ndarray, returns_out: list[float], lens_out: list[int]) -> tuple[int, int]:
        """Report, for each env, its transitions up to and including its ``quota[env]``-th episode end.

        ``quota`` is decreased by the episodes reported. Returns (transitions, episodes) reported.
        """
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
