"""The per-dataset manifest of committed shards: what each writer committed, summarised for fast loading.

Every writer appends one JSON line per committed shard to its own file ``<dataset>/manifest/<writer>.jsonl``
(one ``write`` of the whole line in append mode, then fsync), so concurrent writers never share a file.
A line records the shard's name, size, mtime, SHA-256, totals, its ``episodes/`` table (lengths, returns,
env ids, seeds), where each column lies in the file and the shard's layout attribute, and ends with
``summary_sha256``, the SHA-256 of the rest of the line (:func:`summary_intact`). ``load_dataset`` uses a
line instead of opening its shard only when that checksum holds and the shard's size and mtime still match
(an edited line is never trusted over the file), and compares the names and sizes of the shard files with
the lines; ``Dataset.verify`` compares every line with its shard. A torn last line (a crash mid-append) is
skipped; the shard it described then reads like one without an entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from vcollect.durable import fsync_dir
from vcollect.store.layout.shard_format import EPISODE_COLUMNS, LAYOUT_ATTR

__all__ = [
    "MANIFEST_DIR",
    "SUMMARY_CHECKSUM",
    "ManifestEntries",
    "ShardFacts",
    "ShardFactsRecorder",
    "column_entry",
    "file_sha256",
    "read_manifest",
    "read_shard_facts",
    "record_commit",
    "shard_summary",
    "summary_line",
]

MANIFEST_DIR = "manifest"
MANIFEST_SUFFIX = ".jsonl"

#: Column attributes the reader uses (and so the manifest keeps).
_KEPT_ATTRS = ("rows", "encoding")

#: The key of a manifest line's last field: the SHA-256 of the line's JSON before it (see summary_line).
SUMMARY_CHECKSUM = "summary_sha256"

_CHECKSUM_FIELD = b',"' + SUMMARY_CHECKSUM.encode() + b'":"'


def summary_line(summary: dict[str, Any]) -> str:
    """The manifest line of ``summary`` (a :func:`shard_summary`): its JSON with a last field
    ``summary_sha256``, the SHA-256 of the JSON text before it (closed with ``}``), and a newline."""
    body = json.dumps(summary, separators=(",", ":"))
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    return f'{body[:-1]},"{SUMMARY_CHECKSUM}":"{digest}"}}\n'


def _line_intact(raw: bytes) -> bool:
    """Whether a manifest line (bytes) ends with a checksum that matches the JSON text before it."""
    raw = raw.rstrip()
    start = raw.rfind(_CHECKSUM_FIELD)
    if start < 0 or not raw.endswith(b'"}'):
        return False
    digest = raw[start + len(_CHECKSUM_FIELD) : -2]
    return hashlib.sha256(raw[:start] + b"}").hexdigest().encode() == digest


def _opener(dir_fd: int | None) -> Callable[[str, int], int]:
    """An ``open(..., opener=)`` that takes relative paths from the open directory ``dir_fd``."""
    return lambda path, flags: os.open(path, flags, dir_fd=dir_fd)


def file_sha256(path: Path, dir_fd: int | None = None) -> str:
    """Hex SHA-256 of a file's bytes (``dir_fd``: an open directory a relative ``path`` is taken from)."""
    digest = hashlib.sha256()
    with open(path, "rb", opener=_opener(dir_fd)) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _attr_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.item() if isinstance(value, np.generic) else value


def column_entry(name: str, dataset: h5py.Dataset) -> list[Any]:
    """A shard column's entry in its manifest line: [name, dtype, shape, byte offset of its data in the
    file (None unless stored whole and unfiltered), the attributes the reader uses]."""
    offset = dataset.id.get_offset()
    plain = dataset.compression is None and dataset.chunks is None and offset is not None
    attrs = {key: _attr_value(dataset.attrs[key]) for key in _KEPT_ATTRS if key in dataset.attrs}
    return [name, dataset.dtype.str, list(dataset.shape), int(offset) if plain else None, attrs]


@dataclass
class ShardFacts:
    """What a shard's manifest line takes from the file's content: its column entries (in the file's name
    order), its ``episodes/`` table, its totals and layout attribute, and whether it has an options or
    metadata table."""

    columns: list[list[Any]]
    table: dict[str, np.ndarray]
    totals: tuple[int, int]
    layout: Any
    extra_tables: bool


class ShardFactsRecorder:
    """Collects the :class:`ShardFacts` of a shard while its writer builds it, so that its manifest line need
    not read the file back: ``add`` each column as it is created, then ``facts``."""

    def __init__(self) -> None:
        self._columns: list[list[Any]] = []
        self._table: dict[str, np.ndarray] = {}
        self._extra_tables = False

    def add(self, path: str, dataset: h5py.Dataset, values: np.ndarray) -> None:
        """Record the column just created at ``path`` as ``dataset``, holding ``values``.

        Args:
            path: Its path in the file.
            dataset: The dataset created there.
            values: The values written to it.
        """
        if path.startswith("episodes/"):
            name = path[len("episodes/") :]
            if name in EPISODE_COLUMNS:
                self._table[name] = values
            elif name == "options" or name.startswith("metadata/"):
                self._extra_tables = True
        else:
            self._columns.append(column_entry(path, dataset))

    def facts(self, attrs: Mapping[str, Any]) -> ShardFacts:
        """The facts of the shard, whose file attributes are ``attrs``.

        Args:
            attrs: The attributes written on the shard file.

        Returns:
            Its facts, columns in the order a visit of the file gives them.
        """
        layout = attrs.get(LAYOUT_ATTR)
        return ShardFacts(
            sorted(self._columns, key=lambda entry: entry[0].split("/")), dict(self._table),
            (int(attrs["num_episodes"]), int(attrs["num_steps"])),
            None if layout is None else json.loads(_attr_value(layout)), self._extra_tables,
        )


def read_shard_facts(path: Path, dir_fd: int | None = None) -> ShardFacts:
    """The :class:`ShardFacts` of a shard file, read from it (``dir_fd``: an open directory a relative
    ``path`` is taken from)."""
    with contextlib.ExitStack() as stack:
        source = path if dir_fd is None else stack.enter_context(open(path, "rb", opener=_opener(dir_fd)))
        f = stack.enter_context(h5py.File(source, "r"))
        columns: list[list[Any]] = []

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset) and not name.startswith("episodes/"):
                columns.append(column_entry(name, obj))

        f.visititems(visit)
        table = {name: np.asarray(f[f"episodes/{name}"][()]) for name in EPISODE_COLUMNS}
        totals = int(f.attrs["num_episodes"]), int(f.attrs["num_steps"])
        layout = f.attrs.get(LAYOUT_ATTR)
        extra_tables = "episodes/options" in f or "episodes/metadata" in f
    return ShardFacts(columns, table, totals, None if layout is None else json.loads(_attr_value(layout)),
                      extra_tables)


def shard_summary(
    path: Path, sha256: str | None = None, dir_fd: int | None = None, facts: ShardFacts | None = None
) -> dict[str, Any]:
    """What the manifest line of a committed shard holds (its SHA-256 too, unless given; ``dir_fd``: an open
    directory a relative ``path`` is taken from; ``facts``: its content's facts as its writer recorded them,
    else read back from the file); :func:`summary_line` makes the line."""
    st = os.stat(path, dir_fd=dir_fd)
    if facts is None:
        facts = read_shard_facts(path, dir_fd)
    table = facts.table
    return {
        "shard": path.name,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": file_sha256(path, dir_fd) if sha256 is None else sha256,
        "episodes": facts.totals[0],
        "steps": facts.totals[1],
        "length": table["length"].tolist(),
        "return": table["return"].astype(np.float64).tolist(),
        "env_id": table["env_id"].tolist(),
        "seed": table["seed"].tolist(),
        "seed_dtype": table["seed"].dtype.str,
        "seed_valid": table["seed_valid"].astype(bool).tolist(),
        "columns": facts.columns,
        "extra_tables": facts.extra_tables,
        "layout": facts.layout,
    }


def record_commit(
    dataset_path: Path, shard_path: Path, writer: str, sha256: str | None = None, dir_fd: int | None = None,
    facts: ShardFacts | None = None,
) -> None:
    """Append the manifest line of the just-committed ``shard_path`` to ``manifest/<writer>.jsonl``
    (``sha256``: the file's digest when the writer has it, else it is read back from the file; ``facts``:
    what the writer recorded of the file's content while building it, else that is read back too).

    With ``dir_fd`` (the writer's open descriptor of the dataset directory) ``shard_path`` is relative to
    it, and the line goes into that directory's manifest whatever is at ``dataset_path`` now.

    Called by the writer after the shard's rename. Never raises: the shard is committed whatever
    happens here (a failure is warned about; the shard then reads as an unrecorded one: opened at load,
    taken when whole and named as its writer named it, see store/read/shards/shard_census.py).
    """
    try:
        line = summary_line(shard_summary(shard_path, sha256, dir_fd, facts))
        directory = Path(MANIFEST_DIR) if dir_fd is not None else dataset_path / MANIFEST_DIR
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, dir_fd=dir_fd)
        file = directory / f"{writer}{MANIFEST_SUFFIX}"
        try:
            os.stat(file, dir_fd=dir_fd)
            created = False
        except FileNotFoundError:
            created = True
        fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
        try:
            data = line.encode("utf-8")
            written = os.write(fd, data)
            while written < len(data):  # a short write: finish the line (a reader skips a torn one)
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(directory, dir_fd)
    except Exception as exc:  # noqa: BLE001 - the shard is committed; the manifest is only an index
        warnings.warn(
            f"shard {str(dataset_path / shard_path)!r} is committed but could not be recorded in the manifest: "
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
        #: names of shards whose line is as its writer wrote it (its summary_sha256 matches): only these
        #: lines may stand in for their shard's file
        self.intact: set[str] = set()


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
            if _line_intact(raw):
                out.intact.add(name)
    return out
