"""Namespaces with Minari 0.5's API and on-disk layout: folders of datasets marked by ``namespace_metadata.json``.

A namespace is the folder part of a dataset id (``cartpole`` in ``cartpole/random-v0``; nested ones like
``a/b`` too). As in Minari, each namespace folder may hold ``namespace_metadata.json`` (a JSON object:
``description`` and anything else), and creating one marks its parents with ``{}`` where unmarked.
Unlike Minari, a folder that holds datasets is a namespace even without the file (its metadata is ``{}``),
so datasets written by a collector into ``ns/...`` are listed under ``ns`` without a create call.
The file is replaced whole (write, fsync, rename): a reader sees the old or the new metadata.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from vcollect.errors import (
    CorruptDatasetError,
    InvalidDatasetIdError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
)
from vcollect.store.layout.dataset_info import DATASET_FILE, SHARDS_DIR, read_json_object, write_json_atomic
from vcollect.store.layout.naming import MAX_PART_BYTES, resolve_root
from vcollect.store.layout.schema import to_json
from vcollect.store.layout.staging import remove_stale_staging

__all__ = [
    "NAMESPACE_METADATA_FILE",
    "copy_namespace_metadata",
    "create_namespace",
    "delete_namespace",
    "get_namespace_metadata",
    "list_local_namespaces",
    "namespace_hierarchy",
    "root_above",
    "update_namespace",
    "update_namespace_metadata",
    "validate_namespace",
]

#: The file that marks a namespace folder and holds its metadata (Minari's name).
NAMESPACE_METADATA_FILE = "namespace_metadata.json"

_PART_RE = re.compile(r"[-_\w]+")
_VERSIONED_RE = re.compile(r".+-v\d+")


def validate_namespace(namespace: str) -> None:
    """Raise InvalidDatasetIdError unless ``namespace`` is ``part`` or ``part/part/...`` of letters, digits, -, _.

    A part may not look like a dataset name (``name-vN``): that folder would be a dataset, not a namespace.
    """
    if not isinstance(namespace, str):
        raise InvalidDatasetIdError(f"a namespace must be a str like 'cartpole' or 'team/cartpole', got {namespace!r}")
    parts = namespace.split("/")
    for part in parts:
        if not _PART_RE.fullmatch(part) or len(part.encode("utf-8")) > MAX_PART_BYTES:
            raise InvalidDatasetIdError(
                f"malformed namespace {namespace!r}: namespaces are '/'-separated parts of letters, digits, '-' "
                f"and '_' (each at most {MAX_PART_BYTES} bytes), e.g. 'cartpole' or 'team/cartpole'"
            )
        if _VERSIONED_RE.fullmatch(part):
            raise InvalidDatasetIdError(
                f"malformed namespace {namespace!r}: the part {part!r} looks like a dataset name (name-vN); "
                "pick a namespace without a -vN ending"
            )


def namespace_hierarchy(namespace: str | None) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b", "a/b/c"]``; [] for None."""
    if namespace is None:
        return []
    parts = namespace.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _folder(namespace: str, root: str | os.PathLike[str] | None) -> Path:
    validate_namespace(namespace)
    return resolve_root(root).joinpath(*namespace.split("/"))


def _is_dataset_dir(path: Path) -> bool:
    return (path / DATASET_FILE).exists()


def _walk(root: Path) -> Iterator[tuple[str, bool, bool]]:
    """(namespace, has metadata file, holds a dataset) for every non-hidden folder below ``root`` that is
    not a dataset (or inside one)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            path = Path(entry.path)
            if _is_dataset_dir(path) or path.name == SHARDS_DIR:
                continue
            has_file = (path / NAMESPACE_METADATA_FILE).is_file()
            holds_dataset = False
            with contextlib.suppress(OSError), os.scandir(path) as children:  # closed when any() stops early
                holds_dataset = any(_is_dataset_dir(Path(e.path)) for e in children if e.is_dir())
            yield path.relative_to(root).as_posix(), has_file, holds_dataset
            stack.append(path)


def list_local_namespaces(root: str | os.PathLike[str] | None = None) -> list[str]:
    """The namespaces under the root: folders with ``namespace_metadata.json``, folders that hold datasets,
    and their parents.

    Args:
        root: The datasets root (None: :func:`resolve_root`'s default).

    Returns:
        Their names, sorted (empty when the root does not exist).
    """
    root_path = resolve_root(root)
    found: set[str] = set()
    if not root_path.is_dir():
        return []
    for name, has_file, holds_dataset in _walk(root_path):
        try:
            validate_namespace(name)
        except InvalidDatasetIdError:
            continue
        if has_file or holds_dataset:
            found.update(namespace_hierarchy(name))
    return sorted(found)


def _read(file: Path) -> dict[str, Any]:
    value = read_json_object(file)
    return {} if value is None else value


def _metadata(description: str | None, extra: Mapping[str, Any], keep_none: bool) -> dict[str, Any]:
    metadata = dict(extra)
    if description is not None or keep_none:
        metadata["description"] = description
    return json.loads(to_json(metadata, "namespace metadata"))  # type: ignore[no-any-return]


def _mark_parents(namespace: str, root: str | os.PathLike[str] | None) -> None:
    for parent in namespace_hierarchy(namespace)[:-1]:
        folder = _folder(parent, root)
        folder.mkdir(parents=True, exist_ok=True)
        file = folder / NAMESPACE_METADATA_FILE
        if not file.exists():
            write_json_atomic(file, {})


def create_namespace(
    namespace: str, description: str | None = None, *, root: str | os.PathLike[str] | None = None, **kwargs: Any
) -> None:
    """Create a namespace with metadata ``{"description": ..., **kwargs}``; its parents get ``{}``.

    Args:
        namespace: The namespace, e.g. ``"atari"`` or ``"a/b"``.
        description: Its description (left out of the metadata when None).
        root: The datasets root (None: :func:`resolve_root`'s default).
        **kwargs: More metadata (JSON values).

    Raises:
        NamespaceExistsError: It exists (also implicitly, by holding datasets), or another process created
            it meanwhile.
        InvalidDatasetIdError: ``namespace`` is malformed.
        ValueError: The metadata is not JSON.
    """
    folder = _folder(namespace, root)
    metadata = _metadata(description, kwargs, keep_none=False)
    if namespace in list_local_namespaces(root):
        raise NamespaceExistsError(
            f"namespace {namespace!r} already exists under {str(resolve_root(root))!r}; "
            "use update_namespace to change its metadata"
        )
    folder.mkdir(parents=True, exist_ok=True)
    try:
        write_json_atomic(folder / NAMESPACE_METADATA_FILE, metadata, exclusive=True)
    except FileExistsError:
        raise NamespaceExistsError(f"namespace {namespace!r} was created meanwhile by another process") from None
    _mark_parents(namespace, root)


def _existing(namespace: str, root: str | os.PathLike[str] | None) -> Path:
    folder = _folder(namespace, root)
    if namespace not in list_local_namespaces(root):
        raise NamespaceNotFoundError(
            f"no namespace {namespace!r} under {str(resolve_root(root))!r}; create it with create_namespace, "
            f"or see list_local_namespaces() for those that exist"
        )
    return folder


def get_namespace_metadata(namespace: str, root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The metadata of a namespace.

    Args:
        namespace: The namespace.
        root: The datasets root (None: :func:`resolve_root`'s default).

    Returns:
        Its metadata (``{}`` for a namespace without a metadata file).

    Raises:
        NamespaceNotFoundError: It does not exist.
        InvalidDatasetIdError: ``namespace`` is malformed.
    """
    return _read(_existing(namespace, root) / NAMESPACE_METADATA_FILE)


def update_namespace(
    namespace: str, description: str | None = None, *, root: str | os.PathLike[str] | None = None, **kwargs: Any
) -> None:
    """Replace the metadata of an existing namespace with ``{"description": ..., **kwargs}`` (as Minari's
    ``update_namespace_metadata``: nothing old is kept).

    Args:
        namespace: The namespace.
        description: Its description (stored as null when None).
        root: The datasets root (None: :func:`resolve_root`'s default).
        **kwargs: More metadata (JSON values).

    Raises:
        NamespaceNotFoundError: It does not exist.
        InvalidDatasetIdError: ``namespace`` is malformed.
        ValueError: The metadata is not JSON.
    """
    folder = _existing(namespace, root)
    write_json_atomic(folder / NAMESPACE_METADATA_FILE, _metadata(description, kwargs, keep_none=True))
    _mark_parents(namespace, root)


#: Minari's name for :func:`update_namespace`.
update_namespace_metadata = update_namespace


def delete_namespace(namespace: str, root: str | os.PathLike[str] | None = None) -> None:
    """Delete an empty namespace (its folder and metadata file).

    A namespace that does not exist only warns (as Minari does). What crashed writers left in it is removed
    first, as every operation in a folder removes it (store/layout/staging.py: staging folders of processes
    that are dead, or untouched for an hour; a live writer's is kept, and refused below); an overwrite
    killed between its two renames gets its old dataset back, which then keeps the namespace.

    Args:
        namespace: The namespace.
        root: The datasets root (None: :func:`resolve_root`'s default).

    Raises:
        NamespaceNotEmptyError: It holds anything besides its metadata file (datasets, namespaces, other
            files); the message names what is there.
        InvalidDatasetIdError: ``namespace`` is malformed.
    """
    folder = _folder(namespace, root)
    if namespace not in list_local_namespaces(root):
        warnings.warn(f"namespace {namespace!r} does not exist under {str(resolve_root(root))!r}", UserWarning,
                      stacklevel=2)
        return
    remove_stale_staging(folder, resolve_root(root))
    others = sorted(name for name in os.listdir(folder) if name != NAMESPACE_METADATA_FILE)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise NamespaceNotEmptyError(
            f"namespace {namespace!r} at {str(folder)!r} is not empty (holds {shown}); delete its datasets and "
            "namespaces first"
        )
    (folder / NAMESPACE_METADATA_FILE).unlink(missing_ok=True)
    folder.rmdir()


def copy_namespace_metadata(
    source_root: Path, target_root: Path, namespace: str | None, *, mark_all: bool = True
) -> None:
    """Give every level of ``namespace`` under ``target_root`` that has no ``namespace_metadata.json`` the
    metadata the same namespace has under ``source_root``; existing files are kept.

    How exports to Minari (``mark_all``: levels without source metadata get ``{}``, as Minari marks every
    level) and imports from it (only non-empty metadata is copied: vcollect needs no markers) keep
    namespace metadata.
    """
    for level in namespace_hierarchy(namespace):
        parts = level.split("/")
        target = target_root.joinpath(*parts)
        file = target / NAMESPACE_METADATA_FILE
        if file.exists():
            continue
        try:
            metadata = _read(source_root.joinpath(*parts) / NAMESPACE_METADATA_FILE)
        except CorruptDatasetError:
            metadata = {}
        if not metadata and not mark_all:
            continue
        target.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # marked meanwhile by another process: theirs stays
            write_json_atomic(file, metadata, exclusive=True)


def root_above(dataset_dir: Path, dataset_id: object) -> Path | None:
    """The datasets root holding ``dataset_dir`` as ``dataset_id`` (its folders below the root spell the id);
    None when they do not."""
    if not isinstance(dataset_id, str) or not dataset_id:
        return None
    parts = dataset_id.split("/")
    if list(dataset_dir.parts[-len(parts):]) != parts:
        return None
    return dataset_dir.parents[len(parts) - 1]
