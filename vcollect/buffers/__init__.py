"""Per-env ring buffers of rows, written vectorised over env ids, and replay sampling from them."""

from vcollect.buffers.hindsight import HERVectorRingBuffer, HindsightRelabeler
from vcollect.buffers.prioritized import PrioritizedVectorRingBuffer
from vcollect.buffers.ring import EpisodeEnds, EpisodeSlice, VectorRingBuffer

__all__ = [
    "EpisodeEnds",
    "EpisodeSlice",
    "HERVectorRingBuffer",
    "HindsightRelabeler",
    "PrioritizedVectorRingBuffer",
    "VectorRingBuffer",
]
