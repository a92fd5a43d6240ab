"""Minari interop: export a Dataset as a Minari 0.5 dataset, import a Minari dataset (hdf5, arrow, parquet).

Minari 0.5 layout (what ``minari.load_dataset`` reads)::

    <minari_root>/<namespace>/namespace_metadata.json     one per namespace level ("{}" when new)
    <minari_root>/<namespace>/<name>-vN/data/metadata.json
    <minari_root>/<namespace>/<name>-vN/data/main_data.hdf5              data_format "hdf5"
    <minari_root>/<namespace>/<name>-vN/data/<id>/part-0.{arrow,parquet}  data_format "arrow"/"parquet"

``metadata.json`` holds the serialized spaces (JSON strings), env spec, totals, dataset size in MB,
``dataset_id``, ``minari_version``, ``data_format`` (which storage Minari opens) and the author/description
keys. The episodes are written and read by one codec per layout: ``minari_hdf5`` (``main_data.hdf5``) and
``minari_arrow`` (a folder per episode, Arrow IPC or Parquet; needs pyarrow, part of the ``minari`` extra).

Nothing here imports ``minari``: the layout and the root rule are written out from Minari's docs and
file format so that exports work without it installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.metadata
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect.errors import (
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    InfoStructureError,
    InvalidDatasetIdError,
)
from vcollect.minari.episodes import MinariEpisode
from vcollect.minari.hdf5 import MAIN_FILE as _MAIN_FILE
from vcollect.minari.hdf5 import iter_hdf5_episodes as _iter_minari_episodes
from vcollect.minari.hdf5 import write_main_file as _write_main_file
from vcollect.spaces import space_from_dict, space_to_dict
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.namespaces import copy_namespace_metadata, root_above
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.layout.staging import discard_staging, fsync_tree, new_staging_dir, publish_dir
from vcollect.store.read.reader import Dataset, StoredDataset, load_dataset
from vcollect.store.write.writer import EpisodeStore

__all__ = [
    "MINARI_DATASETS_PATH_ENV",
    "MINARI_DATA_FORMATS",
    "export_minari",
    "import_minari",
    "minari_dataset_path",
    "parse_minari_dataset_id",
    "resolve_minari_root",
]

#: Environment variable Minari reads for its datasets root.
MINARI_DATASETS_PATH_ENV = "MINARI_DATASETS_PATH"
#: The Minari release whose format this module writes (used when no minari 0.5.x is installed).
MINARI_FORMAT_VERSION = "0.5.4"

#: Minari 0.5's storage layouts (``data_format``), all of which export_minari writes and import_minari reads.
MINARI_DATA_FORMATS = ("hdf5", "arrow", "parquet")

_DATA_DIR = "data"
_METADATA_FILE = "metadata.json"

# Minari 0.5's id grammar: (namespace/)name-vN where a namespace is at least two characters of
# [-_\w/] that start and end with [-_\w]. Minari makes the version optional in its pattern but fails
# without one, so it is required here; empty path parts ("a//b") are refused as they escape nothing
# useful and confuse directory walks.
_MINARI_ID_RE = re.compile(r"(?:(?P<namespace>[-_\w][-_\w/]*[-_\w])/)?(?P<name>[-_\w]+?)-v(?P<version>\d+)")

# metadata.json keys that describe the stored data; they are computed on export, not copied.
_DATA_KEYS = frozenset(
    {
        "total_episodes",
        "total_steps",
        "data_format",
        "jpeg_encoding",
        "observation_space",
        "action_space",
        "env_spec",
        "eval_env_spec",
        "dataset_size",
        "dataset_id",
        "minari_version",
    }
)
# Minari's descriptive keys, in the order its create_dataset writes them.
_DESCRIPTIVE_KEYS = ("code_permalink", "author", "author_email", "algorithm_name", "description")
_SCORE_KEYS = ("ref_max_score", "ref_min_score", "num_episodes_average_score", "requirements")


# ---------------------------------------------------------------------------------------------------
# ids and roots


def parse_minari_dataset_id(dataset_id: str) -> tuple[str | None, str, int]:
    """Split a Minari id into its parts.

    Stricter than vcollect's grammar where Minari is: a namespace needs at least two characters.

    Args:
        dataset_id: The Minari id.

    Returns:
        (namespace or None, name, version).

    Raises:
        InvalidDatasetIdError: Minari refuses the id.
    """
    if not isinstance(dataset_id, str):
        raise InvalidDatasetIdError(f"a Minari dataset id must be a str, got {dataset_id!r}")
    match = _MINARI_ID_RE.fullmatch(dataset_id)
    namespace = None if match is None else match.group("namespace")
    if match is None or (namespace is not None and "" in namespace.split("/")):
        hint = ""
        first = dataset_id.split("/")[0] if isinstance(dataset_id, str) and "/" in dataset_id else ""
        if len(first) == 1:
            hint = f"; Minari namespaces need at least two characters (not {first!r})"
        raise InvalidDatasetIdError(
            f"{dataset_id!r} is not a valid Minari dataset id: Minari ids look like 'namespace/name-vN' "
            f"(letters, digits, '-', '_'; nested namespaces allowed; version required){hint}"
        )
    return namespace, match.group("name"), int(match.group("version"))


def resolve_minari_root(minari_root: str | os.PathLike[str] | None = None) -> Path:
    """Minari's datasets root: ``minari_root`` if given, else ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``.

    Args:
        minari_root: The root asked for, or None for the default.

    Returns:
        The root, with ``~`` expanded.
    """
    if minari_root is not None:
        return Path(minari_root).expanduser()
    env = os.environ.get(MINARI_DATASETS_PATH_ENV)
    if env is not None:
        return Path(env).expanduser()
    return Path("~").expanduser() / ".minari" / "datasets"


def minari_dataset_path(dataset_id: str, minari_root: str | os.PathLike[str] | None = None) -> Path:
    """Directory of a Minari dataset (the one holding ``data/``), after checking the id.

    Args:
        dataset_id: The Minari id.
        minari_root: Minari's datasets root (None: :func:`resolve_minari_root`'s default).

    Returns:
        The directory (it need not exist).

    Raises:
        InvalidDatasetIdError: Minari refuses the id.
    """
    parse_minari_dataset_id(dataset_id)
    return resolve_minari_root(minari_root).joinpath(*dataset_id.split("/"))


def _minari_version() -> str:
    """The installed minari's version when it is a 0.5 release (so it accepts the file), else 0.5.4."""
    try:
        version = importlib.metadata.version("minari")
    except importlib.metadata.PackageNotFoundError:
        return MINARI_FORMAT_VERSION
    return version if re.fullmatch(r"0\.5\.\d+", version) else MINARI_FORMAT_VERSION


# ---------------------------------------------------------------------------------------------------
# helpers shared by export and import


def _as_list(value: Any) -> list[Any]:
    """Minari keeps author/author_email as sets (JSON lists): a str becomes a one-element list."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return list(value)


# ---------------------------------------------------------------------------------------------------
# export


def _export_metadata(dataset: Dataset, minari_dataset_id: str) -> dict[str, Any]:
    """metadata.json content (without dataset_size), keys in the order Minari's create_dataset writes them."""
    ours = {k: v for k, v in dataset.metadata.items() if k not in {"dataset_id", "created_at", "format_version"}}
    meta: dict[str, Any] = {
        "total_episodes": int(dataset.total_episodes),
        "total_steps": int(dataset.total_steps),
        "data_format": "hdf5",
        # Stored arrays are raw, never JPEG: readers get back exactly what was recorded.
        "jpeg_encoding": False,
        "observation_space": json.dumps(space_to_dict(dataset.observation_space)),
        "action_space": json.dumps(space_to_dict(dataset.action_space)),
    }
    stored = StoredDataset(dataset)
    if stored.env_spec_json is not None:
        meta["env_spec"] = stored.env_spec_json
    descriptive: dict[str, Any] = {"dataset_id": minari_dataset_id}
    for key in _DESCRIPTIVE_KEYS:
        if ours.get(key) is not None:
            descriptive[key] = _as_list(ours[key]) if key in ("author", "author_email") else ours[key]
    descriptive["minari_version"] = _minari_version()
    if stored.eval_env_spec_json is not None:
        descriptive["eval_env_spec"] = stored.eval_env_spec_json
    for key in _SCORE_KEYS:
        if ours.get(key) is not None:
            descriptive[key] = ours[key]
    for key, value in ours.items():
        if key not in _DATA_KEYS and key not in descriptive and key not in _DESCRIPTIVE_KEYS and key not in _SCORE_KEYS:
            descriptive[key] = value
    return {**meta, **descriptive}


def export_minari(
    dataset: Dataset | str,
    minari_dataset_id: str,
    minari_root: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    root: str | os.PathLike[str] | None = None,
    data_format: str = "hdf5",
) -> Path:
    """Write ``dataset`` (a Dataset or view, or an id under ``root``) as a Minari 0.5 dataset stored as
    ``data_format``: "hdf5" (Minari's default), "arrow" or "parquet" (these two need pyarrow).

    The result loads with ``minari.load_dataset(minari_dataset_id)`` (with ``$MINARI_DATASETS_PATH`` or
    Minari's default root matching ``minari_root``) and returns the same arrays, seeds, options and
    episode metadata. Episodes are renumbered 0..n-1 in this view's order. The dataset is written to a
    hidden staging directory and renamed into place, so a crash never leaves a half dataset under
    the id (the next export or import removes what a crashed one left).

    Args:
        dataset: A Dataset or view, or the id of a dataset under ``root``.
        minari_dataset_id: The Minari id to write it as.
        minari_root: Minari's datasets root (None: :func:`resolve_minari_root`'s default).
        overwrite: Replace a Minari dataset of that id.
        root: The root ``dataset`` is loaded from when it is an id.
        data_format: "hdf5" (Minari's default), "arrow" or "parquet" (these two need pyarrow).

    Returns:
        The Minari dataset's directory.

    Raises:
        DatasetExistsError: The Minari dataset exists and ``overwrite`` is False.
        InvalidDatasetIdError: Minari refuses ``minari_dataset_id``.
        ValueError: An unknown ``data_format``.
    """
    namespace, _, _ = parse_minari_dataset_id(minari_dataset_id)
    _check_data_format(data_format)
    source = load_dataset(dataset, root) if isinstance(dataset, str) else dataset
    minari_root_path = resolve_minari_root(minari_root)
    final = minari_root_path.joinpath(*minari_dataset_id.split("/"))
    if final.exists() and not overwrite:
        raise DatasetExistsError(
            f"Minari dataset {minari_dataset_id!r} already exists at {str(final)!r}; pass overwrite=True to replace it"
        )
    tmp = new_staging_dir(final, minari_root_path)
    data_dir = tmp / _DATA_DIR
    try:
        data_dir.mkdir()
        if data_format == "hdf5":
            _write_main_file(source, data_dir / _MAIN_FILE)
        else:
            _arrow_codec().write_arrow_episodes(source, data_dir, data_format)
        metadata = _export_metadata(source, minari_dataset_id)
        metadata["data_format"] = data_format  # which storage minari.load_dataset opens
        _write_metadata_with_size(data_dir, metadata)
        # every namespace level gets a namespace_metadata.json, with the same-named vcollect namespace's metadata
        copy_namespace_metadata(StoredDataset(source).root, minari_root_path, namespace)
        fsync_tree(tmp)
        publish_dir(tmp, final, root=minari_root_path, marker=_DATA_DIR, overwrite=overwrite, exists_message=(
            f"Minari dataset {minari_dataset_id!r} already exists at {str(final)!r}; pass overwrite=True to replace it"
        ))
    except BaseException:
        discard_staging(tmp, minari_root_path)
        raise
    return final


def _check_data_format(data_format: Any) -> None:
    if data_format not in MINARI_DATA_FORMATS:
        raise ValueError(
            f"data_format must be one of {', '.join(map(repr, MINARI_DATA_FORMATS))} (Minari 0.5's storages), "
            f"got {data_format!r}"
        )


def _arrow_codec() -> Any:
    """The Arrow/Parquet codec module, imported on first use: pyarrow is needed only for those layouts."""
    try:
        return importlib.import_module("vcollect.minari.arrow")
    except ImportError as exc:
        raise ImportError(
            f"Minari's arrow and parquet layouts need pyarrow ({exc}); install it with: pip install 'vcollect[minari]'"
        ) from exc


# ---------------------------------------------------------------------------------------------------
# import


def _resolve_minari_data_dir(source: str | os.PathLike[str], minari_root: str | os.PathLike[str] | None) -> Path:
    """The ``data`` directory of a Minari dataset given by id (under the Minari root) or by path: the
    dataset's folder, its ``data`` folder, or a file in that (``main_data.hdf5``)."""
    candidates: list[Path] = []
    if isinstance(source, str) and _MINARI_ID_RE.fullmatch(source):
        candidates.append(minari_dataset_path(source, minari_root))
    candidates.append(Path(source).expanduser())
    for candidate in candidates:
        places = (candidate.parent,) if candidate.is_file() else (candidate / _DATA_DIR, candidate)
        for data_dir in places:
            if (data_dir / _METADATA_FILE).is_file():
                return data_dir
    looked = ", ".join(repr(str(c)) for c in candidates)
    raise DatasetNotFoundError(
        f"no Minari dataset {str(source)!r}: looked for data/{_METADATA_FILE} under {looked}, or next to it "
        f"for a file (Minari root {str(resolve_minari_root(minari_root))!r})"
    )


def _clean_env_spec(text: Any) -> str | None:
    """An env spec JSON from Minari, without keys this gymnasium's EnvSpec does not know (old releases')."""
    if not isinstance(text, str):
        return None
    spec = json.loads(text)
    known = {f.name for f in dataclasses.fields(gym.envs.registration.EnvSpec)}
    return json.dumps({k: v for k, v in spec.items() if k in known})


def _spaces_of(
    metadata: Mapping[str, Any], env_spec: str | None, metadata_file: Path, trust_env_spec: bool
) -> tuple[gym.Space[Any], gym.Space[Any]]:
    """The spaces stored in the Minari metadata; only when one is missing, and only with ``trust_env_spec``,
    those of the env made from its env_spec (making it imports its entry point's module: any code)."""
    obs = metadata.get("observation_space")
    act = metadata.get("action_space")
    if obs is not None and act is not None:
        return space_from_dict(obs), space_from_dict(act)
    missing = " and ".join(name for name, space in (("observation_space", obs), ("action_space", act)) if space is None)
    if env_spec is None:
        raise DatasetError(f"{metadata_file} stores no {missing} and no env_spec to recover them from")
    if not trust_env_spec:
        entry_point = json.loads(env_spec).get("entry_point")
        raise DatasetError(
            f"{metadata_file} stores no {missing}; they can only be recovered by making the env of its env_spec "
            f"(entry point {entry_point!r}), which imports and runs that module's code: pass trust_env_spec=True "
            "(CLI: --trust-env-spec) if you trust this dataset"
        )
    env = gym.make(gym.envs.registration.EnvSpec.from_json(env_spec))
    try:
        return (
            space_from_dict(obs) if obs is not None else env.observation_space,
            space_from_dict(act) if act is not None else env.action_space,
        )
    finally:
        env.close()


def _write_metadata_with_size(data_dir: Path, metadata: dict[str, Any]) -> None:
    """Write ``metadata.json`` with ``dataset_size`` as Minari computes it (``MinariStorage.get_size``): every
    entry under the data folder, files and folders alike (an Arrow export has a folder per episode), metadata
    file included, in MB rounded to one decimal. The metadata's own length depends on the number written, so
    it is written until the size it states is the size it has."""
    items = list(metadata.items())
    position = list(metadata).index("dataset_id")  # Minari's writer puts the size just before the id
    size = 0.0
    for _ in range(4):
        with_size = [*items[:position], ("dataset_size", size), *items[position:]]
        (data_dir / _METADATA_FILE).write_text(json.dumps(dict(with_size)), encoding="utf-8")
        measured = float(np.round(sum(p.stat().st_size / 1e6 for p in data_dir.glob("**/*")), 1))
        if measured == size:
            return
        size = measured
    raise DatasetError(f"the size of the export at {str(data_dir)!r} kept changing while it was measured")


def import_minari(
    minari_dataset_id_or_path: str | os.PathLike[str],
    dataset_id: str,
    root: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
    minari_root: str | os.PathLike[str] | None = None,
    trust_env_spec: bool = False,
) -> Dataset:
    """Copy a Minari dataset (stored as hdf5, arrow or parquet) into a new vcollect dataset ``dataset_id``
    (under ``root``) and load it.

    The source is a Minari id (resolved under ``minari_root``, else ``$MINARI_DATASETS_PATH``, else
    ``~/.minari/datasets``) or a path to the dataset directory, its ``data/`` or its ``main_data.hdf5``.
    Its metadata's ``data_format`` says which layout is read, as in Minari.
    Spaces, env specs and descriptive metadata come from its metadata.json; seeds, reset options, infos,
    episode metadata and (for vcollect exports) extras are kept. Episodes whose infos change structure start
    a new shard writer, so nothing is dropped. The dataset appears under ``dataset_id`` (replacing the old
    one with ``overwrite=True``) with one rename once complete: on a failure or a crash nothing is left
    under the id.

    The env is never made when the metadata stores both spaces. When it lacks one, the import fails
    (DatasetError) unless ``trust_env_spec=True``, with which the missing space comes from the env made
    from the stored env_spec: making it imports the module of its entry point, i.e. runs any code the
    dataset names, so pass it only for datasets you trust.

    Args:
        minari_dataset_id_or_path: A Minari id, or the path of a Minari dataset.
        dataset_id: The new vcollect dataset's id.
        root: The vcollect datasets root (None: the default).
        overwrite: Replace a vcollect dataset of that id.
        minari_root: Minari's datasets root an id is resolved under.
        trust_env_spec: Make the stored env to read a space the metadata lacks.

    Returns:
        The new dataset, loaded.

    Raises:
        DatasetNotFoundError: No Minari dataset there.
        DatasetError: Its metadata is not valid JSON, it is stored in a layout vcollect does not read, its
            files are missing or unreadable, a space is missing (without ``trust_env_spec``), or an
            episode cannot be stored.
        DatasetExistsError: ``dataset_id`` exists and ``overwrite`` is False.
    """
    data_dir = _resolve_minari_data_dir(minari_dataset_id_or_path, minari_root)
    try:
        metadata = json.loads((data_dir / _METADATA_FILE).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DatasetError(f"{data_dir / _METADATA_FILE} is not valid JSON: {exc}") from exc
    data_format = metadata.get("data_format", "hdf5")
    if data_format not in MINARI_DATA_FORMATS:
        raise DatasetError(
            f"Minari dataset at {str(data_dir)!r} is stored as {data_format!r}; import_minari reads "
            f"{', '.join(map(repr, MINARI_DATA_FORMATS))}"
        )
    main_file = data_dir / _MAIN_FILE
    if data_format == "hdf5" and not main_file.is_file():
        raise DatasetError(f"Minari dataset at {str(data_dir)!r} has no {_MAIN_FILE}")
    env_spec = _clean_env_spec(metadata.get("env_spec"))
    eval_env_spec = _clean_env_spec(metadata.get("eval_env_spec"))
    obs_space, act_space = _spaces_of(metadata, env_spec, data_dir / _METADATA_FILE, trust_env_spec)
    ours = {k: v for k, v in metadata.items() if k not in _DATA_KEYS}
    ours["minari_dataset_id"] = metadata.get("dataset_id")
    ours["minari_version"] = metadata.get("minari_version")
    jpeg = bool(metadata.get("jpeg_encoding", True))

    # Built under a hidden name next to the dataset's place and renamed there when complete: a failure or a
    # crash part-way leaves nothing under the id (and an overwritten dataset as it was).
    root_path = resolve_root(root)
    final = dataset_path(dataset_id, root_path)
    exists = f"dataset {dataset_id!r} already exists at {str(final)!r}; pass overwrite=True to replace it"
    if (final / DATASET_FILE).exists() and not overwrite:
        raise DatasetExistsError(exists)
    staging = new_staging_dir(final, root_path)
    try:
        store = EpisodeStore.create_at(staging, dataset_id, obs_space, act_space, env_spec=env_spec,
                                       eval_env_spec=eval_env_spec, metadata=ours)
    except BaseException:
        discard_staging(staging, root_path)
        raise
    try:
        source = main_file if data_format == "hdf5" else data_dir
        for record in _episodes(data_dir, data_format, obs_space, act_space, jpeg):
            episode: dict[str, Any] = dict(record)
            name = episode.pop("name")
            try:
                store.write_episode(**episode, env_id=0)
            except (InfoStructureError, ValueError) as first_error:
                if store.pending_episodes == 0 and store.committed_episodes == 0:
                    raise DatasetError(f"cannot import {name} of {str(source)!r}: {first_error}") from first_error
                # Infos/extras/metadata structure is fixed per writer: a fresh writer takes the new one.
                store.close()
                store = EpisodeStore.open_at(staging, dataset_id, root_path)
                try:
                    store.write_episode(**episode, env_id=0)
                except (InfoStructureError, ValueError) as exc:
                    raise DatasetError(f"cannot import {name} of {str(source)!r}: {exc}") from exc
        store.close()
        publish_dir(staging, final, root=root_path, marker=DATASET_FILE, overwrite=overwrite, exists_message=exists)
        minari_root_path = root_above(data_dir.parent, metadata.get("dataset_id"))
        if minari_root_path is not None:  # keep the metadata of namespaces named as in the Minari root
            copy_namespace_metadata(minari_root_path, root_path, parse_dataset_id(dataset_id)[0], mark_all=False)
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        discard_staging(staging, root_path)
        raise
    return load_dataset(dataset_id, root)


def _episodes(
    data_dir: Path, data_format: str, obs_space: gym.Space[Any], act_space: gym.Space[Any], jpeg: bool
) -> Iterator[MinariEpisode]:
    """The episodes of a Minari dataset in id order, read by the codec of its layout."""
    if data_format == "hdf5":
        return _iter_minari_episodes(data_dir / _MAIN_FILE, obs_space, act_space, jpeg)  # type: ignore[no-any-return]
    codec = _arrow_codec()
    return codec.iter_arrow_episodes(data_dir, data_format, obs_space, act_space, jpeg)  # type: ignore[no-any-return]
