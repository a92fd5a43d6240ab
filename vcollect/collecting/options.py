"""The keyword options every collector takes (Collector, AsyncCollector), typed once.

``CollectorOptions`` types them for a signature (``**options: Unpack[CollectorOptions]``), so a
collector that adds options of its own lists only those; ``CollectorSettings`` gives each its default
and checks the values, once, when a collector is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from vcollect.hooks import EpisodeRolloutHook, StepHook
from vcollect.monitor import Monitor

__all__ = ["CollectorOptions", "CollectorSettings"]


class CollectorOptions(TypedDict, total=False):
    """The keyword options of a collector, each optional (defaults and meaning: CollectorSettings)."""

    seed: int | None
    exploration_noise: bool
    validate: bool
    record_infos: bool
    seed_every_reset: bool
    seed_first_reset: bool
    stage_blocks: bool
    unfinished: Literal["drop", "truncate"]
    unfinished_hint: str | None
    check_finite: bool
    on_step_hook: StepHook | None
    on_episode_done_hook: EpisodeRolloutHook | None
    monitor: Monitor | Sequence[Monitor] | None


@dataclass(frozen=True)
class CollectorSettings:
    """A collector's options with their defaults filled in, checked.

    Args:
        seed: seeds every reset's seed stream and the actions of ``collect(random=True)``.
        exploration_noise: add the policy's exploration noise to its actions.
        validate: check observations, rewards and a policy's actions.
        record_infos: keep each env's infos since its reset and store them with the episode.
        seed_every_reset: seed every reset (False: only each env's first).
        seed_first_reset: with ``seed_every_reset=False``, seed each env's first reset (False: no reset).
        stage_blocks: record NEXT_STEP backends' steps in blocks.
        unfinished: what becomes of episodes still running at close or reset: ``"drop"`` or ``"truncate"``.
        unfinished_hint: how the UnfinishedEpisodesWarning tells the user to ask for ``"truncate"``, for an
            entry point that makes the collector for its user (a command's ``--unfinished truncate``); None:
            the collector's own keyword (``Collector(..., unfinished='truncate')``).
        check_finite: with ``validate``, refuse NaN/inf in observations of unbounded Box spaces.
        on_step_hook: called on every step before it is recorded.
        on_episode_done_hook: called on every finished episode.
        monitor: given live figures (steps/s, episodes, mean return, per-env rates) a few times a second
            while collecting (vcollect.monitor); one or several.

    ``unfinished``: what becomes of the episodes still running when a collector with a store is closed or
    reset. ``"drop"`` (default): they are not stored, and an ``UnfinishedEpisodesWarning`` gives their count
    and steps (once per collector, at the first reset or close that drops any); every stored episode then ended as its env ended it, and the stored episodes are exactly
    those CollectStats reported. ``"truncate"``: they are stored, their last step marked truncated (as
    Minari's DataCollector stores an episode cut short by a reset), so the dataset holds every step
    collected; they are reported by no CollectStats, and their last step's truncation is not the env's.

    ``validate`` (default True) checks every observation against the observation space, every reward for
    being finite, and a policy's actions against the action space; ``check_finite=True`` also refuses
    NaN/inf in observations of unbounded Box spaces.

    ``seed_every_reset=False`` seeds only each env's first reset (after construction or ``reset(seed=...)``);
    later episodes continue the env's own generator, as Tianshou's and Minari's collectors reset, and are
    stored with ``seed=None``: the run is reproducible from ``seed`` as a whole, but an episode can no
    longer be replayed alone by its seed. It saves gymnasium's new generator per reset (about 10 us).
    ``seed_first_reset=False`` (with ``seed_every_reset=False``) seeds no reset at all: every env carries on
    the generator it has, as seeded by its caller (Tianshou's ``venv.seed(seed)`` before its Collector resets
    without a seed); ``seed`` then seeds only ``collect(random=True)``'s actions and the episode quotas.

    Raises:
        TypeError: an option that no collector takes.
        ValueError: ``unfinished`` is neither ``"drop"`` nor ``"truncate"``.
        TypeError: ``unfinished_hint`` is neither a string nor None.
        ValueError: ``seed_first_reset=False`` with ``seed_every_reset=True``.
    """

    seed: int | None = None
    exploration_noise: bool = False
    validate: bool = True
    record_infos: bool = False
    seed_every_reset: bool = True
    seed_first_reset: bool = True
    stage_blocks: bool = True
    unfinished: Literal["drop", "truncate"] = "drop"
    unfinished_hint: str | None = None
    check_finite: bool = False
    on_step_hook: StepHook | None = None
    on_episode_done_hook: EpisodeRolloutHook | None = None
    monitor: Monitor | Sequence[Monitor] | None = None

    def __post_init__(self) -> None:
        if self.unfinished not in ("drop", "truncate"):
            raise ValueError(f"unfinished must be 'drop' or 'truncate', got {self.unfinished!r}")
        if self.unfinished_hint is not None and not isinstance(self.unfinished_hint, str):
            raise TypeError(f"unfinished_hint must be a string or None, got {type(self.unfinished_hint).__name__}")
        if self.seed_every_reset and not self.seed_first_reset:
            raise ValueError(
                "seed_first_reset=False seeds no reset, which contradicts seed_every_reset=True: pass "
                "seed_every_reset=False with it"
            )
