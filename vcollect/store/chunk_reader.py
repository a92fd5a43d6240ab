"""Random row reads from Zstandard-compressed shard columns without HDF5's per-row cost.

Sampling 256 random frames through h5py costs 30 to 60 us of HDF5 bookkeeping per row (its selection
and chunk lookup), 8 to 15 ms a batch, over the 5 ms a training loop can wait. A compressed column's
chunks are plain Zstandard frames at byte offsets HDF5 records, so this module reads the chunk table
once (``Dataset.id.chunk_iter``), then slices the chunks the rows need out of the file's memory map and
decodes them with the ``zstandard`` package: about 2 ms for 256 Pong frame stacks (benchmarks/RESULTS.md,
"Sampling compressed frames"). Columns with any other filter are read through h5py as before.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np
import zstandard

ZSTD_FILTER = 32015
"""HDF5's registered id of the Zstandard filter (what hdf5plugin.Zstd writes)."""


class ChunkTable:
    """Where each chunk of one Zstandard-compressed column lies in its file (chunks of whole rows)."""

    def __init__(self, dataset: h5py.Dataset) -> None:
        chunks = dataset.chunks
        assert chunks is not None and tuple(chunks[1:]) == tuple(dataset.shape[1:])
        self.rows_per_chunk = int(chunks[0])
        self.row_shape = tuple(dataset.shape[1:])
        self.dtype = dataset.dtype
        self.num_rows = int(dataset.shape[0])
        count = -(-self.num_rows // self.rows_per_chunk)
        self.offsets = np.full(count, -1, dtype=np.int64)
        self.sizes = np.zeros(count, dtype=np.int64)
        self.masks = np.zeros(count, dtype=np.int64)  # HDF5's per-chunk mask of filters not applied

        def note(info: Any) -> None:
            k = info.chunk_offset[0] // self.rows_per_chunk
            self.offsets[k], self.sizes[k], self.masks[k] = info.byte_offset, info.size, info.filter_mask

        dataset.id.chunk_iter(note)
        if (self.offsets < 0).any():
            raise ValueError(f"column {dataset.name!r} has unwritten chunks")
        # plain lists for the per-row loop of one-row chunks: indexing them is several times faster
        self._spans = list(zip(self.offsets.tolist(), (self.offsets + self.sizes).tolist(), self.masks.tolist()))

    @staticmethod
    def applies_to(dataset: h5py.Dataset) -> bool:
        """A chunked column of whole rows whose only filter is Zstandard."""
        chunks = dataset.chunks
        if chunks is None or tuple(chunks[1:]) != tuple(dataset.shape[1:]):
            return False
        plist = dataset.id.get_create_plist()
        return plist.get_nfilters() == 1 and plist.get_filter(0)[0] == ZSTD_FILTER

    def read_rows(self, mapped: Any, rows: np.ndarray) -> np.ndarray:
        """``rows`` (row numbers, any order, repeats allowed) decoded from the file's memory map ``mapped``."""
        row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        out = np.empty((len(rows), *self.row_shape), dtype=self.dtype)
        if not len(rows):
            return out
        flat = out.reshape(len(rows), -1).view(np.uint8)
        if self.rows_per_chunk == 1:  # frame-sized rows: a chunk each, decoded straight into its output row
            return self._read_single_rows(mapped, rows, out, flat, row_bytes)
        chunk_of = rows // self.rows_per_chunk
        order = np.argsort(chunk_of, kind="stable")
        ordered = chunk_of[order]
        bounds = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True]).tolist()
        decoder = zstandard.ZstdDecompressor()
        offsets, sizes, masks = self.offsets, self.sizes, self.masks
        for lo, hi in zip(bounds[:-1], bounds[1:]):  # one decode per chunk the rows touch
            k = int(ordered[lo])
            start, size = int(offsets[k]), int(sizes[k])
            first = k * self.rows_per_chunk
            n_rows = min(self.rows_per_chunk, self.num_rows - first)
            stored = mapped[start : start + size]
            # a set filter-mask bit: HDF5 kept this chunk as it was (the filter could not shrink it)
            raw = stored if masks[k] & 1 else decoder.decompress(
                stored, max_output_size=self.rows_per_chunk * row_bytes)
            if len(raw) < n_rows * row_bytes:
                raise ValueError(f"chunk {k} decoded to {len(raw)} bytes, expected at least {n_rows * row_bytes}")
            chunk = np.frombuffer(raw, dtype=np.uint8, count=n_rows * row_bytes).reshape(n_rows, row_bytes)
            sel = order[lo:hi]
            flat[sel] = chunk[rows[sel] - first]
        return out

    def _read_single_rows(self, mapped: Any, rows: np.ndarray, out: np.ndarray, flat: np.ndarray,
                          row_bytes: int) -> np.ndarray:
        decode = zstandard.ZstdDecompressor().decompress
        spans = self._spans
        for i, row in enumerate(rows.tolist()):
            start, stop, mask = spans[row]
            raw = mapped[start:stop] if mask & 1 else decode(mapped[start:stop], max_output_size=row_bytes)
            if len(raw) != row_bytes:
                raise ValueError(f"chunk {row} decoded to {len(raw)} bytes, expected {row_bytes}")
            flat[i] = np.frombuffer(raw, dtype=np.uint8)
        return out
