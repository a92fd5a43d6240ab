"""Dataset ids (Minari's ``namespace/name-vN`` grammar) and where datasets live on disk."""

from __future__ import annotations

import os
import re
from pathlib import Path

from vcollect.errors import InvalidDatasetIdError

__all__ = [
    "DATASETS_PATH_ENV",
    "DEFAULT_ROOT",
    "dataset_path",
    "is_dataset_id",
    "locate_dataset",
    "parse_dataset_id",
    "resolve_root",
]

#: Environment variable naming the datasets root when no ``root=`` is given.
DATASETS_PATH_ENV = "VCOLLECT_DATASETS_PATH"
#: Root used when neither ``root=`` nor ``$VCOLLECT_DATASETS_PATH`` is set.
DEFAULT_ROOT = Path("~") / ".vcollect" / "datasets"

# Minari 0.5's grammar: an optional (possibly nested) namespace, a name, and a required version.
# Unlike Minari, a one-character namespace is fine and empty path parts ("a//b") are not.
_DATASET_ID_RE = re.compile(r"^(?:(?P<namespace>[-_\w]+(?:/[-_\w]+)*)/)?(?P<name>[-_\w]+?)-v(?P<version>\d+)$")
#: Longest folder name (in UTF-8 bytes) common filesystems allow: each part of an id names one folder.
MAX_PART_BYTES = 255
#: Longest id (in UTF-8 bytes): keeps a dataset's file paths well under the usual 4096-byte path limit,
#: and its version under Python's limit on the digits of an int.
MAX_ID_BYTES = 1024
# How much of an overlong or malformed id an error message quotes.
_QUOTED_CHARS = 80


def _quoted(dataset_id: str) -> str:
    """``dataset_id`` for an error message: its repr, cut short (saying how long it is) when it is long."""
    if len(dataset_id) <= _QUOTED_CHARS:
        return repr(dataset_id)
    return f"{dataset_id[:_QUOTED_CHARS]!r}... ({len(dataset_id):,} characters)"


def parse_dataset_id(dataset_id: str) -> tuple[str | None, str, int]:
    """Split a dataset id ``namespace/name-vN`` into its parts.

    Follows Minari's grammar (the namespace is optional and may be nested, ``a/b/name-v0``) and
    rejects anything that could escape the datasets root (empty path parts) or that no filesystem can
    hold (a part over MAX_PART_BYTES, an id over MAX_ID_BYTES).

    Args:
        dataset_id: The id to parse.

    Returns:
        (namespace or None, name, version).

    Raises:
        InvalidDatasetIdError: ``dataset_id`` is not a str, is malformed, or is too long.
    """
    if not isinstance(dataset_id, str):
        raise InvalidDatasetIdError(f"a dataset id must be a str like 'namespace/name-v0', got {dataset_id!r}")
    # length first: a character is at least one byte, and the grammar need not scan a huge string
    if len(dataset_id) > MAX_ID_BYTES:
        raise InvalidDatasetIdError(f"dataset id {_quoted(dataset_id)} is too long: at most {MAX_ID_BYTES} bytes")
    match = _DATASET_ID_RE.fullmatch(dataset_id)
    if match is None:
        raise InvalidDatasetIdError(
            f"malformed dataset id {_quoted(dataset_id)}: ids look like 'namespace/name-vN' (letters, digits, '-', "
            "'_'; the namespace is optional and may be nested, the version N is required), e.g. 'cartpole/random-v0'"
        )
    if len(dataset_id.encode("utf-8")) > MAX_ID_BYTES:
        raise InvalidDatasetIdError(f"dataset id {_quoted(dataset_id)} is too long: at most {MAX_ID_BYTES} bytes")
    for part in dataset_id.split("/"):
        if len(part.encode("utf-8")) > MAX_PART_BYTES:
            raise InvalidDatasetIdError(
                f"dataset id {_quoted(dataset_id)} has a part of {len(part.encode('utf-8')):,} bytes; "
                f"each part names a folder, of at most {MAX_PART_BYTES} bytes"
            )
    namespace = match.group("namespace")
    return namespace, match.group("name"), int(match.group("version"))


def resolve_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The datasets root: ``root`` if given, else ``$VCOLLECT_DATASETS_PATH``, else ``~/.vcollect/datasets``.

    Args:
        root: The root asked for, or None for the default.

    Returns:
        The root, with ``~`` expanded.
    """
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(DATASETS_PATH_ENV)
    if env:
        return Path(env).expanduser()
    return DEFAULT_ROOT.expanduser()


def dataset_path(dataset_id: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Directory of a dataset: ``<root>/<namespace>/<name>-vN`` (the id is validated first).

    Args:
        dataset_id: The dataset's id.
        root: The datasets root (None: :func:`resolve_root`'s default).

    Returns:
        The directory (it need not exist).

    Raises:
        InvalidDatasetIdError: ``dataset_id`` is malformed.
    """
    parse_dataset_id(dataset_id)
    return resolve_root(root).joinpath(*dataset_id.split("/"))


def is_dataset_id(text: object) -> bool:
    """Whether ``text`` is a str that :func:`parse_dataset_id` accepts."""
    try:
        parse_dataset_id(text)  # type: ignore[arg-type]
    except InvalidDatasetIdError:
        return False
    return True


def locate_dataset(
    dataset: str | os.PathLike[str], root: str | os.PathLike[str] | None = None, *, str_paths: bool = True
) -> tuple[str, Path, Path]:
    """Where a dataset named by an id, or by the path of its folder, lies: ``(name, root, folder)``.

    The rule that keeps ids and paths apart: a str that reads as a dataset id (``namespace/name-vN``) is an id,
    looked up under ``root``, even when a folder of that relative path exists; an ``os.PathLike`` (a
    ``pathlib.Path``) is always the path of the dataset's folder; with ``str_paths``, a str that is not an id
    and names an existing folder is a path too (``"./runs/cartpole-v0"`` or an absolute path is never an id).
    A dataset given by its folder is a dataset of its own under that folder's parent: its name is the folder's
    name and the parent is the root every rename or deletion of it is held to.

    Args:
        dataset: A dataset id, or the path of a dataset's folder.
        root: The datasets root of an id (default: ``$VCOLLECT_DATASETS_PATH`` or ``~/.vcollect/datasets``);
            must be None for a path.
        str_paths: Whether a str that is not an id may name a folder (reading); False: only an
            ``os.PathLike`` is a path (writing, where a mistyped id must never become a new folder).

    Returns:
        The dataset's name (its id, or its folder's name), its root, and its folder.

    Raises:
        InvalidDatasetIdError: ``dataset`` is neither an id nor (as the rule allows) a path; the message says how
            ids look and how to pass a path.
        ValueError: ``root`` is given with a path.
    """
    if isinstance(dataset, str) and is_dataset_id(dataset):
        return dataset, resolve_root(root), dataset_path(dataset, root)
    if isinstance(dataset, str) and not (str_paths and dataset and os.path.isdir(os.path.expanduser(dataset))):
        try:
            parse_dataset_id(dataset)
        except InvalidDatasetIdError as exc:
            where = "nor a dataset folder that exists; " if str_paths else "; "
            raise InvalidDatasetIdError(f"{exc}; {_quoted(dataset)} is no dataset id {where}pass a pathlib.Path "
                                        "to name a dataset's folder") from None
    if not isinstance(dataset, (str, os.PathLike)):
        parse_dataset_id(dataset)  # a str-like error naming what was given
    if root is not None:
        raise ValueError(
            f"root= applies to dataset ids; {str(os.fspath(dataset))!r} is the path of a dataset's folder, which "
            "names its place itself (pass the path alone)"
        )
    folder = Path(os.path.abspath(Path(os.fspath(dataset)).expanduser()))
    if not folder.name:
        raise InvalidDatasetIdError(f"{str(folder)!r} cannot be a dataset's folder: pass a folder below it")
    return folder.name, folder.parent, folder
