"""Per-env ring buffers of rows, written vectorised over env ids, replay sampling from them (alone, mixed with a
dataset, or with hindsight goals), their checkpoints and preloading."""

from vcollect.buffers.hindsight import HERVectorRingBuffer, HindsightRelabeler
from vcollect.buffers.mixed import MixedSampler
from vcollect.buffers.prioritized import PrioritizedVectorRingBuffer
from vcollect.buffers.ring import EpisodeEnds, EpisodeSlice, VectorRingBuffer

__all__ = [
    "EpisodeEnds",
    "EpisodeSlice",
    "HERVectorRingBuffer",
    "HindsightRelabeler",
    "MixedSampler",
    "PrioritizedVectorRingBuffer",
    "VectorRingBuffer",
]
