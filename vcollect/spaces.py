"""Space <-> array layout: the leaves of (nested) spaces, batched nested values, cheap batch checks.

Buffers and the store keep one array per leaf of a space (Dict/Tuple nesting walked depth-first), so
everything that touches observations or actions goes through the helpers here. Serialization uses
Minari 0.5's JSON format so the same strings can be written into Minari exports.
"""

from __future__ import annotations

import contextlib
import functools
import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces as gs

from vcollect.text_leaves import TextRule, text_dtype

__all__ = [
    "Leaf",
    "leaves",
    "flatten_batch",
    "leaf_values",
    "unflatten_batch",
    "allocate",
    "batch_contains",
    "BatchCheck",
    "space_to_dict",
    "space_from_dict",
]

_NESTED = (gs.Dict, gs.Tuple)
_LEAF_TYPES = frozenset({gs.Box, gs.Discrete, gs.MultiDiscrete, gs.MultiBinary, gs.Text})


def _is_nested(space: gym.Space[Any]) -> bool:
    """isinstance(space, (Dict, Tuple)), but cheap for the plain leaf classes (Dict and Tuple are
    typing.Mapping/Sequence subclasses, so isinstance goes through the slow ABC check)."""
    return type(space) not in _LEAF_TYPES and isinstance(space, _NESTED)


@dataclass(frozen=True)
class Leaf:
    """One array-valued part of a space: where it sits in the nesting and how it is stored."""

    path: tuple[str | int, ...]
    name: str
    space: gym.Space[Any]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


def _storage(space: gym.Space[Any]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    if isinstance(space, gs.Box):
        return tuple(space.shape), np.dtype(space.dtype)
    if isinstance(space, gs.Discrete):
        return (), np.dtype(space.dtype)  # what the space says, as the env and gymnasium's batches give it
    if isinstance(space, gs.MultiDiscrete):
        return tuple(space.nvec.shape), np.dtype(space.dtype)
    if isinstance(space, gs.MultiBinary):
        return tuple(space.shape), np.dtype(space.dtype)
    if isinstance(space, gs.Text):
        return (), text_dtype(space)  # fixed-width unicode, one spare character (see vcollect.text_leaves)
    raise TypeError(
        f"cannot store values of {space!r} ({type(space).__name__}): supported spaces are Box, Discrete, "
        "MultiDiscrete, MultiBinary, Text and Dict/Tuple of them"
    )


def _collect(space: gym.Space[Any], path: tuple[str | int, ...], out: list[Leaf]) -> None:
    if isinstance(space, gs.Dict):
        for key, sub in space.spaces.items():
            _collect(sub, (*path, key), out)
    elif isinstance(space, gs.Tuple):
        for i, sub in enumerate(space.spaces):
            _collect(sub, (*path, i), out)
    else:
        shape, dtype = _storage(space)
        out.append(Leaf(path, "/".join(str(p) for p in path), space, shape, dtype))


def leaves(space: gym.Space[Any]) -> list[Leaf]:
    """The leaves of ``space`` depth-first (Dict in ``space.spaces`` order, Tuple by index).

    Text leaves are scalars of fixed-width unicode (``vcollect.text_leaves``). Raises TypeError for spaces
    without a fixed array layout (Graph, Sequence, OneOf, ...).
    """
    out: list[Leaf] = []
    _collect(space, (), out)
    return out


def _flatten_into(
    space: gym.Space[Any], value: Any, out: list[Any], path: tuple[str | int, ...], leaf: Callable[[Any], Any]
) -> None:
    # per-call hot path (backends write every nested observation through it): the path is joined into
    # a name only for an error message, and plain dicts/tuples skip the slower ABC isinstance checks
    if type(space) is gs.Dict or isinstance(space, gs.Dict):
        if type(value) is not dict and not isinstance(value, Mapping):
            raise TypeError(f"{_named(path)}: expected a dict for a Dict space, got {type(value).__name__}")
        for key, sub in space.spaces.items():
            if key not in value:
                raise KeyError(f"{_named(path)}: missing key {key!r} of the Dict space")
            if type(sub) in _LEAF_TYPES:
                out.append(leaf(value[key]))
            else:
                _flatten_into(sub, value[key], out, (*path, key), leaf)
    elif type(space) is gs.Tuple or isinstance(space, gs.Tuple):
        if type(value) is not tuple and (not isinstance(value, Sequence) or isinstance(value, (str, bytes))):
            raise TypeError(f"{_named(path)}: expected a tuple for a Tuple space, got {type(value).__name__}")
        if len(value) != len(space.spaces):
            raise ValueError(
                f"{_named(path)}: expected {len(space.spaces)} parts for the Tuple space, got {len(value)}"
            )
        for i, (sub, part) in enumerate(zip(space.spaces, value)):
            if type(sub) in _LEAF_TYPES:
                out.append(leaf(part))
            else:
                _flatten_into(sub, part, out, (*path, i), leaf)
    else:
        out.append(leaf(value))


def _named(path: tuple[str | int, ...]) -> str:
    return "/".join(str(p) for p in path) or "value"


def flatten_batch(space: gym.Space[Any], batch: Any) -> list[np.ndarray]:
    """The leaf arrays of a (batched) nested value in ``leaves(space)`` order, without copying.

    Only the structure is walked, so it works alike for one value, a batch or a (T, ...) sequence.
    """
    if not _is_nested(space):
        return [np.asarray(batch)]
    out: list[np.ndarray] = []
    _flatten_into(space, batch, out, (), np.asarray)
    return out


def leaf_values(space: gym.Space[Any], value: Any) -> list[Any]:
    """The leaves of a nested value in ``leaves(space)`` order as they are (not made arrays): what a backend
    writes into its rows, which converts them anyway. Same structure checks as :func:`flatten_batch`."""
    if not _is_nested(space):
        return [value]
    out: list[Any] = []
    _flatten_into(space, value, out, (), _as_is)
    return out


def _as_is(value: Any) -> Any:
    return value


def _unflatten_from(space: gym.Space[Any], it: Any) -> Any:
    if isinstance(space, gs.Dict):
        return {key: _unflatten_from(sub, it) for key, sub in space.spaces.items()}
    if isinstance(space, gs.Tuple):
        return tuple(_unflatten_from(sub, it) for sub in space.spaces)
    return next(it)


def unflatten_batch(space: gym.Space[Any], arrays: Sequence[np.ndarray]) -> Any:
    """Inverse of :func:`flatten_batch`: rebuild the nested dict/tuple structure around leaf arrays."""
    if not _is_nested(space):
        if len(arrays) != 1:
            raise ValueError(f"expected 1 leaf array for {space!r}, got {len(arrays)}")
        return arrays[0]
    it = iter(arrays)
    try:
        value = _unflatten_from(space, it)
    except StopIteration:
        raise ValueError(f"too few leaf arrays ({len(arrays)}) for {space!r}") from None
    if next(it, None) is not None:
        raise ValueError(f"too many leaf arrays ({len(arrays)}) for {space!r}")
    return value


def allocate(space: gym.Space[Any], prefix_shape: tuple[int, ...]) -> list[np.ndarray]:
    """Zero arrays of shape ``prefix_shape + leaf.shape`` for every leaf, in ``leaves()`` order."""
    prefix = tuple(int(n) for n in prefix_shape)
    return [np.zeros(prefix + leaf.shape, dtype=leaf.dtype) for leaf in leaves(space)]


# ---------------------------------------------------------------------------------------------------
# batch_contains: one precompiled checker per leaf, cached per space object.


_TILE_MAX_ELEMENTS = 4096  # bounds repeated to the batch shape only while that stays this small
_TILE_MAX_SIZES = 32  # distinct batch sizes remembered per leaf


class _LeafCheck:
    """Elementwise ``low <= x <= high`` for one leaf (NaN fails it, as in gymnasium), plus shape/kind.

    Comparing against bounds already repeated to the batch's shape takes numpy's same-shape fast path,
    about three times cheaper than broadcasting for small leaves, so the repeated bounds are cached
    per batch size. Bounds with ``low == -high`` check float batches as ``|x| <= high``: one comparison
    instead of two, exact (negation and ``abs`` round nothing).
    """

    __slots__ = ("name", "shape", "kinds", "exact", "describe", "_low", "_high", "_tiled", "_symmetric",
                 "_whole_range")

    def __init__(
        self, name: str, space: gym.Space[Any], kinds: str, low: np.ndarray, high: np.ndarray,
        exact: frozenset[np.dtype[Any]] = frozenset(),
    ) -> None:
        self.name = name
        self.shape: tuple[int, ...] = tuple(low.shape)
        self.kinds = kinds
        self.exact = exact  # dtypes accepted beyond ``kinds``
        self.describe = str(space)
        self._low, self._high = low, high
        self._tiled: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._symmetric = low.dtype.kind == "f" and bool(np.array_equal(low, -high))
        # an integer dtype whose every value is within the bounds (uint8 frames in [0, 255]): a batch of
        # exactly that dtype holds without looking at its elements
        self._whole_range: np.dtype[Any] | None = None
        if low.dtype.kind in "iu" and high.dtype == low.dtype and low.size:
            info = np.iinfo(low.dtype)
            if int(low.max()) == info.min and int(high.min()) == info.max:
                self._whole_range = low.dtype

    @property
    def symmetric(self) -> bool:
        """Whether float batches are checked as ``|x| <= high`` (bounds with ``low == -high``)."""
        return self._symmetric

    def bounds(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) to compare a batch of k values with: repeated to (k, *shape) while small."""
        got = self._tiled.get(k)
        if got is not None:
            return got
        if k * self._low.size > _TILE_MAX_ELEMENTS:
            return self._low, self._high
        reps = (k,) + (1,) * len(self.shape)
        got = (np.tile(self._low, reps), np.tile(self._high, reps))
        if len(self._tiled) < _TILE_MAX_SIZES:
            self._tiled[k] = got
        return got

    def holds(self, x: np.ndarray, k: int) -> bool:
        """Whether every element of ``x`` (k values of this leaf's shape and dtype kind) is within bounds."""
        if self._whole_range is not None and x.dtype == self._whole_range:
            return True
        low, high = self._tiled.get(k) or self.bounds(k)
        if self._symmetric and x.dtype.kind == "f":  # abs of an int could wrap around: floats only
            return bool(np.count_nonzero(np.abs(x) <= high) == x.size)
        return bool(np.count_nonzero(x >= low) + np.count_nonzero(x <= high) == 2 * x.size)


class _TextCheck(_LeafCheck):
    """The check of a Text leaf: lengths and charset of a batch of strings (``TextRule``), not bounds."""

    __slots__ = ("rule",)

    def __init__(self, name: str, space: gs.Text) -> None:
        super().__init__(name, space, "U", np.zeros((), np.int64), np.zeros((), np.int64))
        self.rule = TextRule(space)

    def holds(self, x: np.ndarray, k: int) -> bool:
        return self.rule.holds(x)


@functools.cache
def _integers_cast_safely_to(dtype: np.dtype[Any]) -> frozenset[np.dtype[Any]]:
    return frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                           np.uint64) if np.can_cast(t, dtype))


def _compile(leaf: Leaf) -> _LeafCheck:
    space = leaf.space
    shape = leaf.shape
    if isinstance(space, gs.Text):
        return _TextCheck(leaf.name, space)
    if isinstance(space, gs.Box):
        kind = np.dtype(space.dtype).kind
        if kind == "f":  # integers only where the float dtype holds every value (int64 -> float32 would round)
            return _LeafCheck(leaf.name, space, "fb", np.array(space.low), np.array(space.high),
                              exact=_integers_cast_safely_to(np.dtype(space.dtype)))
        kinds = "iub" if kind in "iu" else "b"
        return _LeafCheck(leaf.name, space, kinds, np.array(space.low), np.array(space.high))
    if isinstance(space, gs.Discrete):
        start, n = int(space.start), int(space.n)
        return _LeafCheck(
            leaf.name, space, "iu", np.array(start, np.int64), np.array(start + n - 1, np.int64)
        )
    if isinstance(space, gs.MultiDiscrete):
        first = np.asarray(space.start, dtype=np.int64)
        return _LeafCheck(leaf.name, space, "iu", first, first + np.asarray(space.nvec, dtype=np.int64) - 1)
    assert isinstance(space, gs.MultiBinary)  # leaves() admits no other leaf spaces
    return _LeafCheck(leaf.name, space, "biu", np.zeros(shape, np.int8), np.ones(shape, np.int8))


_CHECK_CACHE: dict[int, tuple[weakref.ref[gym.Space[Any]], bool, list[_LeafCheck]]] = {}


def _checks_for(space: gym.Space[Any]) -> tuple[bool, list[_LeafCheck]]:
    """(whether the space is nested, its leaf checks), compiled once per space object."""
    key = id(space)
    entry = _CHECK_CACHE.get(key)
    if entry is not None and entry[0]() is space:
        return entry[1], entry[2]
    nested, checks = isinstance(space, _NESTED), [_compile(leaf) for leaf in leaves(space)]

    def _evict(ref: weakref.ref[gym.Space[Any]], key: int = key, cache: dict[int, Any] = _CHECK_CACHE) -> None:
        # the cache is bound here: at interpreter exit the module global may already be None
        current = cache.get(key)
        if current is not None and current[0] is ref:
            del cache[key]

    with contextlib.suppress(TypeError):  # a space that cannot be weakly referenced is not cached
        _CHECK_CACHE[key] = (weakref.ref(space, _evict), nested, checks)
    return nested, checks


def _where(name: str) -> str:
    return f"leaf {name!r}: " if name else ""


class BatchCheck:
    """``batch_contains`` for one space, its compiled checks looked up once (the Collector checks every
    observation batch; the per-call cache lookup would cost a fifth of a small batch's check)."""

    __slots__ = ("space", "_leaf", "_float_high")

    def __init__(self, space: gym.Space[Any]) -> None:
        self.space = space
        nested, checks = _checks_for(space)
        self._leaf = None if nested else checks[0]
        # symmetric float bounds (|x| <= high) repeated to each float batch shape seen: one lookup per call
        self._float_high: dict[tuple[int, ...], np.ndarray] = {}

    def __call__(self, batch: Any) -> str | None:
        """None if every element of the batch lies in the space, else what batch_contains says."""
        leaf = self._leaf
        if leaf is not None and type(batch) is np.ndarray:
            shape = batch.shape
            high = self._float_high.get(shape) if batch.dtype.kind == "f" else None
            if high is not None:
                if np.count_nonzero(np.abs(batch) <= high) == batch.size:
                    return None
            elif (shape and shape[1:] == leaf.shape and (batch.dtype.kind in leaf.kinds or batch.dtype in leaf.exact)
                  and leaf.holds(batch, shape[0])):
                if leaf.symmetric and batch.dtype.kind == "f" and len(self._float_high) < _TILE_MAX_SIZES:
                    tiled = leaf.bounds(shape[0])[1]
                    if tiled.shape == shape:
                        self._float_high[shape] = tiled
                return None
        return batch_contains(self.space, batch)


def batch_contains(space: gym.Space[Any], batch: Any) -> str | None:
    """Check that every element of a batched nested value lies in ``space``; None if all do.

    Otherwise a short message naming the leaf and the first bad element. Checks structure, shape, dtype
    kind (a float Box takes floats and the integer dtypes its dtype holds exactly, integer spaces take integers, Text takes numpy strings) and
    bounds/ranges (Text: length and charset). The
    per-leaf checks are compiled on first use for each space object, so keep the space unchanged.
    """
    nested, checks = _checks_for(space)
    if nested:
        try:
            arrays = flatten_batch(space, batch)
        except (TypeError, KeyError, ValueError) as exc:
            return str(exc.args[0]) if exc.args else str(exc)
    else:  # one leaf: the per-step case of most envs, checked first without building the messages
        x = batch if type(batch) is np.ndarray else np.asarray(batch)
        check, shape = checks[0], x.shape
        if (shape and shape[1:] == check.shape and (x.dtype.kind in check.kinds or x.dtype in check.exact)
                and check.holds(x, shape[0])):
            return None
        arrays = [x]
    k = -1
    for check, x in zip(checks, arrays):
        shape = x.shape
        if shape[1:] != check.shape or not shape:
            want = ", ".join(["batch", *map(str, check.shape)])
            return f"{_where(check.name)}expected shape ({want}) for {check.describe}, got {shape}"
        if k < 0:
            k = shape[0]
        elif shape[0] != k:
            return f"{_where(check.name)}batch size {shape[0]} differs from the other leaves' {k}"
        if x.dtype.kind not in check.kinds and x.dtype not in check.exact:
            return (f"{_where(check.name)}dtype {x.dtype} does not fit {check.describe}"
                    + (" (its values would be rounded: convert to the space's dtype)" if x.dtype.kind in "iu" else ""))
        if not check.holds(x, k):
            if isinstance(check, _TextCheck):
                return f"{_where(check.name)}{check.rule.explain(x)}"
            low, high = check.bounds(k)
            ok = ((x >= low) & (x <= high)).reshape(k, -1).all(axis=1)
            i = int(np.argmin(ok))
            value = np.array2string(np.asarray(x[i]), threshold=8, precision=6)
            return f"{_where(check.name)}element {i} ({value}) is not in {check.describe}"
    return None


# ---------------------------------------------------------------------------------------------------
# Serialization in Minari 0.5's JSON format (minari/serialization.py).


def space_to_dict(space: gym.Space[Any]) -> dict[str, Any]:
    """A JSON-able description of ``space`` in Minari 0.5's format (``json.dumps`` it to store it)."""
    if isinstance(space, gs.Box):
        return {
            "type": "Box",
            "dtype": str(space.dtype),
            "shape": [int(n) for n in space.shape],
            "low": space.low.tolist(),
            "high": space.high.tolist(),
        }
    if isinstance(space, gs.Discrete):
        return {"type": "Discrete", "dtype": str(space.dtype), "start": int(space.start), "n": int(space.n)}
    if isinstance(space, gs.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "dtype": str(space.dtype),
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
        }
    if isinstance(space, gs.MultiBinary):
        n = space.n
        return {
            "type": "MultiBinary",
            "n": int(n) if isinstance(n, (int, np.integer)) else [int(i) for i in n],
        }
    if isinstance(space, gs.Dict):
        return {"type": "Dict", "subspaces": {key: space_to_dict(sub) for key, sub in space.spaces.items()}}
    if isinstance(space, gs.Tuple):
        return {"type": "Tuple", "subspaces": [space_to_dict(sub) for sub in space.spaces]}
    if isinstance(space, gs.Text):
        return {
            "type": "Text",
            "max_length": int(space.max_length),
            "min_length": int(space.min_length),
            "charset": space.characters,
        }
    raise TypeError(f"cannot serialize {space!r} ({type(space).__name__})")


def space_from_dict(d: Mapping[str, Any] | str) -> gym.Space[Any]:
    """Rebuild a space from :func:`space_to_dict`'s output (or Minari's, as a dict or JSON string)."""
    if isinstance(d, str):
        d = json.loads(d)
    if not isinstance(d, Mapping) or "type" not in d:
        raise ValueError(f"not a serialized space: {d!r}")
    kind = d["type"]
    if kind == "Box":
        dtype = np.dtype(d["dtype"])
        return gs.Box(
            low=np.array(d["low"], dtype=dtype),
            high=np.array(d["high"], dtype=dtype),
            shape=tuple(d["shape"]),
            dtype=dtype,
        )
    if kind == "Discrete":
        dtype = np.dtype(d.get("dtype", "int64"))
        if dtype == np.int64:  # gymnasium's default; older gymnasium releases have no dtype argument
            return gs.Discrete(n=int(d["n"]), start=int(d.get("start", 0)))
        return gs.Discrete(n=int(d["n"]), start=int(d.get("start", 0)), dtype=dtype)
    if kind == "MultiDiscrete":
        start = d.get("start")
        return gs.MultiDiscrete(
            nvec=np.array(d["nvec"]),
            dtype=d.get("dtype", "int64"),
            start=None if start is None else np.array(start),
        )
    if kind == "MultiBinary":
        return gs.MultiBinary(n=d["n"])
    if kind == "Dict":
        # A list of pairs keeps the serialized key order (a plain dict would be sorted by gymnasium).
        return gs.Dict([(key, space_from_dict(sub)) for key, sub in d["subspaces"].items()])
    if kind == "Tuple":
        return gs.Tuple(tuple(space_from_dict(sub) for sub in d["subspaces"]))
    if kind == "Text":
        return gs.Text(max_length=d["max_length"], min_length=d["min_length"], charset=d["charset"])
    raise ValueError(f"unknown space type {kind!r}")
