"""StepLoop: what every Collector step loop offers."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from vcollect.collecting.step_context import CollectCall

__all__ = ["StepLoop"]


class StepLoop(Protocol):
    """Steps a collector's envs until a call's count is met; returns the transitions it reports."""

    def collect_steps(self, n_step: int, call: CollectCall) -> int:
        """Record until exactly n_step transitions can be reported; report them."""
        ...

    def collect_episodes(self, quota: np.ndarray, call: CollectCall) -> int:
        """Record until each env finished its quota of episodes; report those episodes' transitions."""
        ...
