"""The Collector's step loops, one per way a backend can be stepped (chosen once, when it is built).

``SubsetLoop``: step exactly the envs that are needed (restarting ended envs inside the step where the
backend offers ``step_reset``). ``AllEnvLoop``: step every env every time (gymnasium vector envs), the
ledger holding transitions beyond the count for the next call. ``BlockLoop``: the same for NEXT_STEP
backends, staging up to a block of steps and recording them at once. ``pick_loop`` chooses among them from
the backend's capabilities.
"""

from __future__ import annotations

from vcollect.collecting.loops.all_envs import AllEnvLoop
from vcollect.collecting.loops.blocks import BlockLoop
from vcollect.collecting.loops.step_loop import StepLoop
from vcollect.collecting.loops.subset import SubsetLoop
from vcollect.collecting.step_context import StepContext

__all__ = ["AllEnvLoop", "BlockLoop", "StepLoop", "SubsetLoop", "pick_loop"]


def pick_loop(context: StepContext, stage_blocks: bool) -> StepLoop:
    """The step loop a backend's capabilities call for.

    Args:
        context: The collector's parts (its ``capabilities.loop`` decides).
        stage_blocks: Whether a NEXT_STEP backend's steps are staged in blocks.

    Returns:
        A BlockLoop, SubsetLoop or AllEnvLoop over ``context``.
    """
    kind = context.capabilities.loop
    if kind == "blocks" and stage_blocks:
        return BlockLoop(context)
    if kind == "subset":
        return SubsetLoop(context)
    return AllEnvLoop(context)
