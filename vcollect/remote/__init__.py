"""Remote datasets: list, download and upload datasets on S3, GCS or a shared folder, by URL.

Remotes are named by URL (``s3://bucket/prefix``, ``gs://bucket``, ``gcp://bucket``, ``file:///path``) or by
``$VCOLLECT_REMOTE``, and reached through fsspec (the ``remote`` extra). Modules by job: ``location``
(URLs to filesystems, errors), ``layout`` (where a dataset lies on a remote), ``transfer`` (bytes moved,
resumed, checked), ``upload``, ``download``, ``listing``, ``minari_layout`` (Minari's remote layout), ``api``
(the functions below) and ``loading`` (``load_dataset(download=True)``).
"""

from __future__ import annotations

from vcollect.remote.api import FORMATS, download_dataset, list_remote_datasets, upload_dataset
from vcollect.remote.loading import load_dataset
from vcollect.remote.location import REMOTE_ENV, Remote, open_remote
from vcollect.remote.transfer import NoProgress, TransferProgress
from vcollect.remote.upload import TransferReport

__all__ = [
    "FORMATS",
    "REMOTE_ENV",
    "NoProgress",
    "Remote",
    "TransferProgress",
    "TransferReport",
    "download_dataset",
    "list_remote_datasets",
    "load_dataset",
    "open_remote",
    "upload_dataset",
]
