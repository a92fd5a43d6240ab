"""Random row reads from Zstandard-compressed shard columns without HDF5's per-row cost.

Sampling 256 random frames through h5py costs 30 to 60 us of HDF5 bookkeeping per row (its selection
and chunk lookup), 8 to 15 ms a batch, over the 5 ms a training loop can wait. A compressed column's
chunks are plain Zstandard frames at byte offsets HDF5 records, so this module reads the chunk table
once (``Dataset.id.chunk_iter``), then slices the chunks the rows need out of the file's memory map and
decodes them with the ``zstandard`` package, straight into the output rows: about 2.5 ms for 512 Pong
frame stacks (benchmarks/RESULTS.md). A range of rows (an episode) decodes each stretch of
chunks that lie back to back in the file as one stream, without a call per row. Gzip (deflate) columns are
read the same way, one chunk at a time with ``zlib``. Columns with any other filter are read through h5py.

No chunk decodes to more than its rows: a Zstandard frame declaring a larger size than its chunk is refused
before anything is allocated, and a deflate stream is inflated at most to the chunk's size, so a crafted
chunk (a "bomb") is a ValueError naming it (the reader's CorruptShardError naming the file), never a
MemoryError or a long inflate whose output HDF5 would cut short without a word. Columns HDF5 decodes itself
(LZ4, and Zstandard columns read through h5py) are held to the same bound by :func:`check_declared_sizes`
before HDF5 reads them: its filters allocate whatever size a chunk's header declares.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import h5py
import numpy as np
import zstandard

from vcollect.store.read.shards.zstd_frames import StretchBatch, StretchError, library

ZSTD_FILTER = 32015
"""HDF5's registered id of the Zstandard filter (what hdf5plugin.Zstd writes)."""

DEFLATE_FILTER = 1
"""HDF5's id of its deflate (gzip) filter: each chunk one zlib stream."""

LZ4_FILTER = 32004
"""HDF5's registered id of the LZ4 filter (what hdf5plugin.LZ4 writes): each chunk starts with its decoded
size (8 bytes, big-endian) and block size (4 bytes), then the blocks."""

_CODECS = {ZSTD_FILTER: "zstd", DEFLATE_FILTER: "gzip"}

PARALLEL_BYTES = 1 << 20
"""Decoded bytes of one read of runs above which its streams are split between the calling thread and a
pool's (Zstandard decodes without the GIL): below, handing work to a thread costs more than it saves."""

_THREAD = threading.local()  # each pool thread's own decoder (a decoder is for one thread at a time)


def _thread_decoder() -> zstandard.ZstdDecompressor:
    decoder = getattr(_THREAD, "decoder", None)
    if decoder is None:
        decoder = _THREAD.decoder = zstandard.ZstdDecompressor()
    return decoder

#: The first bytes of a chunk that say how large it declares itself: LZ4's header, a Zstandard frame header.
_HEADER_BYTES = {LZ4_FILTER: 12, ZSTD_FILTER: 18}


def check_declared_sizes(dataset: h5py.Dataset, read_at: Callable[[int, int], bytes]) -> None:
    """Refuse a column whose LZ4 or Zstandard chunks declare more decoded bytes than a chunk holds.

    HDF5's LZ4 and Zstandard filters allocate the size a chunk's header declares before they decode it, so a
    crafted chunk would ask for any amount of memory; this reads each chunk's header (a few bytes, through
    ``read_at``) first. Other columns, and chunks HDF5 kept unfiltered, are not looked at.

    Args:
        dataset: The column (its chunk table is read through HDF5, no chunk is decoded).
        read_at: ``read_at(offset, size)``: the file's bytes at that offset (fewer at its end).

    Raises:
        ValueError: A chunk declares more than its bytes (or is too short to hold a header); the message
            names the chunk.
    """
    chunks = dataset.chunks
    plist = dataset.id.get_create_plist()
    nfilters = plist.get_nfilters()
    if chunks is None or not nfilters:
        return
    codec = plist.get_filter(nfilters - 1)[0]  # the last filter applied: its output is what the file holds
    if codec not in _HEADER_BYTES:
        return
    limit = int(np.prod(chunks, dtype=np.int64)) * dataset.dtype.itemsize
    grid = tuple(-(-int(n) // int(c)) for n, c in zip(dataset.shape, chunks)) or (1,)
    header_bytes, last = _HEADER_BYTES[codec], 1 << (nfilters - 1)
    found: list[str] = []

    def note(info: Any) -> str | None:  # a value stops the walk (raising inside it is unsafe)
        if info.filter_mask & last:
            return None  # kept unfiltered by HDF5: no header
        k = int(np.ravel_multi_index(tuple(o // c for o, c in zip(info.chunk_offset, chunks)), grid))
        head = read_at(int(info.byte_offset), min(int(info.size), header_bytes))
        if codec == LZ4_FILTER:
            if len(head) < header_bytes:
                found.append(f"chunk {k} holds {info.size} bytes, too few for an LZ4 header")
                return found[-1]
            declared = int.from_bytes(head[:8], "big")
        else:
            try:
                declared = zstandard.frame_content_size(head)
            except zstandard.ZstdError as exc:
                found.append(f"chunk {k} is not a Zstandard frame: {exc}")
                return found[-1]
        if declared > limit:
            found.append(f"chunk {k} declares {declared} decoded bytes, more than its {limit}")
            return found[-1]
        return None

    dataset.id.chunk_iter(note)
    if found:
        raise ValueError(found[0])


class ChunkTable:
    """Where each chunk of one Zstandard- or deflate-compressed column lies in its file (chunks of whole rows).

    Holds one decoder (making one costs ~16 us, as much as decoding a frame stack), so a table is not for
    two threads at once: OpenShardFiles reads under its lock."""

    def __init__(self, dataset: h5py.Dataset) -> None:
        chunks = dataset.chunks
        assert chunks is not None and tuple(chunks[1:]) == tuple(dataset.shape[1:])
        self.rows_per_chunk = int(chunks[0])
        self.row_shape = tuple(dataset.shape[1:])
        self.dtype = dataset.dtype
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self.num_rows = int(dataset.shape[0])
        count = -(-self.num_rows // self.rows_per_chunk)
        self.offsets = np.full(count, -1, dtype=np.int64)
        self.sizes = np.zeros(count, dtype=np.int64)
        masks = np.zeros(count, dtype=np.int64)  # HDF5's per-chunk mask of filters not applied

        def note(info: Any) -> None:
            k = info.chunk_offset[0] // self.rows_per_chunk
            self.offsets[k], self.sizes[k], masks[k] = info.byte_offset, info.size, info.filter_mask

        dataset.id.chunk_iter(note)
        self.codec = _CODECS[dataset.id.get_create_plist().get_filter(0)[0]]
        self._decoder = zstandard.ZstdDecompressor()
        self._break_counts: np.ndarray | None = None  # breaks before each chunk (made on first need)
        if (self.offsets < 0).any():
            raise ValueError(f"column {dataset.name!r} has unwritten chunks")
        # a set filter-mask bit: HDF5 kept that chunk as it was (the filter could not shrink it); 18 bytes a
        # chunk are kept in all (a 10 GB dataset of Pong stacks: 6 MB)
        self.stored_raw = (masks & 1).astype(bool)
        # breaks[k]: chunk k + 1 cannot continue a stream of frames ending with chunk k (HDF5 put something
        # between them, or one of them is not a Zstandard frame)
        ends = self.offsets + self.sizes
        self.breaks = np.ones(count, dtype=bool)
        self.breaks[:-1] = (self.offsets[1:] != ends[:-1]) | self.stored_raw[1:] | self.stored_raw[:-1]

    @staticmethod
    def applies_to(dataset: h5py.Dataset) -> bool:
        """A chunked column of whole rows whose only filter is Zstandard or deflate."""
        chunks = dataset.chunks
        if chunks is None or tuple(chunks[1:]) != tuple(dataset.shape[1:]):
            return False
        plist = dataset.id.get_create_plist()
        return plist.get_nfilters() == 1 and plist.get_filter(0)[0] in _CODECS

    def _decode(self, data: Any, k: int, size: int) -> Any:
        """Chunk ``k``'s bytes ``data`` decoded: at most ``size`` bytes (ValueError for a chunk that declares
        or holds more, before it is inflated past that)."""
        if self.codec == "zstd":
            declared = zstandard.frame_content_size(data)
            if declared > size:
                raise ValueError(f"chunk {k} declares {declared} decoded bytes, more than its {size}")
            return self._decoder.decompress(data, max_output_size=size)
        inflater = zlib.decompressobj()
        out = inflater.decompress(data, size)
        if inflater.unconsumed_tail or not inflater.eof:
            more = inflater.unconsumed_tail or inflater.decompress(b"", 1)
            raise ValueError(f"chunk {k} {'inflates to more than' if more else 'is cut short before'} its {size} bytes")
        return out

    def read_rows(self, mapped: Any, rows: np.ndarray) -> np.ndarray:
        """``rows`` (row numbers, any order, repeats allowed) decoded from the file's memory map ``mapped``."""
        out = np.empty((len(rows), *self.row_shape), dtype=self.dtype)
        if not len(rows):
            return out
        if self.rows_per_chunk == 1:  # frame-sized rows: a chunk each, decoded straight into its output row
            self.decode_into(mapped, rows, out, np.arange(len(rows)))
            return out
        # chunks of several rows (single frames of a frame stack): each chunk the rows touch decoded once into
        # a scratch buffer, then one gather of the rows from it
        rows_per_chunk, row_bytes = self.rows_per_chunk, self.row_bytes
        chunk_bytes = rows_per_chunk * row_bytes
        chunks, inverse = np.unique(rows // rows_per_chunk, return_inverse=True)
        scratch = np.empty((len(chunks) * rows_per_chunk, row_bytes), dtype=np.uint8)
        view = memoryview(scratch.reshape(-1))  # type: ignore[arg-type]
        decode = self._decode
        starts = self.offsets[chunks]
        stops = (starts + self.sizes[chunks]).tolist()
        filled = np.minimum(rows_per_chunk, self.num_rows - chunks * rows_per_chunk) * row_bytes
        for i, (k, start, stop, keep, need) in enumerate(
                zip(chunks.tolist(), starts.tolist(), stops, self.stored_raw[chunks].tolist(), filled.tolist())):
            raw = mapped[start:stop] if keep else decode(mapped[start:stop], k, chunk_bytes)
            if len(raw) < need:
                raise ValueError(f"chunk {k} decoded to {len(raw)} bytes, expected at least {need}")
            view[i * chunk_bytes : i * chunk_bytes + need] = memoryview(raw)[:need]
        np.take(scratch, inverse.reshape(-1) * rows_per_chunk + rows % rows_per_chunk, axis=0,
                out=out.reshape(len(rows), -1).view(np.uint8), mode="clip")  # "raise" would buffer the output
        return out

    def read_range(self, mapped: Any, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo`` to ``hi`` (exclusive, within the column) decoded from the file's memory map ``mapped``."""
        if self.rows_per_chunk != 1 or hi - lo < 2 or self.codec != "zstd":
            return self.read_rows(mapped, np.arange(lo, hi, dtype=np.int64))
        out = np.empty((hi - lo, *self.row_shape), dtype=self.dtype)
        self._decode_chunks_into(mapped, lo, hi - 1, memoryview(out.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
        return out

    def read_runs(self, mapped: Any, lows: np.ndarray, counts: np.ndarray, out: np.ndarray, places: np.ndarray,
                  margin: int = 0, pool: Executor | None = None, threads: int = 1,
                  parallel_bytes: int = PARALLEL_BYTES, batch: StretchBatch | None = None) -> None:
        """``out[places[r] : places[r] + counts[r]]`` = rows ``lows[r]`` onward, for each run r of consecutive
        rows (``out``: C-contiguous, of this column's dtype and row shape). Each run's chunks are decoded once,
        those back to back in the file as one stream, straight into ``out`` for one-row chunks, and for chunks
        of several rows too where ``margin`` (the rows of ``out`` before and after every run that may be
        overwritten) is at least one chunk less one row: the run's first chunk then begins up to that many
        rows before its place and its last ends up to that many after. Otherwise each run's chunks are
        decoded into a scratch buffer of one run's chunks (small enough to stay in the processor's cache) and
        copied out. Straight into ``out``, runs of more than ``parallel_bytes`` in all are shared between
        ``threads`` threads, this one and ``threads - 1`` of ``pool``'s (each with a decoder of its own), this
        one waiting for the others. Where libzstd loads (:func:`zstd_frames.library`), each stretch of frames
        back to back is one libzstd call with the GIL released; given a ``batch`` (a StretchBatch over ``out``),
        those stretches are added to it for the caller to decode, with other shards' (the rest is decoded
        now)."""
        rows_per_chunk, row_bytes = self.rows_per_chunk, self.row_bytes
        lows = np.asarray(lows, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        places = np.asarray(places, dtype=np.int64)
        if not lows.size or counts.min() <= 0:
            keep = counts > 0
            lows, counts, places = lows[keep], counts[keep], places[keep]
        if not lows.size:
            return
        view = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        first = lows // rows_per_chunk
        last = (lows + counts - 1) // rows_per_chunk
        if rows_per_chunk == 1:
            self._decode_spans(mapped, first, last, view, places * row_bytes, pool, threads, parallel_bytes, batch)
            return
        chunk_bytes = rows_per_chunk * row_bytes
        skips = lows - first * rows_per_chunk  # rows of a run's first chunk before the run
        if margin >= rows_per_chunk - 1:
            begins = (places - skips) * row_bytes
            if begins.min() < 0 or int((begins + (last + 1 - first) * chunk_bytes).max()) > len(view):
                raise ValueError(f"a run's chunks reach outside the output: margin {margin} rows is wrong")
            self._decode_spans(mapped, first, last, view, begins, pool, threads, parallel_bytes, batch)
            return
        scratch = memoryview(np.empty(int((last - first).max() + 1) * chunk_bytes, dtype=np.uint8))  # type: ignore[arg-type]
        for a, b, skip, place, n in zip(first.tolist(), last.tolist(), (skips * row_bytes).tolist(), places.tolist(),
                                        counts.tolist()):
            self._decode_chunks_into(mapped, a, b, scratch[: (b + 1 - a) * chunk_bytes])
            view[place * row_bytes : (place + n) * row_bytes] = scratch[skip : skip + n * row_bytes]

    def _decode_spans(self, mapped: Any, first: np.ndarray, last: np.ndarray, view: memoryview, begins: np.ndarray,
                      pool: Executor | None = None, threads: int = 1,
                      parallel_bytes: int = PARALLEL_BYTES, batch: StretchBatch | None = None) -> None:
        """Chunks ``first[r]`` to ``last[r]`` (inclusive) decoded into ``view`` from byte ``begins[r]`` on, for
        each r. With libzstd (Zstandard columns), every span is cut into stretches of frames back to back in
        the file (nearly every span is one: HDF5 writes a column's chunks in order) and chunks kept
        unfiltered, the stretches decoded one libzstd call each, left in ``batch`` where one is given. Without
        it, a span of chunks back to back is one stream read in one call, the others go through
        :meth:`_decode_chunks_into`. Streams of more than ``parallel_bytes`` in all are shared between this
        thread and ``threads - 1`` of ``pool``'s."""
        lib = library() if self.codec == "zstd" else None
        if lib is not None:
            if batch is not None:
                if batch.address != np.frombuffer(view, dtype=np.uint8).ctypes.data:
                    raise ValueError("the batch decodes into another output than this read's")
                self._add_stretches(mapped, first, last, view, begins, batch)
                return
            total = int((last + 1 - first).sum()) * self.rows_per_chunk * self.row_bytes
            own = StretchBatch(view, lib, None if total <= parallel_bytes else pool, threads)
            try:
                self._add_stretches(mapped, first, last, view, begins, own)
                own.run()
            finally:
                own.close()
            return
        chunk_bytes = self.rows_per_chunk * self.row_bytes
        sizes = (last + 1 - first) * chunk_bytes
        whole = np.ones(first.size, dtype=bool)  # one stream: no break inside, not a chunk kept unfiltered
        if self.codec != "zstd":
            whole[:] = False
        else:
            if self._break_counts is None:
                self._break_counts = np.concatenate([[0], np.cumsum(self.breaks)])
            whole &= (self._break_counts[last] == self._break_counts[first]) & ~self.stored_raw[first]
        for a, b, at, size in zip(first[~whole].tolist(), last[~whole].tolist(), begins[~whole].tolist(),
                                  sizes[~whole].tolist()):
            self._decode_chunks_into(mapped, a, b, view[at : at + size])
        if not whole.any():
            return
        first, last, begins, sizes = first[whole], last[whole], begins[whole], sizes[whole]
        starts, stops = self.offsets.take(first), self.offsets.take(last) + self.sizes.take(last)
        spans = np.stack([first, last, starts, stops, begins, sizes], axis=1)
        total = int(sizes.sum())
        workers = 0 if pool is None or total <= parallel_bytes else min(len(spans), threads) - 1
        if pool is None or workers < 1:
            self._stream_spans(self._decoder, mapped, view, spans)
            return
        cuts = np.searchsorted(np.cumsum(sizes), total * np.arange(1, workers + 1) / (workers + 1))
        parts = np.split(spans, cuts)
        futures = [pool.submit(self._stream_spans, None, mapped, view, part) for part in parts[1:] if len(part)]
        try:
            self._stream_spans(self._decoder, mapped, view, parts[0])
        finally:  # the pool's threads write into ``view`` and read ``mapped``: done before either may go
            errors = [future.exception() for future in futures]
        for error in errors:
            if error is not None:
                raise error

    def _add_stretches(self, mapped: Any, first: np.ndarray, last: np.ndarray, view: memoryview,
                       begins: np.ndarray, batch: StretchBatch) -> None:
        """Spans of Zstandard chunks ``first[r]`` to ``last[r]`` (into ``view`` from byte ``begins[r]``) cut where
        the file breaks them: each stretch of frames back to back added to ``batch``, each chunk kept
        unfiltered copied into place now (exactly a chunk's bytes, else ValueError)."""
        chunk_bytes = self.rows_per_chunk * self.row_bytes
        counts = last + 1 - first
        total = int(counts.sum())
        span = np.repeat(np.arange(len(first)), counts)
        chunk = np.arange(total, dtype=np.int64) + np.repeat(first - (np.cumsum(counts) - counts), counts)
        opens = np.ones(total, dtype=bool)  # a chunk that begins a stretch: a span's first, or after a break
        opens[1:] = (span[1:] != span[:-1]) | self.breaks.take(chunk[:-1])
        heads = np.flatnonzero(opens)
        a, b = chunk.take(heads), chunk.take(np.append(heads[1:] - 1, total - 1))
        at = begins.take(span.take(heads)) + (a - first.take(span.take(heads))) * chunk_bytes
        starts, stops = self.offsets.take(a), self.offsets.take(b) + self.sizes.take(b)
        raw = self.stored_raw.take(a)  # always a stretch of its own: breaks lie on both sides of it
        if raw.any():
            for k, start, stop, place in zip(a[raw].tolist(), starts[raw].tolist(), stops[raw].tolist(),
                                             at[raw].tolist()):
                if stop - start != chunk_bytes:
                    raise ValueError(f"chunk {k} holds {stop - start} bytes, expected {chunk_bytes}")
                view[place : place + chunk_bytes] = mapped[start:stop]
            keep = ~raw
            a, b, at, starts, stops = a[keep], b[keep], at[keep], starts[keep], stops[keep]
        batch.add(mapped, starts, stops, at, (b + 1 - a) * chunk_bytes, a, b)

    def _stream_spans(self, decoder: zstandard.ZstdDecompressor | None, mapped: Any, view: memoryview,
                      spans: np.ndarray) -> None:
        """Each span (first chunk, last chunk, file start, file stop, byte in ``view``, bytes) of Zstandard
        chunks back to back in the file decoded as one stream, exactly its bytes (``decoder``: this thread's;
        None: a pool thread's own)."""
        reader = (decoder or _thread_decoder()).stream_reader
        for a, b, start, stop, at, size in spans.tolist():
            with reader(mapped[start:stop], read_across_frames=True) as stream:
                filled = stream.readinto(view[at : at + size])  # decodes until the target is full or input ends
                extra = stream.read(1) if filled == size else b""
            if filled != size or extra:
                raise ValueError(f"chunks {a} to {b} decoded to {'more' if extra else filled} bytes, expected {size}")

    def _decode_chunks_into(self, mapped: Any, a: int, b: int, target: memoryview) -> None:
        """Chunks ``a`` to ``b`` (inclusive) decoded into ``target``, exactly their bytes (whole chunks: HDF5 pads
        a column's last chunk to full size); the chunks back to back in the file as one Zstandard stream."""
        lib = library() if self.codec == "zstd" else None
        if lib is not None:  # one libzstd call a stretch, the GIL released
            batch = StretchBatch(target, lib)
            self._add_stretches(mapped, np.array([a]), np.array([b]), target, np.zeros(1, dtype=np.int64), batch)
            batch.run()
            return
        chunk_bytes = self.rows_per_chunk * self.row_bytes
        cuts = (np.flatnonzero(self.breaks[a:b]) + a + 1).tolist()
        for c0, c1 in zip([a, *cuts], [*cuts, b + 1]):  # a stretch of chunks back to back in the file
            start, stop = int(self.offsets[c0]), int(self.offsets[c1 - 1] + self.sizes[c1 - 1])
            part = target[(c0 - a) * chunk_bytes : (c1 - a) * chunk_bytes]
            if c1 - c0 == 1 and self.stored_raw[c0]:
                if stop - start != chunk_bytes:
                    raise ValueError(f"chunk {c0} holds {stop - start} bytes, expected {chunk_bytes}")
                part[:] = mapped[start:stop]
                continue
            if self.codec != "zstd":
                for c in range(c0, c1):
                    s = int(self.offsets[c])
                    raw = self._decode(mapped[s : s + int(self.sizes[c])], c, chunk_bytes)
                    if len(raw) != chunk_bytes:
                        raise ValueError(f"chunk {c} decoded to {len(raw)} bytes, expected {chunk_bytes}")
                    part[(c - c0) * chunk_bytes : (c + 1 - c0) * chunk_bytes] = raw
                continue
            filled = 0
            with self._decoder.stream_reader(mapped[start:stop], read_across_frames=True) as stream:
                while filled < len(part):
                    n = stream.readinto(part[filled:])
                    if n == 0:
                        break
                    filled += n
                extra = stream.read(1)
            if filled != len(part) or extra:
                raise ValueError(f"chunks {c0} to {c1 - 1} decoded to {'more' if extra else filled} bytes, "
                                 f"expected {len(part)}")

    def decode_into(self, mapped: Any, rows: np.ndarray, out: np.ndarray, where: np.ndarray) -> None:
        """``out[where[i]] = row rows[i]`` for a column of one-row chunks, each decoded straight into its place
        in ``out`` (C-contiguous, of this column's dtype and row shape)."""
        decode = self._decode
        view = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
        row_bytes = self.row_bytes
        starts = self.offsets[rows]
        stops = (starts + self.sizes[rows]).tolist()
        raw_rows = self.stored_raw[rows].tolist()
        places = (np.asarray(where, dtype=np.int64) * row_bytes).tolist()
        for row, start, stop, keep, place in zip(rows.tolist(), starts.tolist(), stops, raw_rows, places):
            raw = mapped[start:stop] if keep else decode(mapped[start:stop], row, row_bytes)
            if len(raw) != row_bytes:
                raise ValueError(f"chunk {row} decoded to {len(raw)} bytes, expected {row_bytes}")
            view[place : place + row_bytes] = raw


class StackedChunkTables:
    """The chunk tables of one Zstandard column of several shards end to end, so that the stretches of frames
    of a read of runs in every shard are planned by one pass of array operations instead of one per shard.

    Chunk c of table t is chunk ``base[t] + c`` here; every table's last chunk ends a stretch, so no stretch
    runs from one file into the next. ``stretch_end[c]``: the last chunk of the stretch of frames back to back
    in the file that holds chunk c (a chunk kept unfiltered is a stretch of its own)."""

    def __init__(self, tables: list[ChunkTable]) -> None:
        """Stack ``tables`` (Zstandard columns of the same rows per chunk and row bytes: see :meth:`of`)."""
        self.rows_per_chunk = tables[0].rows_per_chunk
        self.row_bytes = tables[0].row_bytes
        self.base = np.concatenate([[0], np.cumsum([t.offsets.size for t in tables])]).astype(np.int64)
        self.num_rows = np.array([t.num_rows for t in tables], dtype=np.int64)
        self.offsets = np.concatenate([t.offsets for t in tables])
        self.ends = self.offsets + np.concatenate([t.sizes for t in tables])
        self.stored_raw = np.concatenate([t.stored_raw for t in tables])
        ending = np.flatnonzero(np.concatenate([t.breaks for t in tables]))  # each table's last chunk is one
        self.stretch_end = ending[np.searchsorted(ending, np.arange(self.offsets.size))]

    @staticmethod
    def of(tables: list[ChunkTable | None]) -> StackedChunkTables | None:
        """The tables stacked, or None unless every one is a Zstandard column's with the same rows per chunk
        and row bytes (and there is one at least)."""
        if not tables or any(t is None or t.codec != "zstd" for t in tables):
            return None
        found = [t for t in tables if t is not None]
        if len({(t.rows_per_chunk, t.row_bytes) for t in found}) != 1:
            return None
        return StackedChunkTables(found)

    def add_runs(self, maps: list[Any], labels: list[Any], which: np.ndarray, tables: np.ndarray, lows: np.ndarray,
                 counts: np.ndarray, places: np.ndarray, batch: StretchBatch) -> None:
        """Add to ``batch`` (over an output of this column's rows) the stretches of runs r of ``counts[r]`` rows
        from row ``lows[r]`` of table ``tables[r]``, read from ``maps[which[r]]`` (that table's file map,
        named ``labels[which[r]]``), each run's chunks decoded whole into the output from row ``places[r]``
        less the rows of its first chunk before the run on (the output's rows around every run may be
        overwritten: a chunk's rows less one on either side). Chunks kept unfiltered are copied into place now.

        Raises:
            IndexError: A run reaches past its table's rows.
            ValueError: A run's chunks reach outside the output.
            StretchError: A stretch lies outside its file, or a chunk kept unfiltered is not a chunk's bytes
                (``label`` names the file).
        """
        rows_per_chunk, row_bytes = self.rows_per_chunk, self.row_bytes
        keep = counts > 0
        if not keep.all():
            which, tables, lows, counts, places = which[keep], tables[keep], lows[keep], counts[keep], places[keep]
        if not lows.size:
            return
        if int(lows.min()) < 0 or ((lows + counts) > self.num_rows.take(tables)).any():
            raise IndexError("a run of rows reaches outside its shard's column")
        chunk_bytes = rows_per_chunk * row_bytes
        first = lows // rows_per_chunk
        last = (lows + counts - 1) // rows_per_chunk
        begins = (places - (lows - first * rows_per_chunk)) * row_bytes
        if int(begins.min()) < 0 or int((begins + (last + 1 - first) * chunk_bytes).max()) > batch.output.size:
            raise ValueError("a run's chunks reach outside the output")
        base = self.base.take(tables)
        a, b, at, who = first + base, last + base, begins, np.arange(lows.size)
        pieces = []
        while True:  # cut each run where a stretch ends: once for most runs, twice for those across a break
            end = np.minimum(self.stretch_end.take(a), b)
            pieces.append((a, end, at, who))
            more = end < b
            if not more.any():
                break
            a, b, who = end[more] + 1, b[more], who[more]
            at = at[more] + (a - pieces[-1][0][more]) * chunk_bytes
        if len(pieces) > 1:
            a, end, at, who = (np.concatenate(part) for part in zip(*pieces))
        starts, stops = self.offsets.take(a), self.ends.take(end)
        local = base.take(who)
        raw = self.stored_raw.take(a)
        keep = ~raw
        batch.add_from(maps, which.take(who[keep]), starts[keep], stops[keep], at[keep],
                       (end[keep] + 1 - a[keep]) * chunk_bytes, (a - local)[keep], (end - local)[keep], labels)
        out = batch.output
        for r, k, start, stop, place in zip(who[raw].tolist(), (a - local)[raw].tolist(), starts[raw].tolist(),
                                            stops[raw].tolist(), at[raw].tolist()):
            source = np.frombuffer(maps[int(which[r])], dtype=np.uint8)
            if stop - start != chunk_bytes or stop > source.size:
                raise StretchError(f"chunk {k} holds {stop - start} bytes of the file's {source.size} from byte "
                                   f"{start}, expected {chunk_bytes}", -1, labels[int(which[r])])
            out[place : place + chunk_bytes] = source[start:stop]
