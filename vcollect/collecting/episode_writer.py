"""EpisodeWriter: hands the episodes finished in the rings to an EpisodeSink, whole, in order, in batches.

A finished episode stays in its env's ring until it is written: the writer queues a handle to it (env id,
ring row of its final observation, steps, and the seed, options and infos of its reset) and gathers the
queued episodes from the rings in one pass (``RingWriter.gather_episodes``) when ``WRITE_BATCH`` are
queued or they hold ``WRITE_STEPS`` steps, before the rings could overwrite one of them, and always before a
collect call returns. So a crash in the middle of a call loses fewer than WRITE_BATCH finished episodes and
fewer than WRITE_STEPS steps (plus the one episode being queued) on the collector's side; what the store
then holds is bounded by its ``shard_steps`` (vcollect/store/write/writer.py).

"Before the rings could overwrite": the ring answers how many rows an env may still write before an
episode's first row is overwritten (``rows_left``); the writer counts rounds of ring writes, a round
writing at most two rows per env (a step and the first observation of a restart), and writes the queue
before the round that could reach the oldest-deadline episode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from vcollect.buffers import EpisodeEnds, VectorRingBuffer
from vcollect.buffers.ring import RingWriter
from vcollect.errors import HookOutputError
from vcollect.spaces import flatten_batch, unflatten_batch
from vcollect.store.sink import EpisodeSink, TakesEpisodes

__all__ = ["WRITE_BATCH", "WRITE_STEPS", "EpisodeWriter"]

WRITE_BATCH = 128
"""Finished episodes gathered from the rings before they are handed to the sink at once."""

WRITE_STEPS = 2048
"""Steps of queued finished episodes that make the queue go to the sink even with fewer than WRITE_BATCH
episodes (long episodes, e.g. Atari's, are handed over one or a few at a time). Each hand-over has a fixed
cost (the sink's checks, one gather per column, a part per column in the store's pending shard): with 8
CartPole envs and a store, 2,048 steps a hand-over cost ~3 us per vector step less than 1,024, for twice what
a crash can lose on the collector's side (still small beside a store's ``shard_steps``)."""

EpisodeInfos = Callable[[int, int], "Mapping[str, Any] | None"]
"""(env id, steps) -> the infos recorded for that env's episode that just ended (record_infos)."""


class _Queued(NamedTuple):
    env_id: int
    last_row: int
    steps: int
    seed: int | None
    options: dict[str, Any] | None
    infos: Mapping[str, Any] | None
    extras: Mapping[str, np.ndarray] | None = None


class EpisodeWriter:
    """The seed and options of each env's current episode, and the queue of finished episodes for the sink.

    ``infos`` (record_infos): called when an episode ends to fetch what was recorded for it. Per-step
    arrays an episode-done hook returned (``extras`` of ``ended``/``truncated``) are stored beside them,
    as per-step info columns.
    """

    def __init__(self, sink: EpisodeSink, buffer: VectorRingBuffer, infos: EpisodeInfos | None = None) -> None:
        self.sink = sink
        # gathered episodes are fresh arrays this writer drops: a sink that takes them keeps them uncopied
        self._take = sink.take_episodes if isinstance(sink, TakesEpisodes) else sink.write_episodes
        self.buffer = buffer
        self.ring = RingWriter(buffer)
        self._infos = infos
        n = buffer.num_envs
        self.seeds: list[int | None] = [None] * n
        self.options: list[dict[str, Any] | None] = [None] * n
        self._described = False  # whether some env's seed or options were ever set (not None)
        self._queue: list[_Queued] = []
        self._queued_steps = 0
        self._rounds = 0  # rounds of ring writes so far
        self._write_by: int | None = None  # the round before which the queue must be written

    @property
    def queued(self) -> int:
        """Finished episodes not handed to the sink yet."""
        return len(self._queue)

    @property
    def queued_steps(self) -> int:
        """Steps of the finished episodes not handed to the sink yet."""
        return self._queued_steps

    # ------------------------------------------------------------------ episodes starting

    def started(self, env_ids: list[int], seeds: list[int | None], options: dict[str, Any] | None) -> None:
        """Episodes begun by a reset with these seeds (None: not replayable by seed) and options."""
        for env_id, seed in zip(env_ids, seeds):
            self.seeds[env_id] = seed
            self.options[env_id] = options
        if not self._described and (options is not None or any(seed is not None for seed in seeds)):
            self._described = True

    def self_started(self, env_ids: np.ndarray) -> None:
        """Episodes an env started by itself: no seed, no options."""
        if self._described:  # else every env's seed and options are None already
            for env_id in env_ids.tolist():
                self.seeds[env_id] = None
                self.options[env_id] = None

    # ------------------------------------------------------------------ episodes ending

    def next_rounds(self, rounds: int = 1) -> None:
        """Count rounds of ring writes about to happen; first write the queue if they could reach it."""
        self._rounds += rounds
        if self._write_by is not None and self._rounds >= self._write_by:
            self.write_queued()

    def ended(self, env_ids: np.ndarray, extras: list[dict[str, np.ndarray]] | None = None) -> None:
        """Queue the episodes of env_ids that ended in this round (whole in their rings, or spilled aside),
        with an episode-done hook's per-step arrays for each (``extras``, in env_ids order)."""
        buffer = self.buffer
        for i, env_id in enumerate(env_ids.tolist()):
            hooked = None if extras is None else extras[i]
            infos = None if self._infos is None else self._infos(env_id, int(buffer.episode_lengths[env_id]))
            ref = self.ring.episode_ref(env_id)
            if ref is None:  # part of it was copied aside (longer than its ring): write it alone, now
                self.write_queued()
                self._write_now(env_id, infos, hooked)
                continue
            last_row, steps = ref
            self._queue.append(
                _Queued(env_id, last_row, steps, self.seeds[env_id], self.options[env_id], infos, hooked)
            )
            self._queued_steps += steps
            # the restart that may follow in this round writes one row first
            rounds = (self.ring.rows_left_after_end(steps) - 1) // 2
            if rounds < 1 or self._full():
                self.write_queued()
            else:
                self._deadline(rounds)

    def block_ended(self, ends: EpisodeEnds, restarts: np.ndarray) -> None:
        """Queue the episodes that ended in a block of steps just added to the rings (all whole in them).

        An env's episodes after its first restart in the block were started by the env: no seed, options."""
        steps = ends.steps
        own = ((np.cumsum(restarts, axis=0) - restarts)[steps, ends.env_ids] == 0).tolist()
        rows = self.ring.rows_left(ends.env_ids, ends.last_rows, ends.lengths)
        seeds, options = self.seeds, self.options
        for i, (env_id, last_row, length, first, left) in enumerate(zip(
            ends.env_ids.tolist(), ends.last_rows.tolist(), ends.lengths.tolist(), own, rows.tolist()
        )):
            seed, opts = (seeds[env_id], options[env_id]) if first else (None, None)
            chunks = ends.spilled.get(i)
            if chunks is not None:  # its first steps were copied out of the ring: written alone, now, in order
                self.write_queued()
                in_ring = length - ends.spilled_steps(i)
                obs, acts, rew, term, trunc = self.ring.gather_spilled_episode(env_id, last_row, in_ring, chunks)
                self._hand_over(obs, acts, rew, term, trunc, np.array([length], dtype=np.int64), [seed], [env_id],
                                [opts], None, None)
                continue
            self._queue.append(_Queued(env_id, last_row, length, seed, opts, None))
            self._queued_steps += length
            if self._full():
                self.write_queued()
            else:
                self._deadline((left - 1) // 2)
        if self._write_by is not None and self._write_by <= self._rounds:
            self.write_queued()

    def truncated(self, env_ids: np.ndarray, extras: list[dict[str, np.ndarray]] | None = None) -> None:
        """Hand over the running episodes of env_ids as they are, their last step marked truncated (as
        Minari's DataCollector stores an episode cut short by a reset), after what is queued."""
        self.write_queued()
        buffer = self.buffer
        for i, env_id in enumerate(env_ids.tolist()):
            episode = buffer.episode(env_id)
            steps = len(episode.rewards)
            infos = None if self._infos is None else self._infos(env_id, steps)
            truncations = np.array(episode.truncations, dtype=bool)
            truncations[-1] = True
            self._hand_over(
                flatten_batch(buffer.observation_space, episode.observations),
                flatten_batch(buffer.action_space, episode.actions),
                np.array(episode.rewards), np.array(episode.terminations), truncations,
                np.array([steps], dtype=np.int64), [self.seeds[env_id]], [env_id], [self.options[env_id]],
                None if self._infos is None else [infos], None if extras is None else [extras[i]],
            )

    def _full(self) -> bool:
        """Whether the queue holds WRITE_BATCH episodes or WRITE_STEPS steps (it goes to the sink at once)."""
        return len(self._queue) >= WRITE_BATCH or self._queued_steps >= WRITE_STEPS

    def _deadline(self, rounds: int) -> None:
        deadline = self._rounds + max(rounds, 0)
        self._write_by = deadline if self._write_by is None else min(self._write_by, deadline)

    # ------------------------------------------------------------------ handing over

    def write_queued(self) -> None:
        """Gather the queued episodes from the rings in one pass and hand them to the sink."""
        queue = self._queue
        if not queue:
            return
        self._queue = []
        self._queued_steps = 0
        self._write_by = None
        env_ids, last_rows, steps, seeds, options, infos, extras = zip(*queue)
        lengths = np.array(steps, dtype=np.int64)
        obs, acts, rewards, terms, truncs = self.ring.gather_episodes(
            np.array(env_ids, dtype=np.int64), np.array(last_rows, dtype=np.int64), lengths
        )
        self._hand_over(obs, acts, rewards, terms, truncs, lengths, list(seeds), list(env_ids), list(options),
                        list(infos) if self._infos is not None else None, list(extras), fresh=True)

    def _write_now(
        self, env_id: int, infos: Mapping[str, Any] | None, extras: Mapping[str, np.ndarray] | None
    ) -> None:
        """Hand over env_id's just finished episode alone (the ring keeps it whole: RingWriter.keep_whole_episodes)."""
        buffer = self.buffer
        if self.ring.episode_truncated_in_ring(env_id):
            raise RuntimeError(
                f"env {env_id}'s episode is longer than its ring and its start was not kept: the collector "
                "must call RingWriter(ring).keep_whole_episodes() on a ring it writes to a store"
            )
        episode = buffer.episode(env_id)
        self._hand_over(
            flatten_batch(buffer.observation_space, episode.observations),
            flatten_batch(buffer.action_space, episode.actions),
            episode.rewards, episode.terminations, episode.truncations,
            np.array([len(episode.rewards)], dtype=np.int64), [self.seeds[env_id]], [env_id],
            [self.options[env_id]], None if self._infos is None else [infos], [extras],
        )

    def _hand_over(
        self, obs: list[np.ndarray], acts: list[np.ndarray], rewards: np.ndarray, terms: np.ndarray,
        truncs: np.ndarray, lengths: np.ndarray, seeds: list[int | None], env_ids: list[int],
        options: list[dict[str, Any] | None], infos: list[Mapping[str, Any] | None] | None,
        extras: list[Mapping[str, np.ndarray] | None] | None,
        *,
        fresh: bool = False,
    ) -> None:
        """Write the episodes to the sink; ``fresh``: the arrays are this writer's alone (handed over)."""
        buffer = self.buffer
        if extras is not None and any(extras):
            infos = [_with_extras(i, e) for i, e in zip(infos or [None] * len(extras), extras)]
        extra: dict[str, Any] = {} if infos is None or not any(infos) else {"infos": infos}
        write = self._take if fresh else self.sink.write_episodes
        write(
            unflatten_batch(buffer.observation_space, obs),
            unflatten_batch(buffer.action_space, acts),
            rewards, terms, truncs, lengths, seeds=seeds, env_ids=env_ids, options=options, **extra,
        )


def _with_extras(infos: Mapping[str, Any] | None, extras: Mapping[str, np.ndarray] | None) -> Mapping[str, Any] | None:
    """An episode's recorded infos with a hook's per-step arrays added as info columns of their own."""
    if not extras:
        return infos
    if not infos:
        return extras
    clash = sorted(set(infos) & set(extras))
    if clash:
        raise HookOutputError(
            f"on_episode_done_hook returned {clash[0]!r}, a key the env's recorded infos have too; rename it"
        )
    return {**infos, **extras}
