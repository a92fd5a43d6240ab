"""Remote URLs resolved to a filesystem: ``s3://bucket/prefix``, ``gs://`` / ``gcp://bucket/prefix``, ``file:///path``.

Every remote is reached through fsspec (s3fs for S3 and S3-compatible stores, gcsfs for Google Cloud
Storage, fsspec's own local filesystem for ``file://``), so uploads, downloads and listings are written once
against one API. Credentials come from each provider's standard chain, never from vcollect: for S3 the
``AWS_*`` environment variables, ``AWS_PROFILE`` and the shared config files (``AWS_ENDPOINT_URL`` for
MinIO, R2, Ceph or a local server); for GCS the application-default credentials, or the emulator named by
``STORAGE_EMULATOR_HOST``. ``anonymous=True`` reads a public bucket without credentials.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from vcollect.errors import (
    BucketNotFoundError,
    DiskFullError,
    RemoteAccessError,
    RemoteError,
    RemoteTransferError,
    RemoteUnavailableError,
    UnknownRemoteError,
)

__all__ = ["REMOTE_ENV", "SCHEMES", "Remote", "bucket_exists", "open_remote", "remote_errors"]

#: Environment variable naming the remote when no ``remote=`` is given.
REMOTE_ENV = "VCOLLECT_REMOTE"
#: URL scheme -> the fsspec protocol that reaches it.
SCHEMES = {"s3": "s3", "gs": "gcs", "gcp": "gcs", "file": "file"}
_INSTALL = "pip install 'vcollect[remote]'"


@dataclass
class Remote:
    """A remote resolved: its filesystem, and the folder (bucket and prefix) datasets lie under.

    Attributes:
        url: The URL as given (``s3://bucket/prefix``).
        protocol: ``s3``, ``gcs`` or ``file``.
        bucket: The bucket (for ``file://``, the folder).
        base: Where datasets lie on the filesystem (``bucket/prefix``, no trailing slash).
        fs: The fsspec filesystem.
    """

    url: str
    protocol: str
    bucket: str
    base: str
    fs: Any = field(repr=False)

    def path(self, *parts: str) -> str:
        """The filesystem path of ``parts`` (each a relative path with ``/``) below the base."""
        return "/".join([self.base, *(p.strip("/") for p in parts if p)])

    def relative(self, path: str) -> str:
        """``path`` (one the filesystem listed) relative to the base."""
        path = path.rstrip("/")
        prefix = self.base + "/"
        return path[len(prefix):] if path.startswith(prefix) else path

    @property
    def atomic_puts(self) -> bool:
        """Whether an object written appears whole or not at all (object stores); a ``file://`` remote writes
        to a temporary name and renames instead."""
        return self.protocol != "file"

    @property
    def streamed_fetches(self) -> bool:
        """Whether a fresh fetch is the client's own download of the whole object in one streamed response
        rather than ranged reads: gcsfs's ranged reads cost this machine less CPU than its download, while an
        S3 server may read the whole object for each ranged GET (moto's does), and a ``file://`` copy is the
        kernel's."""
        return self.protocol != "gcs"


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RemoteUnavailableError(
            f"remote datasets need the package {exc.name or module!r}, which is not installed: {_INSTALL}"
        ) from None


#: Filesystems made, by what made them (a client costs a session and its connection pool to build).
_MADE: dict[tuple[Any, ...], Any] = {}
_SETTINGS = ("AWS_", "STORAGE_EMULATOR_HOST", "GOOGLE_", "GCLOUD_")


def _filesystem(protocol: str, options: Mapping[str, Any], anonymous: bool) -> Any:
    """The fsspec filesystem of ``protocol`` for these options and the providers' settings now (one per
    distinct combination, reused; its listing cache emptied)."""
    settings = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_SETTINGS)))
    key = (protocol, repr(sorted(options.items())), anonymous, settings)
    fs = _MADE.get(key)
    if fs is None:
        fs = _MADE[key] = _new_filesystem(protocol, options, anonymous)
    fs.invalidate_cache()
    return fs


def _new_filesystem(protocol: str, options: Mapping[str, Any], anonymous: bool) -> Any:
    """The fsspec filesystem of ``protocol``, configured from the providers' standard settings."""
    _import("fsspec")
    opts = dict(options)
    if protocol == "s3":
        s3fs = _import("s3fs")
        if anonymous:
            opts.setdefault("anon", True)
        profile = os.environ.get("AWS_PROFILE")
        if profile and "profile" not in opts:
            opts["profile"] = profile
        retries = opts.pop("retries", None)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        if retries is not None:  # s3fs's own retries of a failed request (a class setting, not an argument)
            fs.retries = int(retries)
        return fs
    if protocol == "gcs":
        _import("gcsfs")
        if anonymous:
            opts.setdefault("token", "anon")
        if os.environ.get("STORAGE_EMULATOR_HOST"):  # Google's own clients' switch to a local server
            # gcsfs's extended filesystem probes bucket types over gRPC, which emulators do not serve
            core = importlib.import_module("gcsfs.core")
            opts.setdefault("token", "anon")
            return core.GCSFileSystem(skip_instance_cache=True, **opts)
        return importlib.import_module("gcsfs").GCSFileSystem(skip_instance_cache=True, **opts)
    local = importlib.import_module("fsspec.implementations.local")
    return local.LocalFileSystem(**opts)


def open_remote(
    url: str | None = None, *, storage_options: Mapping[str, Any] | None = None, anonymous: bool = False
) -> Remote:
    """Resolve a remote URL (or ``$VCOLLECT_REMOTE``) to its filesystem.

    Args:
        url: ``s3://bucket[/prefix]``, ``gs://bucket[/prefix]`` (or ``gcp://``, Minari's spelling),
            ``file:///path``; None: ``$VCOLLECT_REMOTE``.
        storage_options: Passed to the fsspec filesystem (e.g. ``{"retries": 1}``); credentials belong in the
            providers' own settings, not here.
        anonymous: Read without credentials (a public bucket).

    Returns:
        The Remote.

    Raises:
        UnknownRemoteError: No URL given and ``$VCOLLECT_REMOTE`` unset, a malformed URL, or an unknown scheme.
        RemoteUnavailableError: The packages of ``vcollect[remote]`` are not installed.
    """
    if url is None:
        url = os.environ.get(REMOTE_ENV) or None
        if url is None:
            raise UnknownRemoteError(
                f"no remote given: pass remote='s3://bucket/prefix' (the CLI's --remote URL) or set ${REMOTE_ENV}"
            )
    if not isinstance(url, str) or "://" not in url:
        raise UnknownRemoteError(
            f"remote {url!r} is no URL: remotes look like s3://bucket/prefix, gs://bucket, gcp://bucket or file:///path"
        )
    scheme, rest = url.split("://", 1)
    protocol = SCHEMES.get(scheme.lower())
    if protocol is None:
        raise UnknownRemoteError(
            f"remote {url!r} has the unknown scheme {scheme!r}: vcollect reaches "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    if protocol == "file":
        base = os.path.abspath(os.path.expanduser(rest)).rstrip("/") or "/"
        bucket = base
    else:
        base = rest.strip("/")
        bucket = base.split("/", 1)[0]
        if not bucket or any(part in ("", ".", "..") for part in base.split("/")):
            raise UnknownRemoteError(f"remote {url!r} names no bucket, or has an empty, '.' or '..' part")
    fs = _filesystem(protocol, storage_options or {}, anonymous)
    return Remote(url=url, protocol=protocol, bucket=bucket, base=base, fs=fs)


def _credential_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError",
                         "RefreshError", "GoogleAuthError"})


def _connection_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return isinstance(exc, (ConnectionError, TimeoutError)) or bool(
        names & {"EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError",
                 "ClientConnectionError", "ClientPayloadError", "ServerDisconnectedError", "IncompleteReadError",
                 "ResponseStreamingError", "HttpError"}
    )


@contextlib.contextmanager
def remote_errors(remote: Remote, what: str, *, missing_is_bucket: bool = True) -> Iterator[None]:
    """Turn what the client libraries raise while doing ``what`` into vcollect's remote errors.

    A missing object stays FileNotFoundError (the caller knows what it looked for); a missing bucket is
    BucketNotFoundError (asked of the remote unless ``missing_is_bucket`` is False: the bucket is known); a refusal or missing credentials RemoteAccessError; a lost connection or a failing
    server RemoteTransferError (running it again resumes); this process out of file descriptors or memory
    stays the OSError it is.
    """
    try:
        yield
    except RemoteError:
        raise
    except FileNotFoundError as exc:
        if missing_is_bucket and not bucket_exists(remote):
            raise BucketNotFoundError(
                f"{what}: the bucket {remote.bucket!r} of remote {remote.url!r} does not exist"
            ) from None
        raise exc
    except PermissionError as exc:
        raise RemoteAccessError(
            f"{what}: remote {remote.url!r} refused access ({_first_line(exc)}); check the credentials its "
            "provider's standard settings give"
        ) from None
    except Exception as exc:
        if _credential_error(exc):
            raise RemoteAccessError(
                f"{what}: no credentials for remote {remote.url!r} ({_first_line(exc)}); set them as the provider "
                "documents (AWS_ACCESS_KEY_ID/AWS_PROFILE for S3, application-default credentials for GCS), or "
                "pass anonymous=True for a public bucket"
            ) from None
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            raise  # this process's or machine's own limits, not the remote's: running it again would not help
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise DiskFullError(f"{what}: this machine's disk refused the write, full or over a size limit ({exc}); "
                                "free space and run it again to resume") from None
        if _connection_error(exc) or isinstance(exc, OSError):
            raise RemoteTransferError(
                f"{what}: remote {remote.url!r} stopped answering ({type(exc).__name__}: {_first_line(exc)}); "
                "run it again to resume"
            ) from exc
        raise


def bucket_exists(remote: Remote) -> bool:
    """Whether the remote's bucket (or ``file://`` folder) exists; True when that cannot be told."""
    try:
        if remote.protocol == "file":
            return bool(remote.fs.isdir(remote.bucket))
        remote.fs.invalidate_cache(remote.bucket)
        return bool(remote.fs.exists(remote.bucket))
    except FileNotFoundError:
        return False
    except Exception:  # noqa: BLE001 - the original error is the one to report
        return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
