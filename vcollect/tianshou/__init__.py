"""Tianshou's trainers on vcollect: a Collector and replay buffers its algorithms and trainers accept.

A Tianshou 2.x training script changes two lines (``from vcollect.tianshou import Collector,
VectorReplayBuffer``) and runs as before: the Collector steps the envs with vcollect's collect loop and records
into the buffer's rings, which Tianshou's algorithms read through Tianshou's replay-buffer protocol.

Needs the ``tianshou`` extra; without it, importing this package fails in one line naming the extra.
"""

from __future__ import annotations

try:
    import tianshou  # noqa: F401
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f"vcollect.tianshou needs {exc.name}, which is not installed: pip install 'vcollect[tianshou]'",
        name=exc.name,
    ) from None

from vcollect.tianshou.buffer import ReplayBuffer, VectorReplayBuffer
from vcollect.tianshou.collector import Collector

__all__ = ["Collector", "ReplayBuffer", "VectorReplayBuffer"]
