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
