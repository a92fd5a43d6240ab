"""The names inside a shard file that its writer and its readers share: the format tag, the file suffix, the
columns of the ``episodes/`` table and the HDF5 path of a leaf's column."""

from __future__ import annotations

__all__ = ["EPISODE_COLUMNS", "SHARD_FORMAT_NAME", "SHARD_SUFFIX", "column_path"]

#: The ``format`` attribute of every shard file.
SHARD_FORMAT_NAME = "vcollect-shard"

#: Suffix of a committed shard file in a dataset's ``shards/`` folder.
SHARD_SUFFIX = ".h5"

#: Columns of the ``episodes/`` table every shard has (one row per episode).
EPISODE_COLUMNS = ("obs_offset", "step_offset", "length", "return", "env_id", "seed", "seed_valid")


def column_path(prefix: str, name: str) -> str:
    """HDF5 path of a leaf column.

    Args:
        prefix: The column group (``observations``, ``actions``, ``infos``, ...).
        name: The leaf's name within its space ("" for a non-nested leaf).

    Returns:
        ``prefix`` for a non-nested leaf, else ``prefix/name``.
    """
    return f"{prefix}/{name}" if name else prefix
