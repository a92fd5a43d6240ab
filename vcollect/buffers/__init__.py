"""Per-env ring buffers of rows, written vectorised over env ids, replay sampling from them (alone or mixed with a
dataset), their checkpoints and preloading."""

from vcollect.buffers.mixed import MixedSampler
from vcollect.buffers.prioritized import PrioritizedVectorRingBuffer
from vcollect.buffers.ring import EpisodeEnds, EpisodeSlice, VectorRingBuffer

__all__ = ["EpisodeEnds", "EpisodeSlice", "MixedSampler", "PrioritizedVectorRingBuffer", "VectorRingBuffer"]
