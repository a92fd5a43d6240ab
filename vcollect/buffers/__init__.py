"""Per-env ring buffers of rows (DESIGN.md section 3), written vectorised over env ids, and the block of
steps staged on their way to them."""

from vcollect.buffers.ring import EpisodeEnds, EpisodeSlice, VectorRingBuffer
from vcollect.buffers.step_block import StepBlock

__all__ = ["EpisodeEnds", "EpisodeSlice", "StepBlock", "VectorRingBuffer"]
