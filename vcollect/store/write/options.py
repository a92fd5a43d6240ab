"""StoreOptions: how an EpisodeStore writes, typed once and passed whole through every entry point.

``EpisodeStore.create``/``open`` (and ``create_at``/``open_at``), the ``vcollect collect`` command and
``DistributedCollector`` (which hands the same object to every Ray worker's writer) all take one
``StoreOptions``. The store methods also take each field as a keyword argument, which overrides the
object's field (``EpisodeStore.open(..., options=opts, env_id_offset=4)``); ``merge_store_options`` does
that merge and refuses keywords that are not fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from vcollect.store.write.compression import Compression, check_compression

__all__ = ["StoreOptions", "merge_store_options", "store_option_names"]


@dataclass(frozen=True)
class StoreOptions:
    """How one EpisodeStore writes its shards (checked when made).

    Args:
        shard_steps: Commit a shard once this many steps are pending (also on ``flush()`` and ``close()``):
            the most a crash can lose.
        shard_bytes: Commit a shard once the pending episodes hold this many bytes (None: no byte limit).
        compression: Each shard column's filter (store/write/compression.py): "auto" (the default) stores
            image-like uint8 columns with Zstandard and the rest raw; "none" (or None), "gzip", "lzf", "lz4",
            "zstd" or a gzip level 0-9 apply one codec to every column.
        background_commits: Build, write and fsync shards in one background thread, so a collect loop does
            not wait for them; a failed commit raises on the next write, flush or close, and a crash may lose
            the shards still being committed.
        env_id_offset: Added to every env id the writer stores, so several writers (e.g. Ray workers, each
            numbering its envs from 0) store global env ids.

    Raises:
        ValueError: ``shard_steps`` below 1, ``shard_bytes`` below 1 (and not None), a negative or non-integer
            ``env_id_offset``, or an unknown ``compression``.
        CodecUnavailableError: ``compression`` is "lz4" or "zstd" and hdf5plugin's filters cannot be loaded.
    """

    shard_steps: int = 100_000
    shard_bytes: int | None = 256 * 2**20
    compression: Compression = "auto"
    background_commits: bool = False
    env_id_offset: int = 0

    def __post_init__(self) -> None:
        offset = self.env_id_offset
        if isinstance(offset, bool) or not isinstance(offset, int | np.integer) or offset < 0:
            raise ValueError(f"env_id_offset must be an integer >= 0, got {offset!r}")
        if self.shard_steps < 1:
            raise ValueError(f"shard_steps must be >= 1, got {self.shard_steps}")
        if self.shard_bytes is not None and self.shard_bytes < 1:
            raise ValueError(f"shard_bytes must be >= 1 or None, got {self.shard_bytes}")
        # frozen: the checked, normalised values are set through object.__setattr__
        object.__setattr__(self, "shard_steps", int(self.shard_steps))
        object.__setattr__(self, "env_id_offset", int(offset))
        object.__setattr__(self, "background_commits", bool(self.background_commits))
        object.__setattr__(self, "compression", check_compression(self.compression))


def store_option_names() -> tuple[str, ...]:
    """The fields of StoreOptions, in order: the keyword arguments the store methods take for them."""
    return tuple(f.name for f in fields(StoreOptions))


def merge_store_options(options: StoreOptions | None, overrides: Mapping[str, Any], caller: str) -> StoreOptions:
    """``options`` (the defaults when None) with the fields ``overrides`` names replaced.

    Args:
        options: The StoreOptions given, or None.
        overrides: Keyword arguments naming StoreOptions fields; each replaces that field.
        caller: What took them, for the error message (e.g. "EpisodeStore.create()").

    Returns:
        The merged, checked StoreOptions (``options`` itself when nothing overrides it).

    Raises:
        TypeError: ``options`` is not a StoreOptions, or ``overrides`` names something that is not a field.
        ValueError: A merged value StoreOptions refuses.
    """
    if options is None:
        options = StoreOptions()
    elif not isinstance(options, StoreOptions):
        raise TypeError(f"{caller} options must be a StoreOptions, got {type(options).__name__}")
    names = store_option_names()
    unknown = [key for key in overrides if key not in names]
    if unknown:
        raise TypeError(
            f"{caller} got unexpected keyword argument{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(key) for key in unknown)} (store options: {', '.join(names)})"
        )
    return replace(options, **overrides) if overrides else options
