"""Per-column compression of shard files: which HDF5 filter each column gets.

``EpisodeStore.create(..., compression=...)`` takes one of ``CODECS`` (or an int, h5py's gzip level):
``"auto"`` (the default) compresses image-like columns, uint8 with at least two axes per step such as
(84, 84) or (4, 84, 84) frames, with Zstandard (``ZSTD_LEVEL``) and leaves every other column raw: small
float columns compress poorly, and raw columns are read through memory maps, faster than any decoder.
Measured on 2,000 Pong steps of 4x84x84 frames (benchmarks/RESULTS.md, "Compression codecs"): zstd-1
stored them 610x smaller, writing at 2.6 GB/s and reading at 3.9 GB/s, against gzip-1's 92x at 0.6/1.3
GB/s and lz4's 167x at 3.1/4.6 GB/s; level -1 decodes faster still (``ZSTD_LEVEL``). The Zstandard and
LZ4 filters come from ``hdf5plugin`` (a vcollect dependency, so reading needs nothing more); Minari
exports write raw columns, which any h5py reads.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from vcollect.errors import CodecUnavailableError

Compression = str | int | None
"""A codec name from CODECS, None (same as "none"), or an int 0-9 (gzip at that level, as h5py takes it)."""

CODECS = ("auto", "none", "gzip", "lzf", "lz4", "zstd")
PLUGIN_CODECS = ("lz4", "zstd")
CHUNK_BYTES = 32 << 10
"""Target bytes per HDF5 chunk of a compressed column: whole rows, at most 32 KiB or one row. A random row
read decodes the whole chunk holding it, so small chunks keep sampling fast (one 4x84x84 frame stack per
chunk: 256 random rows in about 2 ms through chunk_reader.py, against 300 ms with 1 MiB chunks), at some
cost in ratio (Pong frame stacks: 77x at one row a chunk, 327x at 37 rows) and write speed."""
ZSTD_LEVEL = -1
"""The Zstandard level of the zstd columns written. Negative levels store literals raw, not Huffman-coded, so
the decoder copies them instead of decoding them: on chunks of four 84x84 frames level -1 decoded 1.4x as
fast as level 1 in Pong (1.5x Breakout, 1.4x Seaquest, 1.25x Space Invaders, the same in Ms. Pac-Man), for
2% more bytes in Pong (4-15% in the others), and compressed faster. hdf5plugin releases whose
Zstd filter takes no negative level write level 1 instead (:func:`zstd_filter`); any level reads back alike."""


def check_compression(compression: Compression) -> Compression:
    """``compression`` checked and normalised (None -> "none"); ValueError for anything else, and
    CodecUnavailableError when a plugin codec's filters cannot be loaded."""
    if compression is None:
        return "none"
    if isinstance(compression, bool) or not isinstance(compression, int | str):
        raise ValueError(f"compression must be one of {', '.join(CODECS)} or a gzip level 0-9, got {compression!r}")
    if isinstance(compression, int):
        if not 0 <= compression <= 9:
            raise ValueError(f"a gzip level is 0-9, got {compression}")
        return compression
    if compression not in CODECS:
        raise ValueError(f"unknown compression {compression!r}; choose one of {', '.join(CODECS)} or a gzip level 0-9")
    if compression in PLUGIN_CODECS:
        load_plugin_filters()
    return compression


def load_plugin_filters() -> None:
    """Register hdf5plugin's filters with HDF5 (once): needed to write and to read lz4/zstd columns."""
    error = import_plugin_filters()
    if error is not None:
        raise CodecUnavailableError(
            f"the lz4/zstd shard filters need the hdf5plugin package, a vcollect dependency that is missing "
            f"here ({error}); reinstall vcollect or run: pip install hdf5plugin"
        )


@functools.cache
def import_plugin_filters() -> str | None:
    """Import hdf5plugin once (importing registers its filters); the ImportError's text if it fails. Readers
    call this before opening a compressed column: a gzip or lzf column reads without it."""
    try:
        import hdf5plugin  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def is_image_like(arr: np.ndarray) -> bool:
    """uint8 rows with two or more axes per step (frames, frame stacks, RGB images)."""
    return arr.dtype == np.uint8 and arr.ndim >= 3


def column_filter(compression: Compression, arr: np.ndarray) -> dict[str, Any]:
    """h5py ``create_dataset`` keyword arguments for ``arr`` (rows first) under ``compression``."""
    codec = "zstd" if compression == "auto" and is_image_like(arr) else compression
    if codec in ("auto", "none", None) or not arr.size:
        return {}
    if isinstance(codec, int):
        return {"compression": "gzip", "compression_opts": codec, "chunks": _chunks(arr)}
    if codec in PLUGIN_CODECS:
        load_plugin_filters()
        import hdf5plugin

        plugin = zstd_filter() if codec == "zstd" else dict(hdf5plugin.LZ4())
        return {**plugin, "chunks": _chunks(arr)}
    return {"compression": codec, "chunks": _chunks(arr)}


@functools.cache
def zstd_filter() -> dict[str, Any]:
    """h5py ``create_dataset`` keyword arguments of hdf5plugin's Zstd filter at ``ZSTD_LEVEL``, or at level 1
    where this hdf5plugin refuses negative levels (its filter then clamps them to 1 anyway)."""
    import hdf5plugin

    try:
        return dict(hdf5plugin.Zstd(clevel=ZSTD_LEVEL))
    except ValueError:
        return dict(hdf5plugin.Zstd(clevel=1))


def _chunks(arr: np.ndarray) -> tuple[int, ...]:
    """Chunks of whole rows, about CHUNK_BYTES each."""
    row_bytes = max(1, arr[:1].nbytes)
    rows = int(min(len(arr), max(1, CHUNK_BYTES // row_bytes)))
    return (rows, *arr.shape[1:])
