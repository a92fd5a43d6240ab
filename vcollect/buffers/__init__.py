"""Per-env ring buffers of rows, written vectorised over env ids."""

from vcollect.buffers.ring import EpisodeEnds, EpisodeSlice, VectorRingBuffer

__all__ = ["EpisodeEnds", "EpisodeSlice", "VectorRingBuffer"]
