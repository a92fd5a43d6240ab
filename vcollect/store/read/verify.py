"""``Dataset.verify``: check a dataset's shards against its manifest and against themselves."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vcollect.errors import CorruptShardError
from vcollect.spaces import Leaf
from vcollect.store.layout.dataset_info import dataset_files
from vcollect.store.layout.manifest import MANIFEST_DIR, file_sha256, read_manifest
from vcollect.store.read.shard_reader import OpenShardFiles, StoredShard

__all__ = ["verify_dataset"]


def verify_dataset(path: Path, obs_leaves: list[Leaf], act_leaves: list[Leaf]) -> list[str]:
    """Problems of the dataset directory ``path``, one line each (empty when none).

    Names shards recorded in the manifest but missing, shards present but recorded nowhere (copied in,
    or committed by a writer that crashed before recording them), shards whose content equals another's
    (a copy: its episodes would count twice), shards whose SHA-256 differs from the manifest's (altered
    since commit), manifest lines recorded twice or torn, corrupt shards, and episode returns that differ
    from the sum of the episode's rewards.
    """
    problems: list[str] = []
    manifest = read_manifest(path)
    problems += manifest.problems
    recorded = (path / MANIFEST_DIR).is_dir()
    if not recorded:
        problems.append(
            f"{path / MANIFEST_DIR} is absent (written before vcollect kept manifests?): missing shards cannot "
            "be detected, and shards are checked only against themselves"
        )
    committed, _ = dataset_files(path)
    present = {file.name for file in committed}
    for name, where in manifest.where.items():
        if name not in present:
            problems.append(f"shard {name} is missing (recorded in {MANIFEST_DIR}/{where})")
    first_with: dict[str, str] = {}
    for file in committed:
        try:
            digest = file_sha256(file)
        except OSError as exc:
            problems.append(f"shard {file.name} cannot be read: {exc}")
            continue
        entry = manifest.by_shard.get(file.name)
        if entry is None and recorded:
            problems.append(
                f"shard {file.name} is not recorded in the manifest (copied in, or its writer crashed before "
                "recording it)"
            )
        elif entry is not None and entry.get("sha256") != digest:
            problems.append(
                f"shard {file.name}: checksum mismatch (SHA-256 {digest[:16]}..., manifest "
                f"{str(entry.get('sha256'))[:16]}...): altered since it was committed"
            )
        if digest in first_with:
            problems.append(
                f"shard {file.name} has the same content as {first_with[digest]} (a copy: its episodes count twice)"
            )
        else:
            first_with[digest] = file.name
        try:
            shard = StoredShard(file, obs_leaves, act_leaves)
            problems += _return_problems(shard)
        except CorruptShardError as exc:
            problems.append(str(exc))
    return problems


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
