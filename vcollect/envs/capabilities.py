"""EnvCapabilities: what a vector-env backend can do, declared once and read once.

Collectors choose their step loop from this when they are built, instead of probing the backend with
``getattr`` on every call; a backend that does not declare it is not a vcollect ``VectorEnv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["EnvCapabilities", "StepLoop"]

StepLoop = Literal["subset", "all_envs", "blocks"]
"""``subset``: step the ready envs (step_reset where offered); ``all_envs``: step every env, one step at a
time; ``blocks``: step every env, staged in StepBlocks."""


@dataclass(frozen=True)
class EnvCapabilities:
    """Typed facts about a backend (all False / 1: a plain subset-stepping backend).

    Attributes:
        steps_all_envs: It can only step every env at once (``step_all``).
        autoresets: It restarts ended envs by itself (NEXT_STEP or SAME_STEP) instead of through ``reset``.
        seeded_resets: Its ``reset`` seeds each env with its own seed (else stored episodes get seed None).
        step_reset: It has ``step_reset`` (restart ended envs inside the step that ended them).
        steps_in_blocks: It writes its NEXT_STEP steps into a ``StepBlock`` (``step_into``).
        recv_batch_size: Async results come this many at a time (EnvPool's async mode; only AsyncCollector
            takes more than 1).
        recv_any: It has ``recv_any`` (steps and resets received in one wait, AsyncCollector).
        hands_over_obs: The observation arrays its ``step_into`` passes are new every step and never
            written to again, so a StepBlock may keep them instead of copying them (EnvPool's sync mode;
            needs ``steps_in_blocks``).
        restarts_envs: It replaces a worker that died or whose env raised inside a synchronous call, or
            while ``recv``/``recv_reset`` wait, and reports the env ids it replaced (``take_restarts``,
            vcollect.envs.restarts) instead of raising, within a budget (``max_restarts``); only
            subset-stepping backends with ``step_reset`` (the loops that handle it: SubsetLoop, and
            AsyncCollector's AsyncLoop).
        split_step_reset: It can start a ``step_reset`` of every env (``send_step_reset``) and hand its result
            over later (``recv_step_reset``), so the collector records one step while the envs take the next
            (the subprocess backend); needs ``step_reset``.

    Raises:
        ValueError: A combination of flags no loop handles (named), or ``recv_batch_size < 1``.
    """

    steps_all_envs: bool = False
    autoresets: bool = False
    seeded_resets: bool = True
    step_reset: bool = False
    steps_in_blocks: bool = False
    recv_batch_size: int = 1
    recv_any: bool = False
    hands_over_obs: bool = False
    restarts_envs: bool = False
    split_step_reset: bool = False

    def __post_init__(self) -> None:
        if self.recv_batch_size < 1:
            raise ValueError(f"recv_batch_size must be >= 1, got {self.recv_batch_size}")
        if self.steps_in_blocks and not (self.steps_all_envs and self.autoresets):
            raise ValueError("steps_in_blocks needs steps_all_envs and autoresets (NEXT_STEP restarts)")
        if self.hands_over_obs and not self.steps_in_blocks:
            raise ValueError("hands_over_obs is about step_into's arrays: it needs steps_in_blocks")
        if self.step_reset and self.steps_all_envs:
            raise ValueError("step_reset steps a subset of envs; a steps_all_envs backend cannot offer it")
        if self.restarts_envs and not self.step_reset:
            raise ValueError("restarts_envs is handled by the subset loop: it needs step_reset")
        if self.split_step_reset and not self.step_reset:
            raise ValueError("split_step_reset splits a step_reset in two: it needs step_reset")

    @property
    def loop(self) -> StepLoop:
        """The collector step loop these capabilities call for."""
        if self.steps_in_blocks:
            return "blocks"
        if self.steps_all_envs:
            return "all_envs"
        return "subset"
