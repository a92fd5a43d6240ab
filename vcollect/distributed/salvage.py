"""What a dead distributed worker had committed in the call it died in, read back from its shards.

A worker's shards are named ``<time>-<writer>-<seq>.h5`` by its EpisodeStore; the driver knows which of them
the worker had reported before the call, so the others are the ones committed during the call. They count
(they are in the dataset); everything else the worker collected in the call is lost and collected again,
and so are the steps of its unfinished episodes that earlier calls counted but no shard holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from vcollect.stats import CollectStats
from vcollect.store.layout.dataset_info import SHARDS_DIR
from vcollect.store.layout.manifest import shard_summary
from vcollect.store.layout.shard_format import SHARD_SUFFIX

__all__ = ["committed_in_call", "writer_shards"]


def writer_shards(dataset: Path, writer: str) -> list[str]:
    """Names of the committed shards of ``writer`` in the dataset directory, in commit order."""
    return sorted(p.name for p in (dataset / SHARDS_DIR).glob(f"*-{writer}-*{SHARD_SUFFIX}"))


def committed_in_call(
    dataset: Path, shard_names: Iterable[str], carry: np.ndarray, pending: int = 0
) -> tuple[CollectStats, int, int]:
    """The stats the call owes to these shards (committed during the call, in commit order), and the episodes
    and steps of the ``pending`` ones found in them.

    ``pending``: episodes the writer held uncommitted when the call began, counted by earlier calls; a writer
    commits in order, so they are the shards' first episodes (as many as were committed) and are not counted
    again. ``carry[e]``: steps local env e's unfinished episode had when the call began, counted by an earlier
    call. They are taken off the shards' steps for every env: either that episode is in a shard here (its
    first for the env) and its carried steps are not new, or it died unstored with the worker and its carried
    steps must be collected again, so the steps owed can be negative. Episodes count once each.
    """
    lengths: list[int] = []
    returns: list[float] = []
    for name in shard_names:
        summary = shard_summary(dataset / SHARDS_DIR / name)
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
