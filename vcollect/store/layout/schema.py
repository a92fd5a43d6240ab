"""What a writer checks episodes' side data against: info/extras structure, metadata columns, JSON values.

The first episode a writer accepts fixes the structure of its infos, extras and episode metadata (one
shard holds one structure); later episodes must match it, and a mismatch names the key. Reset options
and dataset metadata are stored as JSON; :func:`to_json` is the one conversion both go through.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vcollect.errors import InfoStructureError
from vcollect.infos import flatten_info, info_name

__all__ = ["MetadataSchema", "TreeSchema", "flatten_columns", "json_default", "kind_category", "to_json"]

_NUMERIC_KINDS = frozenset("biuf")
_STRING_KINDS = frozenset("US")

#: name -> (rows: "obs" (T+1) or "step" (T), category: "numeric" or "string", shape of one row)
TreeFields = dict[str, tuple[str, str, tuple[int, ...]]]
#: name -> (category, shape of the episode's value)
MetadataFields = dict[str, tuple[str, tuple[int, ...]]]


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for what datasets hold besides plain JSON: numpy scalars/arrays, paths."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(value: Any, what: str) -> str:
    """``value`` as JSON text; ValueError naming ``what`` when it cannot be."""
    try:
        return json.dumps(value, default=json_default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serializable: {exc}") from exc


def kind_category(dtype: np.dtype) -> str:
    """"numeric" or "string": the two kinds of values a column can hold (TypeError for others)."""
    if dtype.kind in _NUMERIC_KINDS:
        return "numeric"
    if dtype.kind in _STRING_KINDS:
        return "string"
    raise TypeError(f"dtype {dtype} cannot be stored (numbers, bools and strings only)")


def flatten_columns(tree: Mapping[str, Any], what: str) -> dict[str, np.ndarray]:
    """A nested dict of arrays as columns {"a/b": array} (keys checked by :func:`vcollect.infos.flatten_info`)."""
    return {info_name(path): np.asarray(value) for path, value in flatten_info(tree, what).items()}


class TreeSchema:
    """Structure of per-step infos/extras, fixed by the first episode a writer accepts."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.fields: TreeFields | None = None

    def check(self, arrays: Mapping[str, np.ndarray], steps: int) -> TreeFields:
        """Validate one episode's arrays (rows per "obs": T+1, or per "step": T) against the schema.

        Returns the episode's structure; the caller fixes it as the schema once the episode is accepted.
        """
        fields: TreeFields = {}
        for name, arr in arrays.items():
            if arr.ndim == 0 or arr.shape[0] not in (steps, steps + 1):
                raise InfoStructureError(
                    f"{self.what}[{name!r}] must have one row per step ({steps}) or per observation "
                    f"({steps + 1}), got shape {arr.shape}"
                )
            rows = "obs" if arr.shape[0] == steps + 1 else "step"
            try:
                category = kind_category(arr.dtype)
            except TypeError as exc:
                raise InfoStructureError(f"{self.what}[{name!r}]: {exc}") from None
            fields[name] = (rows, category, tuple(arr.shape[1:]))
        if self.fields is None:
            return fields
        if fields.keys() != self.fields.keys():
            missing = sorted(self.fields.keys() - fields.keys())
            extra = sorted(fields.keys() - self.fields.keys())
            raise InfoStructureError(
                f"{self.what} changed structure: missing keys {missing}, new keys {extra} "
                f"(the structure is fixed by the first episode written: {sorted(self.fields)})"
            )
        for name, spec in fields.items():
            if spec != self.fields[name]:
                rows, category, shape = self.fields[name]
                raise InfoStructureError(
                    f"{self.what}[{name!r}] changed: first episode had rows per {rows}, {category} values of "
                    f"shape {shape}; this one has rows per {spec[0]}, {spec[1]} values of shape {spec[2]}"
                )
        return fields


class MetadataSchema:
    """Columns of per-episode metadata (scalars, fixed-shape arrays, strings), fixed by the first episode."""

    def __init__(self) -> None:
        self.fields: MetadataFields | None = None

    def check(self, metadata: Mapping[str, Any] | None) -> tuple[dict[str, np.ndarray], MetadataFields]:
        """One episode's metadata as arrays and its structure; ValueError when it differs from the schema."""
        values: dict[str, np.ndarray] = {}
        fields: MetadataFields = {}
        for key, value in (metadata or {}).items():
            if not isinstance(key, str) or not key or "/" in key:
                raise ValueError(f"episode metadata key {key!r} must be a non-empty str without '/'")
            arr = np.array(value)
            try:
                category = kind_category(arr.dtype)
            except TypeError as exc:
                raise ValueError(f"episode metadata {key!r}: {exc}") from None
            values[key] = arr
            fields[key] = (category, tuple(arr.shape))
        if self.fields is not None and fields != self.fields:
            raise ValueError(
                f"episode metadata changed structure: first episode had {_describe(self.fields)}, "
                f"this one has {_describe(fields)}"
            )
        return values, fields


def _describe(fields: MetadataFields) -> str:
    return "{" + ", ".join(f"{k}: {c}{list(s)}" for k, (c, s) in fields.items()) + "}"
