"""What a dead distributed worker had committed in the call it died in, read back from its shards.

A worker's shards are named ``<time>-<writer>-<seq>.h5`` by its EpisodeStore; the driver knows which of them
the worker had reported before the call, so the others are the ones committed during the call. They count
(they are in the dataset); everything else the worker collected in the call is lost and collected again,
and so are the steps of its unfinished episodes that earlier calls counted but no shard holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vcollect.remote.layout import RemoteManifest
from vcollect.remote.location import Remote
from vcollect.stats import CollectStats
from vcollect.store.layout.dataset_info import SHARDS_DIR
from vcollect.store.layout.manifest import shard_summary
from vcollect.store.layout.shard_format import SHARD_SUFFIX, parse_shard_name

__all__ = ["committed_in_call", "remote_writer_lines", "writer_shards"]


def writer_shards(dataset: Path, writer: str) -> list[str]:
    """Names of the committed shards of ``writer`` in the dataset directory, in commit order."""
    return sorted(p.name for p in (dataset / SHARDS_DIR).glob(f"*-{writer}-*{SHARD_SUFFIX}"))


def remote_writer_lines(remote: Remote, dataset_id: str, writer: str) -> dict[str, dict[str, Any]]:
    """The manifest lines ``writer`` has on the remote (its shards that reached it), by shard name, in commit
    order: a worker writing to a remote counts only what it uploaded."""
    manifest = RemoteManifest.read(remote, dataset_id)
    out: dict[str, dict[str, Any]] = {}
    for line in sorted(manifest.by_shard.values(), key=lambda line: line.shard):
        parsed = parse_shard_name(line.shard)
        if parsed is not None and parsed.writer == writer:
            out[line.shard] = json.loads(line.raw)
    return out


def committed_in_call(
    dataset: Path, shard_names: Iterable[str], carry: np.ndarray, pending: int = 0,
    summaries: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[CollectStats, int, int]:
    """The stats the call owes to these shards (committed during the call, in commit order), and the episodes
    and steps of the ``pending`` ones found in them.

    ``pending``: episodes the writer held uncommitted when the call began, counted by earlier calls; a writer
    commits in order, so they are the shards' first episodes (as many as were committed) and are not counted
    again. ``carry[e]``: steps local env e's unfinished episode had when the call began, counted by an earlier
    call. They are taken off the shards' steps for every env: either that episode is in a shard here (its
    first for the env) and its carried steps are not new, or it died unstored with the worker and its carried
    steps must be collected again, so the steps owed can be negative. Episodes count once each.
    ``summaries``: the shards' manifest lines by name, where the shards are not in ``dataset`` (on a remote).
    """
    lengths: list[int] = []
    returns: list[float] = []
    for name in shard_names:
        summary = summaries[name] if summaries is not None else shard_summary(dataset / SHARDS_DIR / name)
        lengths += summary["length"]
        returns += summary["return"]
    found = min(int(pending), len(lengths))
    old = np.asarray(lengths[:found], dtype=np.int64)
    lens = np.asarray(lengths[found:], dtype=np.int64)
    stats = CollectStats(
        n_collected_steps=int(lens.sum()) - int(np.asarray(carry, dtype=np.int64).sum()),
        n_collected_episodes=int(lens.size),
        collect_time=0.0,
        returns=np.asarray(returns[found:], dtype=np.float64),
        lens=lens,
    )
    return stats, found, int(old.sum())
