"""Reading a remote dataset in place: shards fetched when a read first touches them, through a bounded cache.

Opening lays the dataset out in a session folder of the cache: its ``dataset.json``, manifests and episode
metadata as the remote has them, and for each shard a sparse placeholder of the recorded size and mtime, so
the store's loader takes the manifest lines for the shards without reading any (nothing is fetched to
open); the folder is removed with the last Dataset (or view) of it, and the next opening removes those
of processes that died. The reader's opening hook (``open_dataset_at(before_open=...)``) then fetches a
shard the first time a read opens it. Where the remote holds the shard's block list (blocks.py; uploads
write one), the shard is read in place block by block: the placeholder is filled with the blocks each
read touches, each checked against its SHA-256 before it is read (ranged_reads.py), so a batch of sampled
rows costs the blocks holding them, not their shards. Otherwise the shard is fetched whole, checked against its manifest line's
size and SHA-256, kept in a content-addressed ``blobs/`` folder shared by every session and linked over
its placeholder. When the bytes this session fetched pass ``cache_bytes``, the least recently opened
shards are dropped and their placeholders put back (a file the reader still holds open stays readable
until it closes it). A shard read block by block holds its file open; beyond ``default_max_open_files()``
of them (a share of the process's file-descriptor limit) the least recently opened ones let go of their
files but keep their blocks, which the next read of that shard takes up again. A shard read block by block
that is dropped gives up its background fill at once: a range the fill has under way is not written, so
nothing the cache no longer counts is fetched for it unless a read that still holds the file open asks
for it.

Meanwhile (``prefetch=True``, the default) a background thread fetches the rest of the block-listed
shards in large ranged reads, each block checked the same way, as long as the cache has room for a shard's
remainder: a training job samples from the first batch on, and reads at local speed once the copy is
complete. It stops once no Dataset uses the cache any more. Copies of the cache in other processes
(DataLoader workers) do not prefetch.

A shard whose manifest line cannot stand in for it (one with reset-option or episode-metadata tables,
which the line does not hold) is fetched when the dataset is opened, since loading reads it.

``Dataset.verify`` and transforms that read shard files directly need a downloaded dataset.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vcollect.remote.blocks import BLOCK_BYTES, BLOCKS_DIR, BlockHashes, blocks_name
from vcollect.remote.layout import ManifestLine, RemoteManifest, check_remote_id, dataset_json
from vcollect.remote.location import Remote, open_remote, remote_errors
from vcollect.remote.ranged_reads import RangedShard
from vcollect.remote.transfer import NoProgress, fetch_object, read_optional
from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR, check_dataset_info
from vcollect.store.layout.episode_metadata import EPISODE_METADATA_FILE
from vcollect.store.layout.manifest import MANIFEST_DIR, read_manifest
from vcollect.store.layout.staging import process_alive
from vcollect.store.read.reader import Dataset, default_max_open_files, open_dataset_at
from vcollect.store.read.shards.shard_census import line_stands_in

__all__ = [
    "CACHE_ENV",
    "DEFAULT_CACHE_BYTES",
    "ClosedShard",
    "ReadsInFlight",
    "ShardCache",
    "cache_root",
    "open_in_place",
    "split_dataset_url",
]

#: Environment variable naming the cache folder of datasets read in place.
CACHE_ENV = "VCOLLECT_CACHE"
#: Most bytes of fetched shards one dataset read in place keeps (least recently opened removed first).
DEFAULT_CACHE_BYTES = 2 << 30
#: The most bytes of block lists fetched all at once when a dataset is first read (about a 4 GB dataset's).
_LISTS_AT_ONCE_BYTES = 4 << 20
#: Bytes the background fetch asks for in one ranged read (GCS), or where the remote's fresh fetches are
#: whole-object downloads (S3, file://: a request there may cost the server the whole object).
_PREFETCH_BYTES = 4 << 20
_PREFETCH_STREAMED_BYTES = 64 << 20
#: The longest the background fetch waits for reads' fetches to finish before it asks for its next range.
_YIELD_SECONDS = 1.0
_SESSIONS = "sessions"
_BLOBS = "blobs"


def cache_root() -> Path:
    """The cache folder: ``$VCOLLECT_CACHE``, else ``~/.cache/vcollect/remote``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path("~/.cache/vcollect/remote").expanduser()


def split_dataset_url(url: str) -> tuple[str, str]:
    """``scheme://bucket/prefix/.../name-vN`` -> (the remote's URL, the dataset's id ``name-vN`` below it)."""
    head, _, name = url.rstrip("/").rpartition("/")
    if "://" not in head or not head.split("://", 1)[1]:
        head = url.rstrip("/")  # a bare bucket: not a dataset
        name = ""
    check_remote_id(name)
    return head, name


def _placeholder(path: Path, size: int, mtime_ns: int | None) -> None:
    """A sparse file of ``size`` bytes at ``path`` (written aside and renamed in), with ``mtime_ns``."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "wb") as f:
        f.truncate(size)
    if mtime_ns is not None:
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
    os.replace(tmp, path)


class ReadsInFlight:
    """The reads fetching blocks now: the background fill waits for none to be under way (at most
    ``_YIELD_SECONDS`` at a time) before it asks for its next range."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._reading = 0

    def begin(self, background: bool) -> None:
        """A fetch starts: a read's is counted; the background fill's waits for the reads under way first."""
        with self._condition:
            if background:
                self._condition.wait_for(lambda: self._reading == 0, timeout=_YIELD_SECONDS)
            else:
                self._reading += 1

    def end(self, background: bool) -> None:
        """A fetch ended (a read's: the background fill may go on once none is left)."""
        if not background:
            with self._condition:
                self._reading -= 1
                self._condition.notify_all()


def _account_fetched(ref: weakref.ref[ShardCache], name: str, added: int) -> None:
    """A RangedShard's ``on_fetched``: the cache's accounting, while the cache is still in use."""
    cache = ref()
    if cache is not None:
        cache._fetched(name, added)


@dataclass(frozen=True)
class ClosedShard:
    """A shard read block by block whose RangedShard let go of its file (over the open-file bound): the blocks
    already in its placeholder and checked, taken up by the next RangedShard of the same file."""

    blocks: BlockHashes
    present: np.ndarray
    held_bytes: int
    file_id: tuple[int, int]


class ShardCache:
    """The opening hook of a dataset read in place: fetches a shard when the reader first opens it, and keeps
    at most ``capacity_bytes`` of this session's fetched shards (least recently opened removed first).

    Picklable (torch DataLoader workers): the filesystem is made again from the URL in the other process.
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None,
        dataset_id: str,
        folder: Path,
        blobs: Path,
        lines: dict[str, ManifestLine],
        capacity_bytes: int,
        prefetch: bool = False,
    ) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        self.dataset_id = dataset_id
        self.folder = folder
        self.blobs = blobs
        self.lines = lines
        self.capacity_bytes = capacity_bytes
        self.prefetch = prefetch
        self._setup()

    def _setup(self) -> None:
        self._remote: Remote | None = None
        self._lock = threading.RLock()
        # shard -> its size when fetched whole, its RangedShard when read block by block, or its ClosedShard
        # when that let go of its file; least recently opened first
        self._held: OrderedDict[str, int | RangedShard | ClosedShard] = OrderedDict()
        #: The most RangedShards (each holding its file open) kept at once.
        self.max_open_ranged = default_max_open_files()
        self.fetched_bytes = 0
        self._filler: threading.Thread | None = None
        self._reads = ReadsInFlight()  # reads fetching now, for the background fill to wait on
        self._no_list: set[str] = set()  # shards the remote holds no usable block list for
        self._lists: dict[str, BlockHashes | None] | None = None  # fetched all at once for smaller datasets
        #: What stopped the background fetch, if anything did (reads fetch what they need themselves).
        self.prefetch_error: BaseException | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_remote", "_lock", "_held", "fetched_bytes", "_filler", "_no_list", "_lists", "prefetch_error",
                    "_reads"):
            state.pop(key, None)
        state["prefetch"] = False  # one process fetches ahead, not every DataLoader worker
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    @property
    def remote(self) -> Remote:
        """The remote (its filesystem made on first use)."""
        if self._remote is None:
            base = self.url
            self._remote = open_remote(base, storage_options=self.storage_options)
        return self._remote

    def held_bytes(self) -> int:
        """Bytes of fetched shards (whole, or the blocks read of them) this session keeps now."""
        return sum(held if isinstance(held, int) else held.held_bytes for held in self._held.values())

    def open_ranged(self) -> int:
        """How many of the shards kept are read block by block through a RangedShard holding its file open."""
        return sum(isinstance(held, RangedShard) for held in self._held.values())

    def __call__(self, path: Path) -> RangedShard | None:
        """Get the shard file at ``path`` ready to read: None when it holds its bytes (fetched whole and
        checked when it did not yet), or the RangedShard to read it through block by block."""
        line = self.lines.get(path.name)
        if line is None:
            return None
        with self._lock:
            held = self._held.get(path.name)
            if isinstance(held, ClosedShard):
                self._held.move_to_end(path.name)
                return self._ranged(path.name, held.blocks, held)
            if held is not None:
                self._held.move_to_end(path.name)
                return None if isinstance(held, int) else held
            blocks = None if path.name in self._no_list else self._block_list(line)
            if blocks is not None:
                ranged = self._ranged(path.name, blocks)
                self._start_prefetch()
                return ranged
            self._no_list.add(path.name)
            blob = self.blobs / line.sha256
            if not blob.exists():
                self.fetched_bytes += fetch_object(
                    self.remote, self.remote.path(self.dataset_id, SHARDS_DIR, line.shard), blob, size=line.size,
                    sha256=line.sha256, progress=NoProgress(), what=f"shard {line.shard} of {self.dataset_id!r}",
                )
            if line.mtime_ns is not None:
                os.utime(blob, ns=(line.mtime_ns, line.mtime_ns))
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
            os.link(blob, tmp)
            os.replace(tmp, path)
            self._held[path.name] = line.size
            self._evict(keep=path.name)
            return None

    def _ranged(self, name: str, blocks: BlockHashes, closed: ClosedShard | None = None) -> RangedShard:
        """The RangedShard of shard ``name``, made and held (under the lock), taking up the blocks of ``closed``
        where its placeholder is still the same file; then at most ``max_open_ranged`` of them stay open."""
        line = self.lines[name]
        path = self.folder / SHARDS_DIR / name
        what = f"shard {line.shard} of {self.dataset_id!r}"
        on_fetched = functools.partial(_account_fetched, weakref.ref(self), name)
        present = None if closed is None else closed.present
        ranged = RangedShard(path, blocks, self._fetcher(line), what, on_fetched=on_fetched, present=present)
        if closed is not None and ranged.file_id != closed.file_id:  # put back meanwhile (by another process):
            ranged = RangedShard(path, blocks, self._fetcher(line), what, on_fetched=on_fetched)  # none of its blocks
        self._held[name] = ranged
        self._close_ranged(keep=name)
        return ranged

    def _close_ranged(self, keep: str) -> None:
        """Let the least recently opened RangedShards (but ``keep``'s) go of their files until at most
        ``max_open_ranged`` hold one; their blocks stay (ClosedShard). A reader still holding one reads on."""
        extra = self.open_ranged() - self.max_open_ranged
        for name, held in list(self._held.items()):
            if extra <= 0:
                break
            if name == keep or not isinstance(held, RangedShard):
                continue
            present, present_size = held.snapshot()
            held.retire()
            self._held[name] = ClosedShard(held.blocks, present, present_size, held.file_id)
            extra -= 1

    def _start_prefetch(self) -> None:
        if self.prefetch and self._filler is None:
            self._filler = threading.Thread(target=_prefetch_while_used, args=(weakref.ref(self),),
                                            name=f"vcollect-prefetch-{self.dataset_id}", daemon=True)
            self._filler.start()

    def _prefetch_shard(self, name: str) -> bool:
        """Get shard ``name`` ready for the background fetch: whether a RangedShard of it is held now (made here
        when the shard is block-listed and its remainder fits the cache)."""
        with self._lock:
            held = self._held.get(name)
            if isinstance(held, ClosedShard):
                if held.held_bytes == held.blocks.size:
                    return False  # all its blocks are here
                held = self._ranged(name, held.blocks, held)
            fits = self.held_bytes() + self.lines[name].size <= self.capacity_bytes
            if held is None and (name in self._no_list or not fits):
                return False
        if held is None:
            blocks = self._block_list(self.lines[name])  # fetched without the lock: reads go on
            with self._lock:
                held = self._held.get(name)
                if held is None:
                    if blocks is None:
                        self._no_list.add(name)
                        return False
                    held = self._ranged(name, blocks)
        return isinstance(held, RangedShard)

    def _prefetch_range(self, name: str) -> bool:
        """Fetch one range of shard ``name``'s missing blocks in the background; False when there is nothing
        (more) to fetch for it: complete, no longer held block by block, or its remainder past the cache's room."""
        with self._lock:
            held = self._held.get(name)
            if not isinstance(held, RangedShard) or not held.missing_bytes or (
                    self.held_bytes() + held.missing_bytes > self.capacity_bytes):
                return False
        # fewer, larger requests where a server may read the whole object for each one
        held.fill_some(_PREFETCH_STREAMED_BYTES if self.remote.streamed_fetches else _PREFETCH_BYTES)
        return True

    def wait_for_prefetch(self, timeout: float) -> bool:
        """Wait until the background fetch has finished (it started with the first read).

        Args:
            timeout: The most seconds to wait.

        Returns:
            Whether it has finished (True also when none was started).
        """
        filler = self._filler
        if filler is not None:
            filler.join(timeout)
            return not filler.is_alive()
        return True

    def _block_list(self, line: ManifestLine) -> BlockHashes | None:
        """The shard's block list from the remote; None where there is none, or one that is not this shard's
        (its size or whole SHA-256 differs from the manifest line's): the shard is then fetched whole.

        The first call fetches every shard's list in one concurrent batch when they are small in all (a
        dataset of a few GB), so a first batch touching every shard waits for one round trip, not one per
        shard; larger datasets fetch each list when its shard is first read."""
        if self._lists is None:
            self._lists = {}
            listed_bytes = sum(line.size for line in self.lines.values()) // BLOCK_BYTES * 65
            if listed_bytes <= _LISTS_AT_ONCE_BYTES:
                paths = {self._list_path(name): name for name in self.lines}
                with remote_errors(self.remote, f"reading the block lists of {self.dataset_id!r}"):
                    found = self.remote.fs.cat(list(paths), on_error="omit")
                for path, name in paths.items():
                    data = found.get(path)
                    self._lists[name] = None if data is None else self._parse(self.lines[name], data)
        if line.shard in self._lists:
            return self._lists[line.shard]
        data = read_optional(self.remote, self._list_path(line.shard),
                             f"reading shard {line.shard} of {self.dataset_id!r}")
        return None if data is None else self._parse(line, data)

    def _list_path(self, shard: str) -> str:
        return self.remote.path(self.dataset_id, BLOCKS_DIR, blocks_name(shard))

    @staticmethod
    def _parse(line: ManifestLine, data: bytes) -> BlockHashes | None:
        try:
            blocks = BlockHashes.decode(data)
        except ValueError:
            return None
        return blocks if (blocks.size, blocks.sha256) == (line.size, line.sha256) else None

    def _fetcher(self, line: ManifestLine) -> Callable[[list[int], list[int], bool], list[bytes]]:
        """Ranged reads of the shard's remote object, one request at a time per calling thread (reads of
        several shards run on a few threads: a handful of requests in flight; more made the GCS emulator here
        20x slower per request). The background fill waits while reads are fetching (at most
        ``_YIELD_SECONDS`` at a time), so a read never queues behind it for long. The reads hold no reference
        to the cache (nor do the RangedShards they serve), so the cache goes with the last Dataset using it."""
        remote, reads = self.remote, self._reads
        path = remote.path(self.dataset_id, SHARDS_DIR, line.shard)
        what = f"reading shard {line.shard} of {self.dataset_id!r}"

        def fetch(starts: list[int], stops: list[int], background: bool) -> list[bytes]:
            reads.begin(background)
            try:
                with remote_errors(remote, what):
                    return list(remote.fs.cat_ranges([path] * len(starts), starts, stops, on_error="raise",
                                                      batch_size=1))
            finally:
                reads.end(background)

        return fetch

    def _fetched(self, name: str, added: int) -> None:
        """Account for ``added`` bytes of blocks the shard ``name`` read, and keep within the capacity."""
        with self._lock:
            self.fetched_bytes += added
            if name in self._held:
                self._held.move_to_end(name)
                self._evict(keep=name)

    def _evict(self, keep: str) -> None:
        while self.held_bytes() > self.capacity_bytes and len(self._held) > 1:
            name, _ = next(iter(self._held.items()))
            if name == keep:
                self._held.move_to_end(name)
                continue
            held = self._held.pop(name)
            line = self.lines[name]
            _placeholder(self.folder / SHARDS_DIR / name, line.size, line.mtime_ns)
            if isinstance(held, int):
                with contextlib.suppress(FileNotFoundError):
                    (self.blobs / line.sha256).unlink()
            elif isinstance(held, RangedShard):  # its background fill stops, a range under way included; reads
                held.retire()  # of a reader holding it go on


def _prefetch_while_used(ref: weakref.ref[ShardCache]) -> None:
    """The background fetch: the block-listed shards' missing blocks, shard by shard, while the cache has room
    for them. It holds the cache for one range at a time, so it ends once no Dataset uses the cache any more
    (and the cache's session folder goes with it); an error is kept in ``prefetch_error`` (reads fetch what
    they need themselves)."""
    cache = ref()
    names = [] if cache is None else sorted(cache.lines)
    del cache
    try:
        for name in names:
            more = _while_used(ref, ShardCache._prefetch_shard, name)
            while more:
                more = _while_used(ref, ShardCache._prefetch_range, name)
            if ref() is None:
                return
    except Exception as exc:  # noqa: BLE001 - kept for the caller to see; reads fetch what they need
        cache = ref()
        if cache is not None:
            cache.prefetch_error = exc


def _while_used(ref: weakref.ref[ShardCache], step: Callable[[ShardCache, str], bool], name: str) -> bool:
    """``step(cache, name)`` while a Dataset still uses the cache, holding it for that call only; False once
    none does."""
    cache = ref()
    return cache is not None and step(cache, name)


def _remove_session(session: Path, owner: int) -> None:
    """Remove the session folder ``session`` in the process ``owner`` that made it (a forked child's copy of its
    cache leaves it alone)."""
    if os.getpid() == owner:
        shutil.rmtree(session, ignore_errors=True)


def _clean_sessions(sessions: Path) -> None:
    """Remove the session folders of processes that are gone."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(sessions):
            pid = entry.name.split("-", 1)[0]
            if pid.isdigit() and not process_alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)


def open_in_place(
    remote_url: str,
    dataset_id: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    prefetch: bool = True,
    **options: Any,
) -> Dataset:
    """Open the dataset ``dataset_id`` of ``remote_url`` without downloading it (see the module's docstring);
    ``prefetch=False`` fetches only what reads touch.

    Raises:
        RemoteDatasetNotFoundError: The remote holds no such dataset.
        CorruptDatasetError: Its dataset.json is malformed.
        RemoteIntegrityError: A shard fetched while reading differs from its manifest line.
        UnknownRemoteError, BucketNotFoundError, RemoteAccessError, RemoteTransferError: the remote's faults.
    """
    from vcollect.remote.download import not_found, remote_info

    check_remote_id(dataset_id)
    if cache_bytes < 1:
        raise ValueError(f"cache_bytes must be >= 1, got {cache_bytes}")
    remote = open_remote(remote_url, storage_options=storage_options)
    info_bytes, _ = remote_info(remote, dataset_id)
    if info_bytes is None:
        raise not_found(remote, dataset_id)
    where = f"{remote.url.rstrip('/')}/{dataset_id}/{DATASET_FILE}"
    check_dataset_info(dataset_json(info_bytes, where), where)
    with remote_errors(remote, f"opening {dataset_id!r}"):
        manifest = RemoteManifest.read(remote, dataset_id)
    episode_meta = read_optional(remote, remote.path(dataset_id, EPISODE_METADATA_FILE), f"opening {dataset_id!r}")
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    key = hashlib.sha256(f"{remote.url}|{dataset_id}".encode()).hexdigest()[:16]
    blobs = root / _BLOBS
    blobs.mkdir(parents=True, exist_ok=True)
    sessions = root / _SESSIONS
    sessions.mkdir(parents=True, exist_ok=True)
    _clean_sessions(sessions)
    session = sessions / f"{os.getpid()}-{uuid.uuid4().hex[:8]}-{key}"
    try:
        folder = session / dataset_id.rsplit("/", 1)[-1]
        (folder / SHARDS_DIR).mkdir(parents=True)
        (folder / MANIFEST_DIR).mkdir()
        (folder / DATASET_FILE).write_bytes(info_bytes)
        if episode_meta is not None:
            (folder / EPISODE_METADATA_FILE).write_bytes(episode_meta)
        for writer_file, written in manifest.files.items():
            if written and "/" not in writer_file and not writer_file.startswith("."):
                (folder / MANIFEST_DIR / writer_file).write_bytes(b"".join(line.raw for line in written))
        lines = manifest.by_shard
        for line in lines.values():
            _placeholder(folder / SHARDS_DIR / line.shard, line.size, line.mtime_ns)
        cache = ShardCache(remote.url, storage_options, dataset_id, folder, blobs, lines, cache_bytes, prefetch)
        # the session's folder goes with the last Dataset (or view) of it, not with the process: a program that
        # opens datasets in place again and again keeps one session's fetched bytes, not every one's
        weakref.finalize(cache, _remove_session, session, os.getpid())
        local = read_manifest(folder)
        for name in sorted(lines):  # shards whose line cannot stand in for them are read when loading: fetched now
            entry = local.by_shard.get(name)
            if entry is None or not line_stands_in(entry, name in local.intact):
                cache(folder / SHARDS_DIR / name)
        return open_dataset_at(folder, folder.name, session, before_open=cache, **options)
    except BaseException:
        shutil.rmtree(session, ignore_errors=True)
        raise
