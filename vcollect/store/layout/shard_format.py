"""The names inside a shard file that its writer and its readers share: the format tag, the file name, the
columns of the ``episodes/`` table, the HDF5 path of a leaf's column, and the layout facts a read depends on.

A committed shard is named ``<commit time, 20 digits>-<writer>-<seq, 6 or more digits>.h5`` and carries its
writer and seq as attributes too, so a copy under another name tells itself apart from the original. Its
``layout`` attribute (JSON) records what its columns mean: the frame stack (k and padding), the stored leaves
of the observation and action spaces (name, dtype, shape) and the writer's compression; a reader compares it
with ``dataset.json``, the mutable file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vcollect.spaces import Leaf

__all__ = [
    "EPISODE_COLUMNS",
    "LAYOUT_ATTR",
    "SHARD_FORMAT_NAME",
    "SHARD_SUFFIX",
    "ShardName",
    "column_path",
    "layout_differences",
    "parse_shard_name",
    "shard_layout",
    "shard_name",
]

#: The ``format`` attribute of every shard file.
SHARD_FORMAT_NAME = "vcollect-shard"

#: Suffix of a committed shard file in a dataset's ``shards/`` folder.
SHARD_SUFFIX = ".h5"

#: Columns of the ``episodes/`` table every shard has (one row per episode).
EPISODE_COLUMNS = ("obs_offset", "step_offset", "length", "return", "env_id", "seed", "seed_valid")

#: The shard attribute holding its layout as JSON (see :func:`shard_layout`).
LAYOUT_ATTR = "layout"

_NAME = re.compile(r"^(\d{20})-(.+)-(\d{6,})" + re.escape(SHARD_SUFFIX) + r"$")


@dataclass(frozen=True)
class ShardName:
    """What a committed shard's file name says: its commit time (ns), writer and sequence number."""

    time_ns: int
    writer: str
    seq: int


def shard_name(time_ns: int, writer: str, seq: int) -> str:
    """The file name of a writer's ``seq``-th shard committed at ``time_ns`` (sorts by commit time).

    Args:
        time_ns: Commit time in nanoseconds since the epoch.
        writer: The writer's name (unique per EpisodeStore instance).
        seq: The writer's shard counter, from 0.

    Returns:
        ``<time_ns, 20 digits>-<writer>-<seq, 6 digits or more>.h5``.
    """
    return f"{time_ns:020d}-{writer}-{seq:06d}{SHARD_SUFFIX}"


def parse_shard_name(name: str) -> ShardName | None:
    """The parts of a shard file name made by :func:`shard_name`; None for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return ShardName(int(match.group(1)), match.group(2), int(match.group(3)))


def _leaf_list(leaf_list: list[Leaf]) -> list[list[Any]]:
    return [[leaf.name, leaf.dtype.str, list(leaf.shape)] for leaf in leaf_list]


def shard_layout(
    obs_leaves: list[Leaf], act_leaves: list[Leaf], frame_stack: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The layout facts of a dataset's shards that a read depends on (what :data:`LAYOUT_ATTR` holds, less
    the writer's ``compression``).

    Args:
        obs_leaves: The observation space's leaves (stacks whole: ``frame_stack`` says how they are stored).
        act_leaves: The action space's leaves.
        frame_stack: The frame stack as dataset.json records it (``{"k": ..., "padding": ...}``), or None.

    Returns:
        A JSON-able dict: ``frame_stack``, ``observations`` and ``actions`` (``[name, dtype, shape]`` per leaf).
    """
    return {
        "frame_stack": None if frame_stack is None else dict(frame_stack),
        "observations": _leaf_list(obs_leaves),
        "actions": _leaf_list(act_leaves),
    }


def layout_differences(stored: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """The layout facts in which a shard's ``stored`` layout differs from the ``expected`` one.

    Args:
        stored: A shard's layout attribute, parsed.
        expected: :func:`shard_layout` of the dataset's ``dataset.json``.

    Returns:
        One ``"<fact>: shard <value>, dataset.json <value>"`` text per differing fact (the writer's
        compression is not compared: each writer may choose its own).
    """
    out = []
    for key in ("frame_stack", "observations", "actions"):
        if stored.get(key) != expected.get(key):
            out.append(f"{key}: shard {stored.get(key)!r}, dataset.json {expected.get(key)!r}")
    return out


def column_path(prefix: str, name: str) -> str:
    """HDF5 path of a leaf column.

    Args:
        prefix: The column group (``observations``, ``actions``, ``infos``, ...).
        name: The leaf's name within its space ("" for a non-nested leaf).

    Returns:
        ``prefix`` for a non-nested leaf, else ``prefix/name``.
    """
    return f"{prefix}/{name}" if name else prefix
