"""The checks and copies of the episodes handed to EpisodeStore, made before its pending state is touched.

``write_episode`` and ``write_episodes`` run these on what they are given: step arrays and their shapes,
observation/action leaves against the spaces (copied, because callers pass views of ring buffers), seeds
that must fit in 64 bits, and per-episode side data against the structure ``schema`` holds. A failed check
raises and leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Text

from vcollect.errors import ActionError, ObservationError
from vcollect.spaces import Leaf
from vcollect.store.layout.schema import (
    MetadataFields,
    MetadataSchema,
    TreeFields,
    TreeSchema,
    flatten_columns,
)
from vcollect.text_leaves import stored_text_problem

__all__ = ["batch_lists", "batch_seeds", "batch_steps", "copy_leaves", "episode_seed", "episode_steps", "side_data"]


def copy_leaves(
    what: str,
    leaf_list: list[Leaf],
    shapes: list[tuple[int, ...]],
    arrays: list[Any],
    rows: int,
    *,
    copy: bool = True,
) -> list[np.ndarray]:
    """One space's flattened leaves, each checked to have ``rows`` rows of its shape and a dtype that fits
    the space's (``what`` names the space in errors).

    Args:
        what: "observations" or "actions", for the messages.
        leaf_list: the space's leaves.
        shapes: each leaf's shape (without the row axis).
        arrays: the values, one per leaf.
        rows: the rows each value must have.
        copy: copy each value (the caller may change it later); False for arrays handed over (the caller
            never reads or writes them again), which are kept as they are.

    Returns:
        One array per leaf.

    Raises:
        ValueError: a value of the wrong shape or of a dtype that does not fit the leaf's.
        ObservationError: a Text observation leaf holding something else than text of its lengths.
        ActionError: the same for an action leaf.
    """
    copies = []
    for leaf, shape, arr in zip(leaf_list, shapes, arrays):
        a = np.asarray(arr)
        if a.shape[:1] != (rows,) or a.shape[1:] != shape:
            where = f"{what}[{leaf.name!r}]" if leaf.name else what
            raise ValueError(f"{where} must have shape {(rows, *shape)}, got {a.shape}")
        if a.dtype != leaf.dtype and not np.can_cast(a.dtype, leaf.dtype, "same_kind"):
            where = f"{what}[{leaf.name!r}]" if leaf.name else what
            raise ValueError(f"{where} has dtype {a.dtype}, which does not fit the space's {leaf.dtype}")
        if isinstance(leaf.space, Text):  # numpy would cut long strings and turn numbers into text
            problem = stored_text_problem(leaf.space, a)
            if problem is not None:
                where = f"{what}[{leaf.name!r}]" if leaf.name else what
                error = ActionError if what == "actions" else ObservationError
                raise error(f"{where} {problem}")
        copies.append(a.copy() if copy else a)
    return copies


def episode_steps(rewards: Any, terminations: Any, truncations: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One episode's rewards (float64) and termination/truncation flags (bool), copied: each of shape (T,)."""
    rew = np.array(rewards, dtype=np.float64)
    if rew.ndim != 1:
        raise ValueError(f"rewards must be 1-D (T,), got shape {rew.shape}")
    steps = rew.shape[0]
    terms = np.array(terminations, dtype=np.bool_)
    truncs = np.array(truncations, dtype=np.bool_)
    if terms.shape != (steps,) or truncs.shape != (steps,):
        raise ValueError(
            f"terminations/truncations must have shape ({steps},) like rewards, got {terms.shape} and {truncs.shape}"
        )
    return rew, terms, truncs


def batch_steps(
    rewards: Any, terminations: Any, truncations: Any, steps: int, *, copy: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Several episodes' rewards and flags, concatenated: each of shape (``steps``,).

    Args:
        rewards: the rewards (cast to float64).
        terminations: the termination flags (cast to bool).
        truncations: the truncation flags (cast to bool).
        steps: the steps of the episodes together.
        copy: copy them; False for arrays handed over, which are kept where their dtype is already the one
            stored.

    Returns:
        (rewards, terminations, truncations).

    Raises:
        ValueError: an array of another shape than (``steps``,).
    """
    as_array = np.array if copy else np.asarray
    rew = as_array(rewards, dtype=np.float64)
    terms = as_array(terminations, dtype=np.bool_)
    truncs = as_array(truncations, dtype=np.bool_)
    if rew.shape != (steps,) or terms.shape != (steps,) or truncs.shape != (steps,):
        raise ValueError(
            f"rewards/terminations/truncations must have shape ({steps},) (the sum of lengths), got "
            f"{rew.shape}, {terms.shape} and {truncs.shape}"
        )
    return rew, terms, truncs


def batch_lists(
    lengths: Sequence[int] | np.ndarray,
    seeds: Sequence[int | None],
    env_ids: Sequence[int],
    options: Sequence[Mapping[str, Any] | None] | None,
    infos: Sequence[Mapping[str, Any] | None] | None,
) -> tuple[np.ndarray, list[Mapping[str, Any] | None], list[Mapping[str, Any] | None]]:
    """write_episodes' lengths (int64 array), options and infos (lists, None for each when not given),
    checked to be one each per episode, the lengths >= 0."""
    lens = np.asarray(lengths, dtype=np.int64)
    n = len(lens)
    if lens.ndim != 1 or (n and int(lens.min()) < 0):
        raise ValueError(f"lengths must be a 1-D sequence of step counts >= 0, got {lengths!r}")
    opts: list[Mapping[str, Any] | None] = [None] * n if options is None else list(options)
    info_list: list[Mapping[str, Any] | None] = [None] * n if infos is None else list(infos)
    if len(seeds) != n or len(env_ids) != n or len(opts) != n or len(info_list) != n:
        raise ValueError(
            f"got {n} lengths, {len(seeds)} seeds, {len(env_ids)} env ids, {len(opts)} options and "
            f"{len(info_list)} infos: one each per episode"
        )
    return lens, opts, info_list


def episode_seed(seed: int | None) -> tuple[int, bool]:
    """An episode's seed column value and whether it is valid (None: -1, False); it must fit in 64 bits."""
    if seed is None:
        seed_value, seed_valid = -1, False
    else:
        seed_value, seed_valid = int(seed), True
        if not -(2**63) <= seed_value < 2**64:
            raise ValueError(f"seed {seed_value} does not fit in 64 bits (int64 or uint64)")
    return seed_value, seed_valid


def batch_seeds(seeds: Sequence[int | None]) -> tuple[list[int], list[bool], list[int]]:
    """Several episodes' seed column values, which are valid, and the given (not None) seeds, all in 64 bits."""
    seed_values = [-1 if seed is None else int(seed) for seed in seeds]
    valid = [seed is not None for seed in seeds]
    given = [v for v, ok in zip(seed_values, valid) if ok]
    if given and not (min(given) >= -(2**63) and max(given) < 2**64):
        raise ValueError(f"seeds {given} do not all fit in 64 bits (int64 or uint64)")
    return seed_values, valid, given


def side_data(
    schemas: Mapping[str, TreeSchema],
    metadata_schema: MetadataSchema,
    infos: Mapping[str, Any] | None,
    extras: Mapping[str, Any] | None,
    metadata: Mapping[str, Any] | None,
    steps: int,
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, TreeFields], dict[str, np.ndarray], MetadataFields]:
    """One episode's infos/extras columns (copied) and structures, and its metadata values and structure.

    They are checked against the structure the first episode fixed; an episode without any (the Collector's
    usual case) skips that when the structure has none either.
    """
    trees: dict[str, dict[str, np.ndarray]] = {}
    structures = {}
    if infos or extras or schemas["infos"].fields or schemas["extras"].fields:
        for group, tree in (("infos", infos), ("extras", extras)):
            arrays = flatten_columns(tree, group) if tree else {}
            structures[group] = schemas[group].check(arrays, steps)
            trees[group] = {name: np.array(arr) for name, arr in arrays.items()}
    meta: dict[str, np.ndarray] = {}
    meta_fields: dict[str, tuple[str, tuple[int, ...]]] = {}
    if metadata or metadata_schema.fields:
        meta, meta_fields = metadata_schema.check(metadata)
    return trees, structures, meta, meta_fields
