"""Downloading a remote dataset: fetched beside the root, each shard checked, published all at once.

The shards the remote's manifests name are fetched into the dataset's resume folder, under the root's hidden
``.downloads`` folder and outside every namespace (so a download that stops leaves nothing that keeps a
namespace from being deleted; it keeps what it got there, and the next download resumes from it; what no
running download holds and nothing touched for a day is removed by the next download into the root:
vcollect.remote.resume), each checked against its manifest line's size and SHA-256 and given the line's
mtime, so the line stands in for the shard when the dataset is loaded. Shards the local copy already holds
with the same SHA-256 are linked, not fetched again. The dataset is then assembled in a staging folder and put in place with
the store's own replace (store/layout/dataset_dir.py): a reader sees the old dataset or the whole new one,
never a part. A local copy holding shards the remote lacks is not replaced without ``force_download``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vcollect.errors import BucketNotFoundError, DatasetExistsError, RemoteDatasetNotFoundError
from vcollect.remote.layout import (
    MINARI_DATA_DIR,
    MINARI_METADATA,
    ManifestLine,
    RemoteManifest,
    check_remote_id,
    dataset_json,
    namespace_file,
    parse_manifest_lines,
)
from vcollect.remote.location import Remote, bucket_exists, remote_errors
from vcollect.remote.resume import held_resume, remove_stale_resumes, resume_dir
from vcollect.remote.transfer import NoProgress, TransferProgress, fetch_object, read_object, read_optional
from vcollect.remote.upload import TransferReport
from vcollect.store.layout.containment import check_contained
from vcollect.store.layout.dataset_dir import replace_dataset_dir
from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR, check_dataset_info, write_json_atomic
from vcollect.store.layout.episode_metadata import EPISODE_METADATA_FILE
from vcollect.store.layout.manifest import MANIFEST_DIR, file_sha256
from vcollect.store.layout.namespaces import NAMESPACE_METADATA_FILE, namespace_hierarchy
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.layout.staging import discard_staging, fsync_tree, new_staging_dir

__all__ = ["FETCH_THREADS", "copy_remote_namespaces", "download_to", "not_found", "remote_info"]

#: Shards fetched at once (the client libraries' own calls are thread-safe; their I/O overlaps).
FETCH_THREADS = 4
_WRITER_FILE = re.compile(r"[-\w][-\w.]*\.jsonl")


def _identity(final: Path) -> tuple[int, int] | None:
    """The device and inode of the dataset folder at ``final`` (None: no dataset there), as the store's
    replace compares them."""
    if not (final / DATASET_FILE).exists():
        return None
    st = os.stat(final)
    return st.st_dev, st.st_ino


def _local_lines(final: Path) -> dict[str, ManifestLine]:
    out: dict[str, ManifestLine] = {}
    folder = final / MANIFEST_DIR
    if not folder.is_dir():
        return out
    for file in sorted(folder.iterdir()):
        if file.name.endswith(".jsonl") and file.is_file():
            for line in parse_manifest_lines(file.read_bytes()):
                out.setdefault(line.shard, line)
    return out


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def remote_info(remote: Remote, dataset_id: str) -> tuple[bytes | None, bool]:
    """(the remote ``dataset.json``'s bytes or None, whether the id is there in Minari's layout instead)."""
    try:
        return read_object(remote, remote.path(dataset_id, DATASET_FILE), f"downloading {dataset_id!r}"), False
    except FileNotFoundError:
        pass
    with remote_errors(remote, f"downloading {dataset_id!r}"):
        minari = remote.fs.exists(remote.path(dataset_id, MINARI_DATA_DIR, MINARI_METADATA))
    if not minari and not bucket_exists(remote):
        raise BucketNotFoundError(
            f"downloading {dataset_id!r}: the bucket {remote.bucket!r} of remote {remote.url!r} does not exist"
        )
    return None, bool(minari)


def not_found(remote: Remote, dataset_id: str) -> RemoteDatasetNotFoundError:
    """The error of an id the remote does not hold."""
    return RemoteDatasetNotFoundError(
        f"no dataset {dataset_id!r} on remote {remote.url!r}; 'vcollect list remote' shows what it holds"
    )


def download_to(
    remote: Remote,
    dataset_id: str,
    root: str | os.PathLike[str] | None,
    *,
    info_bytes: bytes,
    force_download: bool = False,
    progress: TransferProgress | None = None,
) -> TransferReport:
    """Download the vcollect dataset ``dataset_id`` (its ``dataset.json`` already read: ``info_bytes``) from
    ``remote`` into ``root`` (see the module's docstring).

    Raises:
        DatasetExistsError: The local dataset holds shards the remote lacks (without ``force_download``).
        RemoteIntegrityError: A remote shard differs from its manifest line (nothing published).
        CorruptDatasetError: The remote ``dataset.json`` is malformed.
        RemoteTransferError, RemoteAccessError: The remote's faults (what was fetched is kept for a resume).
    """
    progress = progress or NoProgress()
    check_remote_id(dataset_id)
    where = f"{remote.url.rstrip('/')}/{dataset_id}/{DATASET_FILE}"
    info = dataset_json(info_bytes, where)
    check_dataset_info(info, where)
    root_path = resolve_root(root)
    final = dataset_path(dataset_id, root_path)
    check_contained(final, root_path, action="download a dataset to")
    with remote_errors(remote, f"downloading {dataset_id!r}"):
        manifest = RemoteManifest.read(remote, dataset_id)
    episode_meta = read_optional(remote, remote.path(dataset_id, EPISODE_METADATA_FILE), f"downloading {dataset_id!r}")
    wanted = manifest.by_shard
    seen = _identity(final)
    local = {} if seen is None else _local_lines(final)
    report = TransferReport(dataset_id)
    if seen is not None and not force_download:
        extra = sorted(set(local) - set(wanted))
        if extra:
            raise DatasetExistsError(
                f"local dataset {dataset_id!r} holds {len(extra)} shard(s) remote {remote.url!r} lacks (e.g. "
                f"{extra[0]}); upload them first, or pass force_download=True to replace it with the remote's"
            )
        same_info = (final / DATASET_FILE).read_bytes() == info_bytes
        if same_info and all(local.get(s) is not None and local[s].sha256 == line.sha256 for s, line in wanted.items()):
            report.shards_kept = len(wanted)
            return report  # up to date
    resume = resume_dir(final, root_path)
    check_contained(resume, root_path, action="download a dataset to")
    remove_stale_resumes(root_path)
    with held_resume(resume) as hold:  # a clean-up by another download leaves it alone while this one runs
        sources = _gather_shards(remote, dataset_id, wanted, local, final, resume, force_download, progress, report)
        copy_remote_namespaces(remote, dataset_id, root_path)
        _publish(sources, manifest, episode_meta, info_bytes, final, root_path, dataset_id, seen)
        report.files += 1
        hold.remove(root_path)  # unless another download of the dataset still uses it
    return report


def _gather_shards(
    remote: Remote, dataset_id: str, wanted: dict[str, ManifestLine], local: dict[str, ManifestLine],
    final: Path, resume: Path, force_download: bool, progress: TransferProgress, report: TransferReport,
) -> dict[str, Path]:
    """Where each wanted shard is whole on disk: the local dataset's own copy, a whole one an earlier download
    left in ``resume``, or fetched into ``resume`` now (counted in ``report``)."""
    sources: dict[str, Path] = {}
    fetching: list[ManifestLine] = []
    for shard, line in wanted.items():
        mine = local.get(shard)
        own = final / SHARDS_DIR / shard
        if not force_download and mine is not None and mine.sha256 == line.sha256 and _size(own) == line.size:
            sources[shard] = own
            report.shards_kept += 1
        elif _size(resume / shard) == line.size and file_sha256(resume / shard) == line.sha256:
            sources[shard] = resume / shard  # whole from an earlier download (checked again: it was not fsynced)
        else:
            fetching.append(line)
    progress.add_total(len(fetching), sum(line.size for line in fetching))
    if not fetching:
        return sources
    with ThreadPoolExecutor(min(FETCH_THREADS, len(fetching)), thread_name_prefix="vcollect-fetch") as pool:
        futures = [pool.submit(_fetch, remote, dataset_id, line, resume, progress) for line in fetching]
        try:
            for line, future in zip(fetching, futures, strict=True):
                report.bytes += future.result()
                sources[line.shard] = resume / line.shard
                report.files += 1
                report.shards += 1
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return sources


def _publish(
    sources: dict[str, Path], manifest: RemoteManifest, episode_meta: bytes | None, info_bytes: bytes,
    final: Path, root: Path, dataset_id: str, seen: tuple[int, int] | None,
) -> None:
    """Assemble the dataset in a staging folder (shards linked from ``sources``, the remote's manifests, episode
    metadata and ``dataset.json``) and put it in place of the one at ``final`` (``seen``: its identity then)."""
    staging = new_staging_dir(final, root)
    try:
        (staging / SHARDS_DIR).mkdir()
        (staging / MANIFEST_DIR).mkdir()
        for shard, source in sources.items():
            _link(source, staging / SHARDS_DIR / shard)
        for name, lines in manifest.files.items():
            if _WRITER_FILE.fullmatch(name) and lines:
                (staging / MANIFEST_DIR / name).write_bytes(b"".join(line.raw for line in lines))
        if episode_meta is not None:
            (staging / EPISODE_METADATA_FILE).write_bytes(episode_meta)
        (staging / DATASET_FILE).write_bytes(info_bytes)
        fsync_tree(staging)
        replace_dataset_dir(staging, final, dataset_id, seen)
    except BaseException:
        discard_staging(staging, root)
        raise


def _fetch(remote: Remote, dataset_id: str, line: ManifestLine, resume: Path, progress: TransferProgress) -> int:
    """Fetch one shard into the resume folder, checked and given its recorded mtime; returns the bytes fetched."""
    target = resume / line.shard
    fetched = fetch_object(
        remote, remote.path(dataset_id, SHARDS_DIR, line.shard), target, size=line.size, sha256=line.sha256,
        progress=progress, what=f"shard {line.shard} of {dataset_id!r}",
    )
    if line.mtime_ns is not None:
        os.utime(target, ns=(line.mtime_ns, line.mtime_ns))
    progress.file_done()
    return fetched


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def copy_remote_namespaces(remote: Remote, dataset_id: str, root: Path) -> None:
    """Give each level of the dataset's namespace that has no ``namespace_metadata.json`` here the remote's."""
    for level in namespace_hierarchy(parse_dataset_id(dataset_id)[0]):
        target = root.joinpath(*level.split("/")) / NAMESPACE_METADATA_FILE
        if target.exists():
            continue
        data = read_optional(remote, remote.path(namespace_file(level)), f"downloading {dataset_id!r}")
        if data is None:
            continue
        try:
            metadata = json.loads(data)
        except ValueError:
            continue
        if not isinstance(metadata, dict):
            continue
        check_contained(target, root, action="download a namespace to")
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            write_json_atomic(target, metadata, exclusive=True)

