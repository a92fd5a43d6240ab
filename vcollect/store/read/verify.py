"""``Dataset.verify``: check a dataset's shards against its manifest, its dataset.json and themselves."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.durable import TMP_SUFFIX
from vcollect.errors import CorruptShardError
from vcollect.spaces import Leaf, batch_contains, leaves, unflatten_batch
from vcollect.store.layout.dataset_info import SHARDS_DIR, dataset_files, dataset_spaces
from vcollect.store.layout.manifest import (
    MANIFEST_DIR,
    SUMMARY_CHECKSUM,
    ManifestEntries,
    file_sha256,
    read_manifest,
    shard_summary,
)
from vcollect.store.layout.shard_format import SHARD_SUFFIX, column_path, shard_layout
from vcollect.store.read.shards.shard_census import take_census
from vcollect.store.read.shards.shard_reader import OpenShardFiles, StoredShard
from vcollect.store.write.frame_stack import FrameStack, frame_leaves

__all__ = ["verify_dataset"]

#: Manifest line fields compared with the shard file (its mtime may change with a copy; not compared).
_LINE_FIELDS = ("size", "episodes", "steps", "length", "return", "env_id", "seed", "seed_dtype", "seed_valid",
                "columns", "extra_tables", "layout")


def verify_dataset(path: Path, info: Mapping[str, Any]) -> list[str]:
    """Problems of the dataset directory ``path`` described by ``info`` (its dataset.json), one line each.

    Lists what ``load_dataset`` counts as damage (shard_census.py: shards recorded but missing, truncated,
    unrecorded copies and stray files, corrupt shards, layouts other than dataset.json's), then shards whose
    SHA-256 differs from the manifest's (altered since commit), manifest lines altered after they were
    written or disagreeing with their shard, shards whose content equals another's, manifest lines recorded
    twice or torn, files in ``shards/`` that are no shard, columns that cannot be decoded (a chunk that
    decodes past its size included), episode returns that differ from the sum of the episode's rewards, and
    stored actions outside dataset.json's action space. A shard a writer renamed but
    has not recorded yet (a live writer, or one that died between the two) is no problem when it is whole.
    Reads every shard whole.

    Args:
        path: The dataset directory.
        info: Its parsed dataset.json.

    Returns:
        One line per problem; empty when the dataset is sound.
    """
    obs_space, act_space = dataset_spaces(info)
    stack = FrameStack.from_json(info.get("frame_stack"))
    expected = shard_layout(leaves(obs_space), leaves(act_space), None if stack is None else stack.to_json())
    obs_leaves, act_leaves = frame_leaves(leaves(obs_space), stack), leaves(act_space)
    manifest = read_manifest(path)  # before listing shards/, as load_dataset does
    committed, _ = dataset_files(path)
    problems = list(manifest.problems)
    if committed and not (path / MANIFEST_DIR).is_dir():
        problems.append(
            f"{path / MANIFEST_DIR} is absent (written before vcollect kept manifests?): missing shards cannot "
            "be detected, and shards are checked only against themselves"
        )
    census = take_census(path, manifest, committed, obs_leaves, act_leaves, expected, trust_manifest=False)
    if census.layout_problem is not None:
        problems.append(census.layout_problem)
    problems += census.problems
    problems += _stray_files(path)
    first_with: dict[str, str] = {}
    for file in committed:
        try:
            digest = file_sha256(file)
        except OSError as exc:
            problems.append(f"shard {file.name} cannot be read: {exc}")
            continue
        entry = manifest.by_shard.get(file.name)
        if entry is not None and file.name not in census.resized:
            problems += _line_problems(file, entry, digest, manifest)
        if digest in first_with:
            problems.append(
                f"shard {file.name} has the same content as {first_with[digest]} (a copy: its episodes count twice)"
            )
        else:
            first_with[digest] = file.name
    for shard in census.shards:
        try:
            _decode_all(shard)
            problems += _return_problems(shard)
            problems += _action_problems(shard, act_leaves, act_space)
        except CorruptShardError as exc:  # a column that cannot be decoded
            problems.append(str(exc))
    return problems


def _line_problems(file: Path, entry: dict[str, Any], digest: str, manifest: ManifestEntries) -> list[str]:
    """What is wrong between the shard ``file`` and its manifest line ``entry``."""
    name, where = file.name, f"{MANIFEST_DIR}/{manifest.where[file.name]}"
    out = []
    if entry.get("sha256") != digest:
        out.append(
            f"shard {name}: checksum mismatch (SHA-256 {digest[:16]}..., manifest "
            f"{str(entry.get('sha256'))[:16]}...): altered since it was committed"
        )
    if SUMMARY_CHECKSUM in entry and name not in manifest.intact:
        out.append(
            f"the manifest line of shard {name} ({where}) was altered after it was written (its "
            f"{SUMMARY_CHECKSUM} does not match): reads open the shard instead of trusting it"
        )
    try:
        fresh = shard_summary(file, digest)
    except Exception:  # noqa: BLE001 - a shard that cannot be read is named by the census already
        return out
    differ = [key for key in _LINE_FIELDS if key in entry and entry[key] != fresh[key]]
    if differ:
        out.append(f"shard {name}: its manifest line ({where}) disagrees with the file on {', '.join(differ)}")
    return out


def _stray_files(path: Path) -> list[str]:
    """Entries of ``shards/`` that reads ignore: neither a shard file nor a writer's temporary file."""
    out: list[str] = []
    try:
        entries = sorted(os.scandir(path / SHARDS_DIR), key=lambda e: e.name)
    except OSError:
        return out
    for entry in entries:
        if entry.name.endswith(TMP_SUFFIX):
            continue
        try:
            regular = entry.is_file()
        except OSError:
            regular = False
        if not entry.name.endswith(SHARD_SUFFIX):
            out.append(f"{SHARDS_DIR}/{entry.name} is not a shard (no {SHARD_SUFFIX} name); reads ignore it")
        elif not regular:
            out.append(f"{SHARDS_DIR}/{entry.name} is not a regular file; reads ignore it")
    return out


#: Bytes of one column decoded at once while verify reads every column whole.
_DECODE_BLOCK_BYTES = 64 << 20


def _decode_all(shard: StoredShard) -> None:
    """Decode every column of ``shard`` (CorruptShardError naming it for one that cannot be), a block of rows
    at a time."""
    files = OpenShardFiles(2)
    try:
        for name, col in shard.columns.items():
            rows = col.shape[0] if col.shape else 0
            step = max(1, _DECODE_BLOCK_BYTES // max(1, col.dtype.itemsize * (col.size // max(1, rows))))
            for lo in range(0, rows, step):
                files.read(0, shard, name, slice(lo, min(rows, lo + step)))
    finally:
        files.close()


def _return_problems(shard: StoredShard) -> list[str]:
    """Episodes of ``shard`` whose stored return is not the sum of their rewards."""
    files = OpenShardFiles(1)
    try:
        rewards = files.read(0, shard, "rewards", slice(None)).astype(np.float64)
    finally:
        files.close()
    bad = [
        row for row, (start, length, ret) in enumerate(zip(shard.step_offset, shard.length, shard.returns))
        if not np.isclose(rewards[start : start + length].sum(), ret, rtol=1e-9, atol=1e-12)
    ]
    if not bad:
        return []
    return [
        f"shard {shard.name}: episodes/return of {len(bad)} episode(s) (rows {bad[:5]}) differs from the sum "
        "of their rewards"
    ]


def _action_problems(shard: StoredShard, act_leaves: list[Leaf], action_space: gym.Space[Any]) -> list[str]:
    """The shard's stored actions that lie outside the action space dataset.json describes."""
    if not shard.num_steps:
        return []
    files = OpenShardFiles(1)
    try:
        arrays = [files.read(0, shard, column_path("actions", leaf.name), slice(None)).astype(leaf.dtype, copy=False)
                  for leaf in act_leaves]
    finally:
        files.close()
    fault = batch_contains(action_space, unflatten_batch(action_space, arrays))
    if fault is None:
        return []
    return [f"shard {shard.name}: stored actions outside dataset.json's action space: {fault}"]
