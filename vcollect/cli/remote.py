"""The remote commands: ``list remote``, ``download`` and ``upload`` (with ``--remote URL`` or ``$VCOLLECT_REMOTE``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from vcollect.cli.datasets import datasets_table, run_list
from vcollect.cli.exits import EXIT_OK, CommandParser, UsageError
from vcollect.cli.output import human_size

__all__ = ["BarProgress", "add_remote_parsers", "run_download", "run_list_any", "run_upload"]

_REMOTE_HELP = "the remote: s3://bucket/prefix, gs://bucket, gcp://bucket or file:///path (default: $VCOLLECT_REMOTE)"


class BarProgress:
    """Two tqdm bars on stderr: bytes moved and files moved (a TransferProgress)."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self.bytes: Any = None
        self.files: Any = None

    def add_total(self, files: int, nbytes: int) -> None:
        """More work announced (the bars appear with the first work)."""
        if self.bytes is None:
            from tqdm import tqdm

            off = not self.enabled or not files
            self.bytes = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, desc=f"{self.label} bytes",
                              disable=off, file=sys.stderr, leave=False)
            self.files = tqdm(total=0, unit="file", desc=f"{self.label} files", disable=off, file=sys.stderr,
                              leave=False)
        self.files.total = (self.files.total or 0) + files
        self.bytes.total = (self.bytes.total or 0) + nbytes
        self.files.refresh()
        self.bytes.refresh()

    def advance(self, nbytes: int) -> None:
        """Bytes moved."""
        if self.bytes is not None:
            self.bytes.update(nbytes)

    def file_done(self) -> None:
        """A file moved whole."""
        if self.files is not None:
            self.files.update(1)

    def close(self) -> None:
        """Take the bars down."""
        for bar in (self.bytes, self.files):
            if bar is not None:
                bar.close()


def add_remote_parsers(commands: argparse._SubParsersAction[CommandParser], *, root_help: str) -> None:
    """Add ``download`` and ``upload`` to ``commands``, and ``list remote`` to its ``list`` command."""
    list_cmd = commands.choices["list"]
    list_cmd.add_argument("where", nargs="?", choices=["remote"], default=None,
                          help="'remote': the datasets on the remote instead of the local ones")
    list_cmd.add_argument("--remote", default=None, metavar="URL", help=_REMOTE_HELP)
    list_cmd.add_argument("--namespace", default=None, metavar="NS", help="only the datasets of this namespace")
    list_cmd.add_argument("--anonymous", action="store_true", help="read a public bucket without credentials")
    list_cmd.set_defaults(handler=run_list_any)

    download = commands.add_parser(
        "download", help="fetch datasets from a remote (only what is new; every shard checked)",
        description="Fetch datasets from a remote into the datasets root: each shard checked against its "
        "manifest (size and SHA-256), only shards not held locally fetched, the dataset published whole; an "
        "interrupted download resumes when run again. Datasets in Minari's remote layout are imported.",
    )
    _add_transfer_arguments(download, "every dataset of this namespace on the remote", root_help)
    download.add_argument("--force-download", action="store_true",
                          help="fetch every shard again and replace the local dataset, also one holding shards the remote lacks")
    download.add_argument("--anonymous", action="store_true", help="read a public bucket without credentials")
    download.set_defaults(handler=run_download)

    upload = commands.add_parser(
        "upload", help="send datasets to a remote (only the shards it lacks; metadata last)",
        description="Send datasets to a remote: only committed shards the remote lacks, then the metadata "
        "(a reader never sees metadata naming a missing shard); an interrupted upload resumes when run again. "
        "--format minari writes Minari's remote layout (what `minari download` reads).",
    )
    _add_transfer_arguments(upload, "every local dataset of this namespace", root_help)
    upload.add_argument("--format", choices=["vcollect", "minari"], default="vcollect",
                        help="the remote layout (default: vcollect; minari: Minari's, every file sent each time)")
    upload.set_defaults(handler=run_upload)


def _add_transfer_arguments(command: argparse.ArgumentParser, namespace_help: str, root_help: str) -> None:
    """The arguments ``download`` and ``upload`` share: the ids or a namespace, the remote, bars, the root."""
    command.add_argument("dataset_ids", metavar="ID", nargs="*")
    command.add_argument("--namespace", default=None, metavar="NS", help=namespace_help)
    command.add_argument("--remote", default=None, metavar="URL", help=_REMOTE_HELP)
    command.add_argument("--no-progress", action="store_true", help="do not show the progress bars")
    command.add_argument("--root", default=None, metavar="DIR", help=root_help)


def _prefix(namespace: str | None) -> str | None:
    if namespace is None:
        return None
    from vcollect.store.layout.namespaces import validate_namespace

    validate_namespace(namespace)
    return namespace.strip("/") + "/"


def run_list_any(args: argparse.Namespace, console: Console) -> int:
    """``vcollect list [remote]``."""
    if args.where != "remote":
        if args.remote is not None or args.namespace is not None or args.anonymous:
            raise UsageError("--remote, --namespace and --anonymous apply to 'vcollect list remote'")
        return run_list(args, console)
    from vcollect.remote import list_remote_datasets, open_remote

    url = open_remote(args.remote).url
    datasets = list_remote_datasets(url, _prefix(args.namespace), anonymous=args.anonymous)
    if not datasets:
        console.print(Text(f"no datasets on {url}"))
        return EXIT_OK
    notes: list[str] = []
    console.print(datasets_table(f"datasets on {url}", datasets, notes))
    for note in notes:
        console.print(Text(f"note: {note}"), soft_wrap=True)
    return EXIT_OK


def _ids(args: argparse.Namespace, listed: dict[str, Any]) -> list[str]:
    ids = list(args.dataset_ids)
    prefix = _prefix(args.namespace)
    if prefix is not None:
        ids += [i for i in listed if i.startswith(prefix) and i not in ids]
    if not ids:
        raise UsageError("name the datasets (ID [ID ...]) or a --namespace")
    return ids


def run_download(args: argparse.Namespace, console: Console) -> int:
    """``vcollect download ID [ID ...]``."""
    from vcollect.remote import download_dataset, list_remote_datasets, open_remote

    url = open_remote(args.remote).url
    ids = _ids(args, list_remote_datasets(url, anonymous=args.anonymous) if args.namespace else {})
    for dataset_id in ids:
        bar = BarProgress(f"download {dataset_id}", not args.no_progress)
        try:
            report = download_dataset(dataset_id, url, args.force_download, root=args.root, progress=bar,
                                      anonymous=args.anonymous)
        finally:
            bar.close()
        console.print(Text(f"{dataset_id}: {report.shards} shard(s) fetched ({human_size(report.bytes)}), "
                           f"{report.shards_kept} already here"))
    return EXIT_OK


def run_upload(args: argparse.Namespace, console: Console) -> int:
    """``vcollect upload ID [ID ...]``."""
    from vcollect.remote import open_remote, upload_dataset
    from vcollect.store import list_datasets

    url = open_remote(args.remote).url
    ids = _ids(args, list_datasets(args.root) if args.namespace else {})
    for dataset_id in ids:
        bar = BarProgress(f"upload {dataset_id}", not args.no_progress)
        try:
            report = upload_dataset(dataset_id, url, root=args.root, format=args.format, progress=bar)
        finally:
            bar.close()
        console.print(Text(f"{dataset_id}: {report.files} file(s) sent ({human_size(report.bytes)}), "
                           f"{report.shards_kept} shard(s) already on the remote"))
    return EXIT_OK
