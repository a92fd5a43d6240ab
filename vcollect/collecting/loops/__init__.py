"""The Collector's step loops, one per way a backend can be stepped (chosen once, when it is built).

``SubsetLoop``: step exactly the envs that are needed (restarting ended envs inside the step where the
backend offers ``step_reset``). ``AllEnvLoop``: step every env every time (gymnasium vector envs), the
ledger holding transitions beyond the count for the next call. ``BlockLoop``: the same for NEXT_STEP
backends, staging up to a block of steps and recording them at once.
"""

from __future__ import annotations

from vcollect.collecting.loops.all_envs import AllEnvLoop
from vcollect.collecting.loops.blocks import BlockLoop
from vcollect.collecting.loops.step_loop import StepLoop
from vcollect.collecting.loops.subset import SubsetLoop

__all__ = ["AllEnvLoop", "BlockLoop", "StepLoop", "SubsetLoop"]
