"""Closing: a collector's open/closed state and what its resets and its close do with the episodes it holds.

At a reset or a close the finished episodes queued for the store are handed over and the ones still
running are settled (stored truncated or dropped: the collector's ``unfinished``; the first drop is said
in an UnfinishedEpisodesWarning that names the option to pass where the collector was made); a close
then flushes the store and closes the envs. A collector with a store that nobody closes is closed at
interpreter exit or when garbage-collected (vcollect.exit_commits), its envs left open; what cannot be
handed over then is reported with an EpisodesLostWarning instead of an error.
"""

from __future__ import annotations

import os
import warnings
from typing import Literal

from vcollect.collecting.step_context import StepContext
from vcollect.errors import CollectorStateError, EpisodesLostWarning, UnfinishedEpisodesWarning, warn_user
from vcollect.store.sink import EpisodeSink

__all__ = ["Closing"]


class Closing:
    """Whether a collector is open and was reset, and the settling of its episodes at resets and close.

    Args:
        context: The collector's StepContext (its envs, its episode writer and running episodes).
        store: The collector's sink, flushed at close (None: no store).
        truncate_hint: How the user asks for ``unfinished="truncate"`` where the collector was made (e.g.
            ``"Collector(..., unfinished='truncate')"`` or a command's flag), named in the warning.
    """

    def __init__(self, context: StepContext, store: EpisodeSink | None, truncate_hint: str) -> None:
        self.context = context
        self.store = store
        self.truncate_hint = truncate_hint
        self.warned_unfinished = False
        """Whether the UnfinishedEpisodesWarning was given (once per collector)."""
        self.was_reset = False
        """Whether the envs were reset at least once (only then are there running episodes to settle)."""
        self.closed = False
        self.made_in = os.getpid() if context.writer is not None else None
        """The process that made a collector with a store (only it closes one left unclosed); else None."""

    def check_open(self) -> None:
        """Refuse to go on with a closed collector.

        Raises:
            CollectorStateError: The collector is closed.
        """
        if self.closed:
            raise CollectorStateError("this collector is closed; make a new Collector")

    def settle(self, unfinished: Literal["drop", "truncate"], when: str) -> None:
        """Hand the queued finished episodes to the store and settle the running ones (at a reset or close).

        Args:
            unfinished: What becomes of the running episodes: ``"truncate"`` stores them with their last step
                marked truncated, ``"drop"`` leaves them out, the first time with an UnfinishedEpisodesWarning
                (once per collector: a loop of ``collect(n_step=..., reset_before_collect=True)`` says it once).
            when: The moment named in that warning ("reset", "close", ...).
        """
        self.context.write_queued()
        if not self.was_reset:
            return
        episodes, steps = self.context.settle_unfinished(unfinished)
        if episodes and not self.warned_unfinished:
            self.warned_unfinished = True
            warn_user(
                f"{episodes} episodes still running at {when} ({steps} steps) were not stored; pass "
                f"{self.truncate_hint} to store them with their last step marked truncated (said once per "
                "collector: its later resets and its close drop running episodes alike)",
                UnfinishedEpisodesWarning,
            )

    def close(self, unfinished: Literal["drop", "truncate"], when: str, *, close_envs: bool) -> None:
        """Settle the episodes, flush the store and (with ``close_envs``) close the envs; once.

        Args:
            unfinished: What becomes of the running episodes (see :meth:`settle`).
            when: The moment named in the warning about running episodes.
            close_envs: Close the envs too (they are closed even when settling or flushing raises).
        """
        if self.closed:
            return
        self.closed = True
        try:
            self.settle(unfinished, when)
            if self.store is not None:
                self.store.flush()
        finally:
            if close_envs:
                self.context.envs.close()

    def close_unclosed(self, unfinished: Literal["drop", "truncate"], why: str) -> None:
        """Close a collector with a store that nobody closed, leaving its envs open (they may serve another).

        Its queued finished episodes go to the store, which is flushed; running ones are settled as a close
        settles them. Finished episodes that cannot be handed over are reported with an EpisodesLostWarning
        counting them and saying why (a store that cannot commit what it was handed says so when it is
        closed). A collector without a store, already closed, or made in another process (a forked child's
        copy) is left alone.

        Args:
            unfinished: What becomes of the running episodes (see :meth:`settle`).
            why: How the collector was left ("garbage-collected without close()", ...), for the warning.
        """
        writer = self.context.writer
        if self.closed or writer is None or os.getpid() != self.made_in:
            return
        try:
            self.close(unfinished, f"close ({why})", close_envs=False)
        except Exception as exc:
            episodes, steps = writer.queued, writer.queued_steps
            lost = (f"{episodes} finished episodes ({steps} steps) queued for its store could not be handed over "
                    "and are lost" if episodes else "its store could not commit the episodes it was handed (the "
                    "store says so when it is closed)")
            warnings.warn(f"Collector was {why}: {lost} ({type(exc).__name__}: {exc}); close the collector (or use "
                          "it in a with block) to see such errors where they happen", EpisodesLostWarning, stacklevel=3)

