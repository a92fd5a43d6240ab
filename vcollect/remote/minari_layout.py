"""Minari's remote layout both ways: a dataset uploaded as Minari's client downloads it, and a Minari dataset
on a remote downloaded into a vcollect dataset.

Minari keeps a dataset on a remote as its local files: ``<id>/data/main_data.hdf5`` (or its Arrow/Parquet
folders) and ``<id>/data/metadata.json``, with ``<namespace>/namespace_metadata.json`` beside. An upload
writes the dataset with :func:`~vcollect.minari.export_minari` into a temporary Minari root and sends its
files, ``metadata.json`` last (Minari's client lists datasets by that file). A download fetches them into a
hidden folder under the datasets root and imports them with :func:`~vcollect.minari.import_minari`, which
publishes the new dataset with one rename. Minari's layout records no checksums, so these files are checked
only by the import's reading them whole.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from vcollect.errors import DatasetNotFoundError
from vcollect.minari.interop import export_minari, import_minari
from vcollect.remote.layout import MINARI_DATA_DIR, MINARI_METADATA, check_remote_id
from vcollect.remote.location import Remote, remote_errors
from vcollect.remote.transfer import NoProgress, TransferProgress, get_file, put_file
from vcollect.remote.upload import TransferReport
from vcollect.store.layout.containment import check_contained
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.naming import dataset_path, resolve_root

__all__ = ["download_minari", "upload_minari"]


def upload_minari(
    remote: Remote, dataset_id: str, root: str | os.PathLike[str] | None, progress: TransferProgress | None = None
) -> TransferReport:
    """Upload the local dataset ``dataset_id`` to ``remote`` in Minari's layout, under the same id.

    Raises:
        DatasetNotFoundError: No such local dataset.
        BucketNotFoundError, RemoteAccessError, RemoteTransferError: The remote's faults.
    """
    progress = progress or NoProgress()
    check_remote_id(dataset_id)
    if not (dataset_path(dataset_id, root) / DATASET_FILE).exists():
        raise DatasetNotFoundError(
            f"no dataset {dataset_id!r} under {str(resolve_root(root))!r} to upload; 'vcollect list' shows what exists"
        )
    report = TransferReport(dataset_id)
    with tempfile.TemporaryDirectory(prefix="vcollect-minari-") as tmp:
        export_minari(dataset_id, dataset_id, minari_root=tmp, root=root)
        files = sorted(p for p in Path(tmp).rglob("*") if p.is_file())
        last = Path(tmp).joinpath(*dataset_id.split("/"), MINARI_DATA_DIR, MINARI_METADATA)
        files = [p for p in files if p != last] + [last]  # Minari finds datasets by their metadata.json
        progress.add_total(len(files), sum(p.stat().st_size for p in files))
        for file in files:
            rel = file.relative_to(tmp).as_posix()
            put_file(remote, file, remote.path(rel), progress, f"uploading {rel} of {dataset_id!r}")
            progress.file_done()
            report.files += 1
            report.bytes += file.stat().st_size
    return report


def download_minari(
    remote: Remote,
    dataset_id: str,
    root: str | os.PathLike[str] | None,
    *,
    force_download: bool = False,
    progress: TransferProgress | None = None,
) -> TransferReport:
    """Download the Minari dataset ``dataset_id`` from ``remote`` and import it as the vcollect dataset of the
    same id; a local dataset of that id is kept as it is unless ``force_download`` (then replaced).

    Raises:
        DatasetError: The files are not a Minari dataset vcollect reads (import_minari's errors).
        BucketNotFoundError, RemoteAccessError, RemoteTransferError: The remote's faults.
    """
    progress = progress or NoProgress()
    check_remote_id(dataset_id)
    report = TransferReport(dataset_id)
    root_path = resolve_root(root)
    if (dataset_path(dataset_id, root_path) / DATASET_FILE).exists() and not force_download:
        return report
    folder = remote.path(dataset_id, MINARI_DATA_DIR)
    with remote_errors(remote, f"downloading {dataset_id!r}"):
        remote.fs.invalidate_cache(folder)
        objects = {str(p): int(info.get("size") or 0) for p, info in remote.fs.find(folder, detail=True).items()}
    progress.add_total(len(objects), sum(objects.values()))
    root_path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".vcollect-minari-", dir=root_path) as tmp:
        data_dir = Path(tmp).joinpath(*dataset_id.split("/"), MINARI_DATA_DIR)
        for path in sorted(objects):
            rel = path[len(folder) + 1:]
            if not rel or any(part in ("", ".", "..") for part in rel.split("/")):
                continue
            local = check_contained(data_dir / rel, Path(tmp), action="download a file to")
            local.parent.mkdir(parents=True, exist_ok=True)
            report.bytes += get_file(remote, path, local, progress, f"downloading {rel} of {dataset_id!r}")
            progress.file_done()
            report.files += 1
        import_minari(data_dir, dataset_id, root_path, overwrite=force_download)
    return report
