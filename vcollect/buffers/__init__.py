"""Per-env ring buffers of rows (DESIGN.md section 3), written vectorised over env ids."""

from vcollect.buffers.ring import EpisodeEnds, EpisodeSlice, VectorRingBuffer

__all__ = ["EpisodeEnds", "EpisodeSlice", "VectorRingBuffer"]
