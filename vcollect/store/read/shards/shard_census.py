"""Which shard files a read takes: the files in a dataset's ``shards/`` compared with its manifests.

The damage policy (the documentation's "What the store guarantees"; load_dataset's ``on_damage``). A committed shard never changes,
and its writer records it in the manifest right after renaming it into place, so:

- a shard the manifest records but ``shards/`` lacks is **missing**;
- a recorded shard whose size differs from its manifest line is **truncated or altered**, and left out;
- a shard that cannot be read whole is **corrupt**, and left out;
- a shard the manifest does not record is **taken** when its name is one vcollect makes
  (``<time>-<writer>-<seq>.h5``), the writer and seq stored in the file agree with the name, no other shard
  has that writer and seq, and it reads whole: a writer renames a shard before it records it, so this is
  one being recorded now, one whose writer died between the two steps, or a dataset whose manifest was lost
  or never kept (older datasets). Any other unrecorded file (a copy under another name, a stray file) is
  **unrecorded** damage, left out: its episodes would count twice or come from nowhere;
- a shard written with a layout (frame stack, leaf dtypes and shapes) other than ``dataset.json``'s is left
  out; when every shard disagrees the same way, ``dataset.json`` is what changed: CorruptDatasetError.

Only names, sizes and mtimes are compared for recorded shards (no file is read for them); a manifest line
stands in for its shard (its table and layout, no file opened) only when its checksum holds and the size
and mtime match. The manifest is read before ``shards/`` is listed, so a shard recorded meanwhile is never
taken for missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vcollect.errors import CorruptShardError
from vcollect.spaces import Leaf
from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR
from vcollect.store.layout.manifest import MANIFEST_DIR, ManifestEntries
from vcollect.store.layout.shard_format import ShardName, layout_differences, parse_shard_name
from vcollect.store.read.shards.shard_reader import StoredShard

__all__ = ["ON_DAMAGE", "OnDamage", "ShardCensus", "line_stands_in", "take_census"]

OnDamage = Literal["raise", "skip"]
"""What ``load_dataset`` does with a damaged dataset: raise DamagedDatasetError, or read the whole shards."""

ON_DAMAGE = ("raise", "skip")


@dataclass
class ShardCensus:
    """The outcome of comparing a dataset's shard files with its manifests."""

    #: the shards a read takes, in name order
    shards: list[StoredShard] = field(default_factory=list)
    #: one line per damage found, each naming its file
    problems: list[str] = field(default_factory=list)
    #: present shard files left out
    left_out: list[Path] = field(default_factory=list)
    #: recorded shard names with no file
    missing: list[str] = field(default_factory=list)
    #: names of recorded shards whose size differs from their manifest line
    resized: set[str] = field(default_factory=set)
    #: set when every shard disagrees with dataset.json about the layout (dataset.json was changed)
    layout_problem: str | None = None


def take_census(
    path: Path,
    manifest: ManifestEntries,
    committed: list[Path],
    obs_leaves: list[Leaf],
    act_leaves: list[Leaf],
    expected_layout: Mapping[str, Any],
    *,
    trust_manifest: bool = True,
    counts_only: bool = False,
) -> ShardCensus:
    """Compare the shard files ``committed`` (read after ``manifest``) with the manifest, by the module's policy.

    Args:
        path: The dataset directory.
        manifest: Its manifest lines (read before ``committed`` was listed).
        committed: The shard files present, in name order (``dataset_info.dataset_files``).
        obs_leaves: The observation leaves as stored (frames, for a frame stack).
        act_leaves: The action leaves.
        expected_layout: ``shard_format.shard_layout`` of dataset.json.
        trust_manifest: Let intact manifest lines of unchanged shards stand in for their files (loading);
            False opens every shard (verify).
        counts_only: The shards taken are only counted, never read (a listing): an intact line of an
            unchanged shard stands in for it even when the shard has tables the line does not summarise
            (options, episode metadata).

    Returns:
        The shards taken and the problems found. Errors that say nothing about a shard (too many open
        files, no memory) are raised as they are.
    """
    census = ShardCensus()
    present = {file.name for file in committed}
    census.missing = sorted(name for name in manifest.by_shard if name not in present)
    for name in census.missing:
        census.problems.append(f"shard {name} is missing (recorded in {MANIFEST_DIR}/{manifest.where[name]})")
    candidates: list[tuple[StoredShard, ShardName | None, bool]] = []
    for file in committed:
        parsed = parse_shard_name(file.name)
        shard = _take(file, parsed, manifest, obs_leaves, act_leaves, trust_manifest, counts_only, census)
        if shard is not None:
            candidates.append((shard, parsed, file.name in manifest.by_shard))
    kept = _without_duplicates(candidates, census)
    census.shards = _with_layout(kept, path, expected_layout, census)
    return census


def line_stands_in(entry: Mapping[str, Any], intact: bool) -> bool:
    """Whether a load takes a manifest line (``intact``: its checksum holds) for its shard without opening the
    file, given that the file's size and mtime match it: not when the shard has option or metadata tables,
    which the line does not hold."""
    return intact and not entry.get("extra_tables", True)


def _take(
    file: Path,
    parsed: ShardName | None,
    manifest: ManifestEntries,
    obs_leaves: list[Leaf],
    act_leaves: list[Leaf],
    trust_manifest: bool,
    counts_only: bool,
    census: ShardCensus,
) -> StoredShard | None:
    """The shard at ``file`` if the policy takes it, else None with its problem noted."""
    name = file.name
    entry = manifest.by_shard.get(name)
    try:
        st = file.stat()
    except FileNotFoundError:  # removed since the listing (a dataset being deleted): nothing to read
        census.problems.append(f"shard {name} vanished while the dataset was read")
        census.left_out.append(file)
        return None
    if entry is not None:
        recorded_size = entry.get("size")
        if isinstance(recorded_size, int) and st.st_size != recorded_size:
            problem = (f"shard {name} is {st.st_size} bytes, but its manifest line ({MANIFEST_DIR}/"
                       f"{manifest.where[name]}) records {recorded_size}: truncated or altered since it was committed")
            try:  # what is wrong with it, when the file says
                StoredShard(file, obs_leaves, act_leaves)
            except CorruptShardError as exc:
                problem += f"; {exc}"
            census.problems.append(problem)
            census.left_out.append(file)
            census.resized.add(name)
            return None
    elif parsed is None:
        census.problems.append(
            f"shard {name} is recorded in no manifest and is not named as vcollect names shards "
            "(<time>-<writer>-<seq>.h5): a stray or renamed file"
        )
        census.left_out.append(file)
        return None
    summary = None
    intact = name in manifest.intact
    if (trust_manifest and entry is not None and intact and st.st_mtime_ns == entry.get("mtime_ns")
            and (counts_only or line_stands_in(entry, intact))):
        summary = entry
    try:
        try:
            shard = StoredShard(file, obs_leaves, act_leaves, summary)
        except CorruptShardError:
            if summary is None:
                raise
            shard = StoredShard(file, obs_leaves, act_leaves)  # the line could not stand in; the file decides
    except CorruptShardError as exc:
        census.problems.append(str(exc))
        census.left_out.append(file)
        return None
    if parsed is not None and shard.writer is not None and shard.seq is not None and (
            shard.writer, shard.seq) != (parsed.writer, parsed.seq):
        census.problems.append(
            f"shard {name} holds shard {shard.seq} of writer {shard.writer!r}, not what its name says: a copy "
            "under another name (its episodes would count twice)"
        )
        census.left_out.append(file)
        return None
    return shard


def _without_duplicates(
    candidates: list[tuple[StoredShard, ShardName | None, bool]], census: ShardCensus
) -> list[StoredShard]:
    """The candidates less all but one of the files named for the same writer and seq (a recorded one kept)."""
    by_identity: dict[tuple[str, int], list[tuple[StoredShard, bool]]] = {}
    for shard, parsed, recorded in candidates:
        if parsed is not None:
            by_identity.setdefault((parsed.writer, parsed.seq), []).append((shard, recorded))
    dropped: set[str] = set()
    for group in by_identity.values():
        if len(group) < 2:
            continue
        keep = next((shard for shard, recorded in group if recorded), group[0][0])
        for shard, _ in group:
            if shard is not keep:
                dropped.add(shard.name)
                census.problems.append(
                    f"shard {shard.name} is named for the same writer and seq as {keep.name}: a copy (its episodes "
                    "would count twice)"
                )
                census.left_out.append(shard.path)
    return [shard for shard, _, _ in candidates if shard.name not in dropped]


def _with_layout(
    shards: list[StoredShard], path: Path, expected: Mapping[str, Any], census: ShardCensus
) -> list[StoredShard]:
    """The shards whose layout attribute agrees with dataset.json's (or that have none)."""
    differing = {s.name: layout_differences(s.layout, expected) for s in shards if s.layout is not None}
    differing = {name: diffs for name, diffs in differing.items() if diffs}
    if not differing:
        return shards
    with_layout = sum(1 for s in shards if s.layout is not None)
    if len(differing) == with_layout and len({tuple(d) for d in differing.values()}) == 1:
        names = sorted(differing)
        census.layout_problem = (
            f"{path / DATASET_FILE} disagrees with the layout all {len(names)} shard(s) were written with "
            f"({'; '.join(next(iter(differing.values())))}; shards {', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}): dataset.json was changed after they were written"
        )
        return shards
    for name, diffs in differing.items():
        census.problems.append(f"shard {name} was written with another layout than dataset.json's: {'; '.join(diffs)}")
        census.left_out.append(path / SHARDS_DIR / name)
    return [s for s in shards if s.name not in differing]

