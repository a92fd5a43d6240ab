"""Minari 0.5's Arrow and Parquet layouts: one folder per episode under ``data/``.

``data/<id>/part-0.arrow`` (an Arrow IPC file) or ``data/<id>/part-0.parquet`` holds one table of T+1
rows: ``observations`` (Dict spaces a struct keyed like the space, Tuple spaces a struct of fields
"0", "1", ...; Box, MultiDiscrete and MultiBinary leaves fixed-size lists of the flattened values,
Discrete leaves plain integers, Text leaves UTF-8 strings), ``actions``, ``rewards``, ``terminations``
and ``truncations`` padded with one last row (zeros; null for Text), and an ``infos`` struct when the
episode has infos. ``data/<id>/metadata.json`` holds ``id``, ``total_steps``, ``seed``, ``options`` and
the per-episode metadata. This is what Minari's ArrowStorage/ParquetStorage write and read.

Where vcollect differs, on purpose: infos are written as flat fields named ``a/b`` (Minari's reader
cannot decode nested structs); info columns with one row per step (T rows) are padded with a last row
and marked ``vcollect_rows: step`` in the field metadata, so the import drops that row again; vcollect's
extras go to an ``extras`` column that Minari does not read. Each episode is one record batch, as
Minari's reader expects one batch per episode file.
"""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from vcollect.errors import DatasetError, DiskFullError
from vcollect.infos import flatten_info, info_name
from vcollect.minari.episodes import MinariEpisode, decode_jpeg, is_image_space, json_value, text_values
from vcollect.store.layout.schema import json_default
from vcollect.store.read.dataset_index import EpisodeData
from vcollect.store.read.reader import Dataset

__all__ = ["ARROW_FORMATS", "iter_arrow_episodes", "write_arrow_episodes"]

#: Minari's storage formats this module writes and reads (``data_format`` in metadata.json).
ARROW_FORMATS = ("arrow", "parquet")
_EPISODE_METADATA = "metadata.json"
_EPISODE_KEYS = frozenset({"id", "total_steps", "seed", "options"})
_FIXED_LIST_SPACES = (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
_ROWS_KEY = b"vcollect_rows"
_SHAPE_KEY = b"shape"


# ---------------------------------------------------------------------------------------------------
# export


def _fixed_list(values: np.ndarray, pad: int) -> pa.Array:
    """Rows of any shape as a fixed-size list of their flattened values, ``pad`` zero rows added."""
    flat = values.reshape(values.shape[0], int(np.prod(values.shape[1:], dtype=np.int64)))
    if pad:
        flat = np.concatenate([flat, np.zeros((pad, flat.shape[1]), flat.dtype)])
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), list_size=flat.shape[1])


def _strings(values: np.ndarray, pad: int) -> pa.Array:
    array = pa.array(values.reshape(-1), type=pa.string())
    return pa.concat_arrays([array, pa.nulls(pad, pa.string())]) if pad else array


def _encode_value(space: gym.Space[Any], values: Any, pad: int) -> pa.Array:
    """One space's batch of values as Minari's ``_encode_space`` lays it out (never JPEG: exports are raw)."""
    if isinstance(space, gym.spaces.Dict):
        names = list(space.spaces)
        return pa.StructArray.from_arrays([_encode_value(space[k], values[k], pad) for k in names], names=names)
    if isinstance(space, gym.spaces.Tuple):
        parts = [_encode_value(sub, values[i], pad) for i, sub in enumerate(space.spaces)]
        return pa.StructArray.from_arrays(parts, names=[str(i) for i in range(len(parts))])
    values = np.asarray(values)
    if isinstance(space, gym.spaces.Text):
        return _strings(values, pad)
    if isinstance(space, gym.spaces.Discrete):
        return pa.array(np.concatenate([values, np.zeros(pad, values.dtype)]) if pad else values)
    return _fixed_list(values, pad)


def _encode_tree(tree: Mapping[str, Any], rows: int) -> pa.StructArray:
    """Infos/extras as one struct of flat fields ("a/b"); T-row columns padded and marked (see above)."""
    arrays, fields = [], []
    for path, value in flatten_info(tree, "infos").items():
        values = np.asarray(value)
        pad = rows - values.shape[0]
        meta: dict[bytes, bytes] = {_ROWS_KEY: b"step"} if pad else {}
        if values.ndim > 1:
            meta[_SHAPE_KEY] = ",".join(str(n) for n in values.shape[1:]).encode()
            array = _fixed_list(values, pad) if values.dtype.kind != "U" else _string_list(values, pad)
        elif values.dtype.kind == "U":
            array = _strings(values, pad)
        else:
            array = pa.array(np.concatenate([values, np.zeros(pad, values.dtype)]) if pad else values)
        arrays.append(array)
        fields.append(pa.field(info_name(path), array.type, metadata=meta or None))
    return pa.StructArray.from_arrays(arrays, fields=fields)


def _string_list(values: np.ndarray, pad: int) -> pa.Array:
    flat = values.reshape(values.shape[0], int(np.prod(values.shape[1:], dtype=np.int64)))
    return pa.FixedSizeListArray.from_arrays(_strings(flat.reshape(-1), pad * flat.shape[1]), list_size=flat.shape[1])


def _episode_batch(episode: EpisodeData, obs_space: gym.Space[Any], act_space: gym.Space[Any]) -> pa.RecordBatch:
    rows = len(episode) + 1
    columns: dict[str, pa.Array] = {
        "observations": _encode_value(obs_space, episode.observations, 0),
        "actions": _encode_value(act_space, episode.actions, 1),
        "rewards": pa.array(np.append(episode.rewards, 0.0)),
        "terminations": pa.array(np.append(episode.terminations, False)),
        "truncations": pa.array(np.append(episode.truncations, False)),
    }
    if episode.infos:
        columns["infos"] = _encode_tree(episode.infos, rows)
    if episode.extras:
        columns["extras"] = _encode_tree(episode.extras, rows)
    return pa.RecordBatch.from_pydict(columns)


def _episode_metadata(episode_id: int, episode: EpisodeData) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": episode_id, "total_steps": len(episode)}
    if episode.seed is not None:
        meta["seed"] = episode.seed
    if episode.options is not None:
        meta["options"] = episode.options
    meta.update({k: v for k, v in episode.metadata.items() if k not in _EPISODE_KEYS})
    return meta


def write_arrow_episodes(dataset: Dataset, data_dir: Path, data_format: str) -> None:
    """Write every episode of ``dataset`` (renumbered 0..n-1) into ``data_dir`` in ``data_format``
    ("arrow" or "parquet"); a full disk is DiskFullError."""
    obs_space, act_space = dataset.observation_space, dataset.action_space
    for i, episode in enumerate(dataset.iterate_episodes()):
        folder = data_dir / str(i)
        path = folder / f"part-0.{data_format}"
        try:
            folder.mkdir()
            batch = _episode_batch(episode, obs_space, act_space)
            if data_format == "parquet":
                pq.write_table(pa.Table.from_batches([batch]), path, row_group_size=max(batch.num_rows, 1))
            else:
                with ipc.new_file(str(path), batch.schema) as writer:
                    writer.write_batch(batch)
            text = json.dumps(_episode_metadata(i, episode), default=json_default)
            (folder / _EPISODE_METADATA).write_text(text, encoding="utf-8")
        except OSError as exc:
            if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc):
                raise DiskFullError(f"no space left on device while writing {str(path)!r}") from exc
            raise


# ---------------------------------------------------------------------------------------------------
# import


def _field(struct: pa.Array, name: str, where: str) -> pa.Array:
    index = struct.type.get_field_index(name) if pa.types.is_struct(struct.type) else -1
    if index < 0:
        raise DatasetError(f"{where}: no field {name!r} (found {struct.type})")
    return struct.flatten()[index]


def _fixed_rows(column: pa.Array, shape: tuple[int, ...]) -> np.ndarray:
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(len(column), *shape)


def _decode_value(space: gym.Space[Any], column: pa.Array, rows: int, jpeg: bool, where: str) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _decode_value(sub, _field(column, k, where), rows, jpeg, f"{where}/{k}") for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(
            _decode_value(sub, _field(column, str(i), where), rows, jpeg, f"{where}/{i}") for i, sub in enumerate(space.spaces)
        )
    column = column.slice(0, rows)
    if column.null_count:
        raise DatasetError(f"{where}: {column.null_count} of its {rows} values are missing (null)")
    if isinstance(space, gym.spaces.Text):
        return text_values(column.to_pylist())
    if jpeg and is_image_space(space):
        return decode_jpeg(column.to_pylist())
    if isinstance(space, _FIXED_LIST_SPACES) and pa.types.is_fixed_size_list(column.type):
        return _fixed_rows(column, tuple(space.shape))
    if isinstance(space, gym.spaces.Discrete) and not pa.types.is_nested(column.type):
        return column.to_numpy(zero_copy_only=False)
    raise DatasetError(f"{where}: a column of {column.type} cannot hold values of {space}")


def _decode_tree(struct: pa.Array, steps: int, where: str) -> dict[str, Any]:
    """Infos/extras: nested structs (Minari's writer) or flat "a/b" fields (vcollect's), T+1 rows each, or T
    for fields marked as step rows."""
    out: dict[str, Any] = {}
    for field, column in zip(struct.type, struct.flatten()):
        meta = field.metadata or {}
        if pa.types.is_struct(field.type):
            value: Any = _decode_tree(column, steps, f"{where}/{field.name}")
        else:
            column = column.slice(0, steps if meta.get(_ROWS_KEY) == b"step" else steps + 1)
            if pa.types.is_fixed_size_list(field.type):
                # Minari writes 1-D info arrays as lists of one with an empty shape
                shape = tuple(int(n) for n in meta[_SHAPE_KEY].split(b",") if n) if _SHAPE_KEY in meta else (field.type.list_size,)
                inner = column.flatten()
                if pa.types.is_string(inner.type) or pa.types.is_large_string(inner.type):
                    value = text_values(inner.to_pylist()).reshape(len(column), *shape)
                else:
                    value = _fixed_rows(column, shape)
            elif pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                value = text_values(column.to_pylist())
            else:
                value = column.to_numpy(zero_copy_only=False)
        node = out
        *parents, last = field.name.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def _episode_folders(data_dir: Path) -> list[Path]:
    found = [(int(p.name), p) for p in data_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return [p for _, p in sorted(found)]


def iter_arrow_episodes(
    data_dir: Path, data_format: str, obs_space: gym.Space[Any], act_space: gym.Space[Any], jpeg: bool
) -> Iterator[MinariEpisode]:
    """The episodes of a Minari dataset stored as ``data_format`` ("arrow" or "parquet"), in id order."""
    for folder in _episode_folders(data_dir):
        name = f"episode {folder.name}"
        table = pads.dataset(str(folder), format=data_format, ignore_prefixes=["_", ".", _EPISODE_METADATA]).to_table()
        rows = table.num_rows
        if rows < 1:
            raise DatasetError(f"{name} of {str(data_dir)!r} has no rows (an episode has at least its first observation)")
        steps = rows - 1
        column = {key: table.column(key).combine_chunks() for key in table.column_names}
        missing = {"observations", "actions", "rewards", "terminations", "truncations"} - column.keys()
        if missing:
            raise DatasetError(f"{name} of {str(data_dir)!r} lacks the columns {sorted(missing)}")
        meta_path = folder / _EPISODE_METADATA
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        seed, options = meta.get("seed"), meta.get("options")
        metadata = {k: json_value(v) for k, v in meta.items() if k not in _EPISODE_KEYS}
        yield {
            "name": name,
            "observations": _decode_value(obs_space, column["observations"], rows, jpeg, f"{name}/observations"),
            "actions": _decode_value(act_space, column["actions"], steps, jpeg, f"{name}/actions"),
            "rewards": column["rewards"].slice(0, steps).to_numpy(zero_copy_only=False),
            "terminations": column["terminations"].slice(0, steps).to_numpy(zero_copy_only=False),
            "truncations": column["truncations"].slice(0, steps).to_numpy(zero_copy_only=False),
            "infos": _decode_tree(column["infos"], steps, f"{name}/infos") if "infos" in column else None,
            "extras": _decode_tree(column["extras"], steps, f"{name}/extras") if "extras" in column else None,
            "seed": None if seed is None else int(seed),
            "options": options if isinstance(options, dict) else None,
            "metadata": metadata or None,
        }
