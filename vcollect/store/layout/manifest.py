"""The per-dataset manifest of committed shards: what each writer committed, summarised for fast loading.

Every writer appends one JSON line per committed shard to its own file ``<dataset>/manifest/<writer>.jsonl``
(one ``write`` of the whole line in append mode, then fsync), so concurrent writers never share a file.
A line records the shard's name, size, mtime, SHA-256, totals, its ``episodes/`` table (lengths, returns,
env ids, seeds) and where each column lies in the file. ``load_dataset`` uses it instead of opening
each shard whose size and mtime still match; ``Dataset.verify`` uses it to name missing, unrecorded,
duplicated and altered shards. A torn last line (a crash mid-append) is skipped; the shard it described
then reads like one without an entry (opened at load, reported by ``verify``).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vcollect.store.layout.durable import fsync_dir
from vcollect.store.layout.shard_format import EPISODE_COLUMNS

__all__ = ["MANIFEST_DIR", "ManifestEntries", "file_sha256", "read_manifest", "record_commit", "shard_summary"]

MANIFEST_DIR = "manifest"
MANIFEST_SUFFIX = ".jsonl"

#: Column attributes the reader uses (and so the manifest keeps).
_KEPT_ATTRS = ("rows", "encoding")


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _attr_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.item() if isinstance(value, np.generic) else value


def shard_summary(path: Path, sha256: str | None = None) -> dict[str, Any]:
    """The manifest line of a committed shard, read back from the file (its SHA-256 too, unless given)."""
    st = os.stat(path)
    with h5py.File(path, "r") as f:
        columns: list[list[Any]] = []
        extra_tables = "episodes/options" in f or "episodes/metadata" in f

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset) and not name.startswith("episodes/"):
                offset = obj.id.get_offset()
                plain = obj.compression is None and obj.chunks is None and offset is not None
                attrs = {key: _attr_value(obj.attrs[key]) for key in _KEPT_ATTRS if key in obj.attrs}
                columns.append([name, obj.dtype.str, list(obj.shape), int(offset) if plain else None, attrs])

        f.visititems(visit)
        table = {name: np.asarray(f[f"episodes/{name}"][()]) for name in EPISODE_COLUMNS}
        totals = int(f.attrs["num_episodes"]), int(f.attrs["num_steps"])
    return {
        "shard": path.name,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": file_sha256(path) if sha256 is None else sha256,
        "episodes": totals[0],
        "steps": totals[1],
        "length": table["length"].tolist(),
        "return": table["return"].astype(np.float64).tolist(),
        "env_id": table["env_id"].tolist(),
        "seed": table["seed"].tolist(),
        "seed_dtype": table["seed"].dtype.str,
        "seed_valid": table["seed_valid"].astype(bool).tolist(),
        "columns": columns,
        "extra_tables": extra_tables,
    }


def record_commit(dataset_path: Path, shard_path: Path, writer: str, sha256: str | None = None) -> None:
    """Append the manifest line of the just-committed ``shard_path`` to ``manifest/<writer>.jsonl``
    (``sha256``: the file's digest when the writer has it, else it is read back from the file).

    Called by the writer after the shard's rename. Never raises: the shard is committed whatever
    happens here (a failure is warned about; the shard then loads without the manifest's help and
    ``Dataset.verify`` reports it as unrecorded).
    """
    try:
        line = json.dumps(shard_summary(shard_path, sha256), separators=(",", ":")) + "\n"
        directory = dataset_path / MANIFEST_DIR
        directory.mkdir(exist_ok=True)
        file = directory / f"{writer}{MANIFEST_SUFFIX}"
        created = not file.exists()
        fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = line.encode("utf-8")
            written = os.write(fd, data)
            while written < len(data):  # a short write: finish the line (a reader skips a torn one)
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(directory)
    except Exception as exc:  # noqa: BLE001 - the shard is committed; the manifest is only an index
        warnings.warn(
            f"shard {str(shard_path)!r} is committed but could not be recorded in the manifest: "
            f"{type(exc).__name__}: {exc}",
            RuntimeWarning,
            stacklevel=3,
        )


class ManifestEntries:
    """The manifest lines of a dataset: by shard name, plus what is wrong with the manifest itself."""

    def __init__(self) -> None:
        self.by_shard: dict[str, dict[str, Any]] = {}
        self.where: dict[str, str] = {}
        self.problems: list[str] = []


def read_manifest(dataset_path: Path) -> ManifestEntries:
    """Every manifest line of a dataset; torn, unreadable and duplicate lines become problems."""
    out = ManifestEntries()
    directory = dataset_path / MANIFEST_DIR
    if not directory.is_dir():
        return out
    for file in sorted(directory.iterdir()):
        if not file.name.endswith(MANIFEST_SUFFIX) or not file.is_file():
            continue
        try:
            lines = file.read_bytes().split(b"\n")
        except OSError as exc:
            out.problems.append(f"manifest {file} cannot be read: {exc}")
            continue
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
                name = entry["shard"]
                if not isinstance(name, str):
                    raise TypeError("shard name is not a string")
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                torn = number == len(lines) and not raw.endswith(b"}")
                what = "a torn last line (a crash mid-append)" if torn else f"unreadable: {exc}"
                out.problems.append(f"manifest {file} line {number}: {what}")
                continue
            if name in out.by_shard:
                out.problems.append(
                    f"shard {name} is recorded twice in the manifest ({out.where[name]} and {file.name} line {number})"
                )
                continue
            out.by_shard[name] = entry
            out.where[name] = f"{file.name} line {number}"
    return out
