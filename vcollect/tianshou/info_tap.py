"""StepInfoTap: a vector env passed through to vcollect's collector, each step's info dicts written beside the
ring rows of their transitions (vcollect.tianshou.infos), as Tianshou's Collector stores ``info``.

It wraps backends that step each env on request (the subset loop's: dummy, subprocess, Ray), keeping every
capability they declare (``step_reset`` and its split halves included; PassThroughVectorEnv forwards them
and tells the hooks here of their steps and restarts): a step's infos are written when the step returns, before
the collector records it, so the ring's newest row of each stepped env is that step's row. It also counts
the ring rows each env's steps and resets write (``take_rows``), so the buffer's Tianshou indices follow the
new rows exactly. It passes the actions on as it gets them (vcollect.tianshou.mapped_actions maps them for
the envs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.ring import ring_columns
from vcollect.envs.pass_through import PassThroughVectorEnv
from vcollect.tianshou.infos import RowInfos

__all__ = ["StepInfoTap", "taps"]


def taps(envs: Any) -> bool:
    """Whether StepInfoTap can wrap ``envs``: a backend whose envs step on request, one subset at a time."""
    capabilities = envs.capabilities
    return capabilities.loop == "subset" and not capabilities.recv_any and capabilities.recv_batch_size == 1


class StepInfoTap(PassThroughVectorEnv):
    """A VectorEnv passing the protocol through and writing each step's infos at its ring rows.

    Args:
        envs: A subset-stepping vcollect VectorEnv (``taps(envs)``).
        ring: The rings the collector records into.
        infos: Where the infos go.
    """

    def __init__(self, envs: Any, ring: VectorRingBuffer, infos: RowInfos) -> None:
        super().__init__(envs)
        self._ring = ring
        self._infos = infos
        self._rows = np.zeros(self.num_envs, dtype=np.int64)  # ring rows each env wrote since take_rows

    def take_rows(self) -> int:
        """The most ring rows any env wrote (one per step, one per reset) since the last call."""
        most = int(self._rows.max())
        self._rows.fill(0)
        return most

    def on_reset(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        """Count the reset rows."""
        self._rows[env_ids] += 1

    def on_step(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        """Write each env's info at its step row (the ring's newest row of the env), and count the rows."""
        self._infos.write(ring_columns(self._ring).last_rows[env_ids], infos)
        self._rows[env_ids] += 1
