"""A dataset directory's layout and its ``dataset.json``: format version, spaces, env specs, metadata.

``dataset.json`` is the one mutable file of a dataset; it is always replaced whole through a temporary
file (write, fsync, rename), so a reader sees the old or the new description, never half of one.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

from vcollect.durable import TMP_SUFFIX, folder_lock, fsync_dir
from vcollect.errors import CorruptDatasetError, DatasetNotFoundError, DiskFullError, MetadataKeyError
from vcollect.spaces import space_from_dict, space_to_dict
from vcollect.store.layout.schema import json_default, to_json
from vcollect.store.layout.shard_format import SHARD_SUFFIX

__all__ = [
    "DATASET_FILE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PROTECTED_METADATA_KEYS",
    "SHARDS_DIR",
    "check_dataset_info",
    "check_metadata_update",
    "dataset_files",
    "dataset_spaces",
    "env_spec_json",
    "new_dataset_info",
    "MAX_SIDE_FILE_BYTES",
    "read_dataset_info",
    "read_json_object",
    "read_side_file",
    "update_dataset_info",
    "write_json_atomic",
]

FORMAT_NAME = "vcollect-dataset"
FORMAT_VERSION = 1
DATASET_FILE = "dataset.json"
SHARDS_DIR = "shards"


#: Metadata keys ``Dataset.update_metadata`` refuses: Minari's (id, spaces, env spec, data format, JPEG
#: encoding, Minari version), plus what vcollect computes or keeps outside the metadata (format, version,
#: creation time, totals, size). ``eval_env_spec`` may change, as in Minari.
PROTECTED_METADATA_KEYS = frozenset(
    {
        "dataset_id",
        "observation_space",
        "action_space",
        "env_spec",
        "data_format",
        "jpeg_encoding",
        "minari_version",
        "format",
        "format_version",
        "created_at",
        "total_episodes",
        "total_steps",
        "dataset_size",
    }
)


def check_metadata_update(metadata: Any) -> dict[str, Any]:
    """``metadata`` checked for ``Dataset.update_metadata``: a dict without protected keys, sets as sorted
    lists (Minari keeps authors as sets), JSON values. MetadataKeyError / TypeError / ValueError otherwise."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
    refused = sorted(str(k) for k in metadata if k in PROTECTED_METADATA_KEYS)
    if refused:
        raise MetadataKeyError(
            f"metadata keys {refused} may not be updated: ids, spaces, the env spec, the format and the totals "
            "describe the stored data (write a new dataset to change them)"
        )
    bad = [k for k in metadata if not isinstance(k, str)]
    if bad:
        raise MetadataKeyError(f"metadata keys must be strings, got {bad!r}")
    out = {k: (sorted(v, key=str) if isinstance(v, (set, frozenset)) else v) for k, v in metadata.items()}
    return json.loads(to_json(out, "metadata"))  # type: ignore[no-any-return]


def write_json_atomic(path: Path, obj: Mapping[str, Any], *, exclusive: bool = False) -> None:
    """Write JSON to ``path`` through a unique temporary file: write, fsync, rename (or link when exclusive).

    With ``exclusive`` the final name is created with ``os.link`` so that of two concurrent creators
    exactly one succeeds; the other gets FileExistsError.
    """
    text = json.dumps(obj, indent=2, default=json_default)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)  # atomic "create if absent": exactly one of two racing creators wins
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: best effort
                if path.exists():
                    raise FileExistsError(path) from None
                os.replace(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)


#: The most a dataset's JSON side file may hold (dataset.json, namespace and episode metadata).
MAX_SIDE_FILE_BYTES = 64 * 1024 * 1024


def read_side_file(file: Path, limit: int = MAX_SIDE_FILE_BYTES, *, follow_links: bool = True) -> bytes:
    """The bytes of one of a dataset's small files, read so that nothing there can hang or exhaust a reader.

    Args:
        file: The file.
        limit: The most bytes it may hold.
        follow_links: Follow a symbolic link to a regular file (False: a link is not a regular file).

    Returns:
        Its content.

    Raises:
        FileNotFoundError: There is no such file.
        CorruptDatasetError: It is not a regular file (a FIFO, a device such as /dev/zero, a folder) or larger
            than ``limit``; the message names it.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)  # a FIFO opens at once
    try:
        fd = os.open(file, flags)
    except IsADirectoryError:
        raise CorruptDatasetError(f"{file} is a folder, not a file") from None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise CorruptDatasetError(f"{file} is a symbolic link, not a file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CorruptDatasetError(f"{file} is not a regular file (a FIFO, device, socket or folder)")
        if info.st_size > limit:
            raise CorruptDatasetError(
                f"{file} is {info.st_size} bytes, more than the {limit} such a file may hold; restore it or "
                "remove the oversized entry"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise CorruptDatasetError(f"{file} grew past {limit} bytes while it was read")
    return data


def read_json_object(file: Path) -> dict[str, Any] | None:
    """The JSON object in ``file`` (None when there is no such file); CorruptDatasetError naming the file when
    it is not a regular file of UTF-8 JSON holding an object, is too large or nested too deeply. The one
    reader of vcollect's small JSON side files."""
    try:
        value = json.loads(read_side_file(file).decode("utf-8"))
    except FileNotFoundError:
        return None
    except RecursionError:
        raise CorruptDatasetError(f"{file} is nested too deeply to be read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptDatasetError(f"{file} is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CorruptDatasetError(f"{file} must hold a JSON object, got {type(value).__name__}")
    return value


def dataset_files(path: Path) -> tuple[list[Path], list[Path]]:
    """(committed shards sorted by name, temporary files) of a dataset directory.

    Only regular files (or links to them) count: a FIFO, socket, device or directory named like a shard
    is ignored, so that opening it can never block or fail a reader.
    """
    shards_dir = path / SHARDS_DIR
    committed: list[Path] = []
    temporary = sorted(p for p in path.iterdir() if p.name.endswith(TMP_SUFFIX)) if path.is_dir() else []
    if shards_dir.is_dir():
        with os.scandir(shards_dir) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name.endswith(TMP_SUFFIX):
                    temporary.append(shards_dir / entry.name)
                elif entry.name.endswith(SHARD_SUFFIX) and _is_regular_file(entry):
                    committed.append(shards_dir / entry.name)
    return committed, temporary


#: How a DatasetNotFoundError tells Python callers where else to look (the CLI says its flag instead).
ROOT_HINT = "pass root= or set $VCOLLECT_DATASETS_PATH, and see list_datasets(root) for what exists"


def _is_regular_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()  # follows links; no stat call where the directory listing tells
    except OSError:  # vanished meanwhile
        return False


def read_dataset_info(path: Path, dataset_id: str, root: Path) -> dict[str, Any]:
    """Read and check ``dataset.json`` of the dataset directory ``path``.

    Raises DatasetNotFoundError (naming the id and the root searched) when it is missing, and
    CorruptDatasetError naming the file and what is wrong when it is not UTF-8 JSON, of another format or
    malformed (see :func:`check_dataset_info`). Other OSErrors (too many open files, ...) pass unchanged.
    """
    file = path / DATASET_FILE
    try:
        data = read_side_file(file)
    except FileNotFoundError:
        raise DatasetNotFoundError(
            f"no dataset {dataset_id!r} under root {str(root)!r} (looked for {str(file)!r}); {ROOT_HINT}"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptDatasetError(f"{file} is not UTF-8 text: {exc}") from exc
    try:
        info = json.loads(text)
    except RecursionError:
        raise CorruptDatasetError(f"{file} is nested too deeply to be a dataset description") from None
    except ValueError as exc:
        raise CorruptDatasetError(f"{file} is not valid JSON: {exc}") from exc
    check_dataset_info(info, file)
    return info  # type: ignore[no-any-return]


def check_dataset_info(info: Any, file: Path | str) -> None:
    """Check a parsed ``dataset.json``: format and integer version, spaces, env specs, metadata.

    Raises CorruptDatasetError naming ``file`` and the first thing wrong.
    """
    if not isinstance(info, dict) or info.get("format") != FORMAT_NAME:
        raise CorruptDatasetError(f"{file} is not a vcollect dataset description (format != {FORMAT_NAME!r})")
    version = info.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CorruptDatasetError(f"{file}: format_version must be an integer >= 1, got {version!r}")
    if version > FORMAT_VERSION:
        raise CorruptDatasetError(
            f"{file} has format version {version}, newer than this vcollect understands ({FORMAT_VERSION}); "
            "upgrade vcollect"
        )
    for key in ("observation_space", "action_space"):
        if key not in info:
            raise CorruptDatasetError(f"{file}: {key} is missing")
        try:
            space_from_dict(info[key])
        except RecursionError:
            raise CorruptDatasetError(f"{file}: {key} is nested too deeply") from None
        except Exception as exc:
            raise CorruptDatasetError(f"{file}: {key} is malformed: {type(exc).__name__}: {exc}") from exc
    for key in ("env_spec", "eval_env_spec"):
        value = info.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise CorruptDatasetError(f"{file}: {key} must be a JSON string or null, got {type(value).__name__}")
        try:
            gym.envs.registration.EnvSpec.from_json(value)
        except RecursionError:
            raise CorruptDatasetError(f"{file}: {key} is nested too deeply") from None
        except Exception as exc:
            raise CorruptDatasetError(f"{file}: {key} is not a gymnasium env spec: {type(exc).__name__}: {exc}") from exc
    if not isinstance(info.get("metadata", {}), dict):
        raise CorruptDatasetError(f"{file}: metadata must be an object, got {type(info['metadata']).__name__}")
    _check_frame_stack(info, file)
    for key in ("dataset_id", "created_at"):
        value = info.get(key)
        if value is not None and not isinstance(value, str):
            raise CorruptDatasetError(f"{file}: {key} must be a string, got {type(value).__name__}")


def _check_frame_stack(info: dict[str, Any], file: Path | str) -> None:
    """CorruptDatasetError unless ``frame_stack`` is absent, null, or ``{"k": int >= 2, "padding": "reset" |
    "zero"}`` (padding optional) with a Box observation space of k frames on its first axis."""
    value = info.get("frame_stack")
    if value is None:
        return
    if not isinstance(value, dict) or set(value) - {"k", "padding"}:
        raise CorruptDatasetError(f"{file}: frame_stack must be an object with k and padding, got {value!r}")
    k, padding = value.get("k"), value.get("padding", "reset")
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise CorruptDatasetError(f"{file}: frame_stack k must be an integer >= 2, got {k!r}")
    if padding not in ("reset", "zero"):
        raise CorruptDatasetError(f"{file}: frame_stack padding must be 'reset' or 'zero', got {padding!r}")
    space = space_from_dict(info["observation_space"])
    if not isinstance(space, gym.spaces.Box) or len(space.shape) < 2 or space.shape[0] != k:
        raise CorruptDatasetError(
            f"{file}: frame_stack k={k} does not fit the observation space {space} (a Box of k frames on its "
            "first axis)"
        )


def env_spec_json(env_spec: Any, what: str) -> str | None:
    """A gymnasium EnvSpec (or its JSON string, checked) as the JSON stored for ``recover_environment``."""
    if env_spec is None:
        return None
    if isinstance(env_spec, str):
        json.loads(env_spec)
        return env_spec
    if isinstance(env_spec, gym.envs.registration.EnvSpec):
        try:
            return env_spec.to_json()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what} {env_spec.id!r} cannot be saved as JSON: {exc}; pass {what}=None") from exc
    raise TypeError(f"{what} must be a gymnasium EnvSpec, its JSON string or None, got {type(env_spec).__name__}")


def new_dataset_info(
    dataset_id: str,
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    *,
    env_spec: Any = None,
    eval_env_spec: Any = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``dataset.json`` content of a new dataset (ValueError/TypeError for what cannot be stored)."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "dataset_id": dataset_id,
        "observation_space": space_to_dict(observation_space),
        "action_space": space_to_dict(action_space),
        "env_spec": env_spec_json(env_spec, "env_spec"),
        "eval_env_spec": env_spec_json(eval_env_spec, "eval_env_spec"),
        "metadata": json.loads(to_json(dict(metadata or {}), "metadata")),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    }


def dataset_spaces(info: Mapping[str, Any]) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The (observation, action) spaces a ``dataset.json`` describes."""
    return space_from_dict(info["observation_space"]), space_from_dict(info["action_space"])


def update_dataset_info(
    path: Path,
    dataset_id: str,
    root: Path,
    *,
    metadata: Mapping[str, Any] | None = None,
    env_spec: Any = None,
    eval_env_spec: Any = None,
    new_id: str | None = None,
) -> None:
    """Rewrite ``dataset.json`` atomically: merge ``metadata`` in, set the (eval) env spec or the dataset id.

    None leaves a field as it is. Updates hold a lock on the dataset folder from read to rename, so
    concurrent updates of different keys all land.
    """
    with folder_lock(path):
        _update_dataset_info(path, dataset_id, root, metadata, env_spec, eval_env_spec, new_id)


def _update_dataset_info(
    path: Path,
    dataset_id: str,
    root: Path,
    metadata: Mapping[str, Any] | None,
    env_spec: Any,
    eval_env_spec: Any,
    new_id: str | None,
) -> None:
    info = read_dataset_info(path, dataset_id, root)
    if metadata:
        info["metadata"] = {**info.get("metadata", {}), **json.loads(to_json(dict(metadata), "metadata"))}
    if env_spec is not None:
        info["env_spec"] = env_spec_json(env_spec, "env_spec")
    if eval_env_spec is not None:
        info["eval_env_spec"] = env_spec_json(eval_env_spec, "eval_env_spec")
    if new_id is not None:
        info["dataset_id"] = new_id
    try:
        write_json_atomic(path / DATASET_FILE, info)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise DiskFullError(
            f"no space left on device while updating {str(path / DATASET_FILE)!r} of dataset {dataset_id!r}; "
            "it is unchanged (free space and update again)"
        ) from exc
