"""Tests of vcollect.spaces: leaf layout, batched nested values, batch checks, Minari serialization."""

from __future__ import annotations

import gc
import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces as gs
from gymnasium.vector.utils import batch_space
from hypothesis import given, settings
from hypothesis import strategies as st
from minari.serialization import deserialize_space, serialize_space

from tests.envs import NarrowDiscreteEnv
from vcollect import Collector, make_vector
from vcollect import spaces as vs
from vcollect.spaces import (
    BatchCheck,
    Leaf,
    allocate,
    batch_contains,
    flatten_batch,
    leaf_values,
    leaves,
    space_from_dict,
    space_to_dict,
    unflatten_batch,
)


def nested_space() -> gs.Dict:
    return gs.Dict(
        {
            "pos": gs.Box(-1.0, 1.0, (3,), dtype=np.float32),
            "inner": gs.Tuple((gs.Discrete(5, start=-2), gs.MultiBinary((2, 2)))),
            "md": gs.MultiDiscrete([3, 4], start=[1, -1]),
            "img": gs.Box(0, 255, (2, 2), dtype=np.uint8),
        },
        seed=0,
    )


# --------------------------------------------------------------------------------------------- leaves


def test_leaves_of_nested_space_in_depth_first_order() -> None:
    space = nested_space()  # a plain dict: gymnasium sorts its keys
    got = leaves(space)
    assert [leaf.path for leaf in got] == [("img",), ("inner", 0), ("inner", 1), ("md",), ("pos",)]
    assert [leaf.name for leaf in got] == ["img", "inner/0", "inner/1", "md", "pos"]
    assert [leaf.shape for leaf in got] == [(2, 2), (), (2, 2), (2,), (3,)]
    assert [leaf.dtype for leaf in got] == [np.uint8, np.int64, np.int8, np.int64, np.float32]
    assert got[1].space == gs.Discrete(5, start=-2)


def test_leaves_follow_space_order_not_sorted_keys() -> None:
    space = gs.Dict(
        [("z", gs.Discrete(2)), ("a", gs.Tuple((gs.Discrete(3), gs.Dict([("y", gs.MultiBinary(1))]))))]
    )
    assert [leaf.name for leaf in leaves(space)] == ["z", "a/0", "a/1/y"]
    assert [leaf.path for leaf in leaves(space)] == [("z",), ("a", 0), ("a", 1, "y")]
    # The serialized key order survives our round trip.
    assert [leaf.name for leaf in leaves(space_from_dict(space_to_dict(space)))] == ["z", "a/0", "a/1/y"]


def test_leaf_of_plain_space_has_empty_path_and_name() -> None:
    (leaf,) = leaves(gs.Box(-1.0, 1.0, (4,), dtype=np.float64))
    assert leaf == Leaf((), "", gs.Box(-1.0, 1.0, (4,), dtype=np.float64), (4,), np.dtype(np.float64))


def test_discrete_leaf_is_stored_in_the_spaces_dtype() -> None:
    (leaf,) = leaves(gs.Discrete(3, dtype=np.int32))
    assert leaf.dtype == np.int32 and leaf.shape == ()
    assert leaves(gs.Discrete(3))[0].dtype == np.int64  # gymnasium's default


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
def test_backends_rings_and_collector_keep_discrete_leaves_in_the_spaces_dtype(backend: str) -> None:
    """One layout: what a backend hands out, what it keeps per env and what the rings allocate agree."""
    envs = make_vector(NarrowDiscreteEnv, 2, backend=backend)
    space = envs.single_observation_space
    expected = [np.dtype(np.int32), np.dtype(np.int8)]
    assert [leaf.dtype for leaf in leaves(space)] == expected == envs.obs_layout.dtypes  # type: ignore[attr-defined]
    with Collector(None, envs, seed=0) as collector:
        obs, _ = envs.reset(seeds=0)
        assert [obs["cell"].dtype, obs["lit"].dtype] == expected
        collector.collect(n_step=10, random=True, reset_before_collect=True)  # the env asserts int16 actions
        assert [a.dtype for a in allocate(space, (1,))] == expected
        batch = collector.buffer.sample(4, np.random.default_rng(0))
        assert [leaf.dtype for leaf in flatten_batch(space, batch["observations"])] == expected
        assert batch["actions"].dtype == np.int16


def test_multi_discrete_keeps_its_dtype() -> None:
    (leaf,) = leaves(gs.MultiDiscrete([[2, 3], [4, 5]], dtype=np.int32))
    assert leaf.dtype == np.int32 and leaf.shape == (2, 2)


@pytest.mark.parametrize(
    "space",
    [
        gs.Sequence(gs.Discrete(2)),
        gs.Graph(node_space=gs.Box(0, 1, (2,)), edge_space=None),
        gs.Dict({"ok": gs.Discrete(2), "bad": gs.Sequence(gs.Discrete(3))}),
    ],
)
def test_unsupported_spaces_raise_type_error_naming_them(space: gym.Space) -> None:
    with pytest.raises(TypeError, match="Sequence|Graph"):
        leaves(space)


# ----------------------------------------------------------------------------- flatten / unflatten


def test_flatten_returns_the_leaf_arrays_themselves_and_unflatten_inverts() -> None:
    space = nested_space()
    batch = batch_space(space, 6).sample()
    arrays = flatten_batch(space, batch)
    expected = [batch["img"], batch["inner"][0], batch["inner"][1], batch["md"], batch["pos"]]
    assert len(arrays) == len(expected)
    assert all(a is e for a, e in zip(arrays, expected))  # no copies
    rebuilt = unflatten_batch(space, arrays)
    assert list(rebuilt) == ["img", "inner", "md", "pos"]
    assert isinstance(rebuilt["inner"], tuple)
    assert rebuilt["pos"] is batch["pos"] and rebuilt["inner"][1] is batch["inner"][1]


def test_flatten_works_for_single_values_and_time_sequences() -> None:
    space = gs.Tuple((gs.Box(0.0, 1.0, (2,)), gs.Dict({"a": gs.Box(0.0, 1.0, (1,))})))
    single = (np.zeros(2, np.float32), {"a": np.ones(1, np.float32)})
    flat = flatten_batch(space, single)
    assert flat[0] is single[0] and flat[1] is single[1]["a"]
    seq = (np.zeros((7, 5, 2), np.float32), {"a": np.ones((7, 5, 1), np.float32)})  # (T, batch, ...)
    back = unflatten_batch(space, flatten_batch(space, seq))
    assert back[0] is seq[0] and back[1]["a"] is seq[1]["a"]


def test_flatten_of_plain_space_wraps_the_value() -> None:
    x = np.arange(4)
    (out,) = flatten_batch(gs.Discrete(4), x)
    assert out is x
    assert unflatten_batch(gs.Discrete(4), [x]) is x


def test_flatten_rejects_wrong_structure() -> None:
    space = gs.Dict({"a": gs.Discrete(2), "b": gs.Tuple((gs.Discrete(2), gs.Discrete(3)))})
    with pytest.raises(KeyError, match="'b'"):
        flatten_batch(space, {"a": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match="2 parts"):
        flatten_batch(space, {"a": np.zeros(2, np.int64), "b": (np.zeros(2, np.int64),)})
    with pytest.raises(TypeError, match="dict"):
        flatten_batch(space, np.zeros(3))
    with pytest.raises(TypeError, match="b: expected a tuple"):
        leaf_values(space, {"a": 1, "b": 2})
    with pytest.raises(ValueError, match="b: expected 2 parts"):
        leaf_values(space, {"a": 1, "b": (1, 2, 0)})


def test_leaf_values_hands_the_leaves_over_as_they_are() -> None:
    space = gs.Dict({"a": gs.Discrete(2), "b": gs.Tuple((gs.Discrete(2), gs.Dict({"c": gs.Box(0.0, 1.0)})))})
    c = [0.5]
    assert leaf_values(space, {"b": (np.int64(1), {"c": c}), "a": 1}) == [1, np.int64(1), c]
    assert leaf_values(space, {"b": (np.int64(1), {"c": c}), "a": 1})[2] is c  # not made an array
    assert leaf_values(gs.Discrete(3), 2) == [2]


def test_unflatten_rejects_wrong_number_of_arrays() -> None:
    space = nested_space()
    arrays = allocate(space, (2,))
    with pytest.raises(ValueError, match="too few"):
        unflatten_batch(space, arrays[:-1])
    with pytest.raises(ValueError, match="too many"):
        unflatten_batch(space, [*arrays, np.zeros(2)])
    with pytest.raises(ValueError):
        unflatten_batch(gs.Discrete(2), [])


def test_allocate_gives_zeros_with_prefix_shape_per_leaf() -> None:
    space = nested_space()
    arrays = allocate(space, (3, 5))
    for arr, leaf in zip(arrays, leaves(space), strict=True):
        assert arr.shape == (3, 5, *leaf.shape)
        assert arr.dtype == leaf.dtype
        assert not arr.any()


# ---------------------------------------------------------------------------------- batch_contains

bounded_box = gs.Box(
    low=np.array([-4.8, -np.inf, -0.4, 0.0], np.float32),
    high=np.array([4.8, np.inf, 0.4, 1.0], np.float32),
    dtype=np.float32,
)
leaf_spaces = [
    bounded_box,
    gs.Box(-2.0, 3.0, (), dtype=np.float64),
    gs.Box(-np.inf, np.inf, (2,), dtype=np.float32),
    gs.Box(-3, 5, (2, 2), dtype=np.int16),
    gs.Discrete(4),
    gs.Discrete(3, start=-2),
    gs.Discrete(5, start=7),
    gs.MultiDiscrete([3, 2, 4], start=[0, -1, 5]),
    gs.MultiBinary(3),
    gs.MultiBinary((2, 2)),
]


def _values(space: gym.Space, k: int) -> st.SearchStrategy[np.ndarray]:
    """k valid samples of the leaf space, then a few entries replaced by values near or past its bounds."""
    (leaf,) = leaves(space)
    size = int(np.prod(leaf.shape))
    if leaf.dtype.kind == "f":
        edge = st.one_of(
            st.floats(-6.0, 6.0, width=32),
            st.sampled_from([np.inf, -np.inf, np.nan, 4.8, -4.8, 0.4, -0.4, 1.0, 0.0, -2.0, 3.0]),
        )
    else:
        edge = st.integers(-5, 14)
    corruption = st.tuples(st.integers(0, k - 1), st.integers(0, size - 1), edge)

    def build(seed: int, corruptions: list[tuple[int, int, float]]) -> np.ndarray:
        space.seed(seed)
        batch = np.stack([np.asarray(space.sample(), dtype=leaf.dtype) for _ in range(k)])
        flat = batch.reshape(k, size)
        for i, j, v in corruptions:
            flat[i, j] = v
        return batch

    return st.builds(build, st.integers(0, 2**16), st.lists(corruption, max_size=3))


_BATCH_CHECKS: dict[int, BatchCheck] = {}  # one per leaf space, kept across examples like the Collector's


@settings(max_examples=150, deadline=None)
@given(data=st.data(), which=st.integers(0, len(leaf_spaces) - 1), k=st.integers(1, 6))
def test_batch_contains_agrees_with_gymnasium_contains(data: st.DataObject, which: int, k: int) -> None:
    space = leaf_spaces[which]
    batch = data.draw(_values(space, k))
    inside = [space.contains(np.asarray(batch[i])) for i in range(k)]
    result = batch_contains(space, batch)
    if all(inside):
        assert result is None
    else:
        assert result is not None
        assert f"element {inside.index(False)} " in result
    # the Collector's precompiled form says the same, also once it has seen valid batches of this shape
    check = _BATCH_CHECKS.setdefault(which, BatchCheck(space))
    assert check(batch) == result
    assert BatchCheck(space)(batch) == result


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from([np.uint8, np.int8, np.uint16]),
    narrow=st.tuples(st.integers(0, 1), st.integers(0, 1)),
    values=st.lists(st.integers(-130, 65_540), min_size=6, max_size=6),
    wide=st.booleans(),
)
def test_integer_boxes_over_the_whole_dtype_range_are_checked_as_any_other(
    dtype: type, narrow: tuple[int, int], values: list[int], wide: bool
) -> None:
    """A Box whose bounds are its dtype's whole range (uint8 frames in [0, 255]) takes any batch of that
    dtype without a look at its elements; batches of another dtype, and boxes one short of the whole range,
    are still checked element by element. Reference: the bounds compared as Python ints."""
    info = np.iinfo(dtype)
    space = gs.Box(int(info.min) + narrow[0], int(info.max) - narrow[1], (3,), dtype=dtype)
    if wide:  # int64 values, possibly outside the dtype's range
        batch = np.array(values, np.int64).reshape(2, 3)
    else:
        batch = np.array([min(max(v, int(info.min)), int(info.max)) for v in values], dtype).reshape(2, 3)
    inside = all(int(space.low[0]) <= int(v) <= int(space.high[0]) for v in batch.ravel())
    assert (BatchCheck(space)(batch) is None) == inside
    assert (batch_contains(space, batch) is None) == inside


def test_batch_contains_discrete_with_nonzero_start() -> None:
    space = gs.Discrete(3, start=-2)
    assert batch_contains(space, np.array([-2, -1, 0])) is None
    assert batch_contains(space, np.array([-2, -3, 0])) == f"element 1 (-3) is not in {space}"
    assert "element 2 (1)" in (batch_contains(space, np.array([0, 0, 1])) or "")
    space7 = gs.Discrete(2, start=7)
    assert batch_contains(space7, np.array([7, 8], dtype=np.int32)) is None
    assert "element 0" in (batch_contains(space7, np.array([0, 8])) or "")


def test_batch_contains_rejects_negative_multi_binary_and_nan_in_unbounded_box() -> None:
    assert batch_contains(gs.MultiBinary(3), np.array([[0, 1, 1], [1, 0, 0]], np.int8)) is None
    assert "element 1" in (
        batch_contains(gs.MultiBinary(3), np.array([[0, 1, 1], [1, -1, 0]], np.int8)) or ""
    )
    unbounded = gs.Box(-np.inf, np.inf, (2,), dtype=np.float32)
    assert batch_contains(unbounded, np.array([[1e30, -np.inf], [0.0, 1.0]], np.float32)) is None
    assert "element 1" in (batch_contains(unbounded, np.array([[0.0, 0.0], [np.nan, 1.0]], np.float32)) or "")


def test_batch_contains_cartpole_like_batch() -> None:
    obs = np.zeros((8, 4), np.float32)
    assert batch_contains(bounded_box, obs) is None
    obs[5, 2] = 0.5
    msg = batch_contains(bounded_box, obs)
    assert msg is not None and "element 5" in msg
    obs[5, 2] = 0.0
    obs[3, 1] = np.nan
    assert "element 3" in (batch_contains(bounded_box, obs) or "")


def test_batch_contains_nested_names_the_leaf() -> None:
    space = nested_space()
    batch = batch_space(space, 4).sample()
    assert batch_contains(space, batch) is None
    batch["inner"][1][2, 0, 1] = 2
    msg = batch_contains(space, batch)
    assert msg is not None and "'inner/1'" in msg and "element 2" in msg
    assert BatchCheck(space)(batch) == msg


def test_batch_contains_reports_structure_shape_dtype_and_size_problems() -> None:
    space = nested_space()
    batch = batch_space(space, 4).sample()
    assert "'md'" in (batch_contains(space, {k: v for k, v in batch.items() if k != "md"}) or "")
    bad_shape = dict(batch, pos=np.zeros((4, 2), np.float32))
    assert "'pos'" in (batch_contains(space, bad_shape) or "")
    bad_size = dict(batch, img=np.zeros((3, 2, 2), np.uint8))
    assert "batch size" in (batch_contains(space, bad_size) or "")
    bad_size = dict(batch, pos=np.zeros((3, 3), np.float32))  # the last leaf
    assert "'pos': batch size 3 differs" in (batch_contains(space, bad_size) or "")
    bad_dtype = dict(batch, md=batch["md"].astype(np.float64))
    assert "dtype float64" in (batch_contains(space, bad_dtype) or "")
    assert batch_contains(gs.Discrete(2), np.int64(1)) is not None  # not a batch
    assert batch_contains(gs.Discrete(2), np.array([0.0, 1.0])) is not None  # floats are not actions
    assert batch_contains(gs.Discrete(2), [0, 1, 1]) is None  # lists are converted


def test_batch_contains_accepts_other_real_dtypes_for_float_box() -> None:
    assert batch_contains(bounded_box, np.zeros((2, 4), np.float64)) is None
    assert batch_contains(bounded_box, np.zeros((2, 4), np.int16)) is None
    assert batch_contains(bounded_box, np.zeros((2, 4), np.int64)) is not None  # float32 would round them
    assert batch_contains(gs.Box(0, 5, (1,), dtype=np.int64), np.zeros((2, 1), np.float32)) is not None


def test_batch_contains_cache_follows_space_objects() -> None:
    space = gs.Box(0.0, 1.0, (2,), dtype=np.float32)
    assert batch_contains(space, np.full((1, 2), 0.5, np.float32)) is None
    ref = vs._CHECK_CACHE[id(space)][0]
    assert ref() is space
    del space
    gc.collect()
    assert all(entry[0] is not ref for entry in vs._CHECK_CACHE.values())  # evicted with its space
    other = gs.Box(0.0, 0.1, (2,), dtype=np.float32)  # may reuse the id: must not reuse the checker
    assert batch_contains(other, np.full((1, 2), 0.5, np.float32)) is not None


# ----------------------------------------------------------------------------------- serialization

serializable_spaces = [
    gs.Box(-1.0, 1.0, (3,), dtype=np.float32),
    bounded_box,
    gs.Box(0, 255, (2, 3), dtype=np.uint8),
    gs.Box(-2.5, 7.0, (), dtype=np.float64),
    gs.Discrete(4),
    gs.Discrete(3, start=-2),
    gs.MultiDiscrete([3, 4, 5]),
    gs.MultiDiscrete([[2, 3], [4, 5]], start=[[1, 0], [-3, 2]]),
    gs.MultiBinary(5),
    gs.MultiBinary([2, 3]),
    gs.Text(8, min_length=2, charset="abc"),
    nested_space(),
    gs.Tuple((gs.Discrete(2), gs.Dict({"x": gs.Box(-1.0, 1.0, (1,)), "y": gs.Tuple((gs.MultiBinary(2),))}))),
]


def _same_space(a: gym.Space, b: gym.Space) -> bool:
    """Equality that also compares Box bounds exactly (gymnasium's Box.__eq__ uses allclose)."""
    if a != b or type(a) is not type(b):
        return False
    if isinstance(a, gs.Box):
        return np.array_equal(a.low, b.low) and np.array_equal(a.high, b.high) and a.dtype == b.dtype
    if isinstance(a, (gs.Dict, gs.Tuple)):
        subs_a = list(a.spaces.values()) if isinstance(a, gs.Dict) else list(a.spaces)
        subs_b = list(b.spaces.values()) if isinstance(b, gs.Dict) else list(b.spaces)
        return all(_same_space(x, y) for x, y in zip(subs_a, subs_b, strict=True))
    return True


@pytest.mark.parametrize("space", serializable_spaces, ids=lambda s: type(s).__name__)
def test_serialization_matches_minari_both_ways(space: gym.Space) -> None:
    ours = space_to_dict(space)
    text = json.dumps(ours)
    # Same description as Minari's serializer, key order included.
    assert text == serialize_space(space)
    assert json.loads(serialize_space(space)) == ours
    # Minari reads ours, we read Minari's (string or dict), and our own round trip is exact.
    assert _same_space(deserialize_space(text), space)
    assert _same_space(deserialize_space(ours), space)
    assert _same_space(space_from_dict(serialize_space(space)), space)
    assert _same_space(space_from_dict(serialize_space(space, to_string=False)), space)
    assert _same_space(space_from_dict(json.loads(text)), space)


@settings(max_examples=40, deadline=None)
@given(
    bounds=st.lists(
        st.tuples(st.floats(-1e6, 1e6, width=32), st.floats(0, 1e6, width=32)), min_size=1, max_size=5
    ),
    inf_low=st.booleans(),
)
def test_box_round_trip_is_exact(bounds: list[tuple[float, float]], inf_low: bool) -> None:
    low = np.array([lo for lo, _ in bounds], np.float32)
    high = low + np.array([w for _, w in bounds], np.float32)
    if inf_low:
        low[0] = -np.inf
    space = gs.Box(low, high, dtype=np.float32)
    text = json.dumps(space_to_dict(space))
    assert text == serialize_space(space)
    back = space_from_dict(text)
    assert _same_space(back, space)
    assert _same_space(deserialize_space(text), space)


def test_discrete_dtype_survives_our_round_trip() -> None:
    space = gs.Discrete(3, start=1, dtype=np.int32)
    d = space_to_dict(space)
    assert d == {"type": "Discrete", "dtype": "int32", "start": 1, "n": 3}
    back = space_from_dict(d)
    assert back == space and back.dtype == np.int32
    assert deserialize_space(d) == gs.Discrete(3, start=1)  # Minari reads it (as its int64 default)


def test_serialization_errors() -> None:
    with pytest.raises(TypeError, match="Sequence"):
        space_to_dict(gs.Sequence(gs.Discrete(2)))
    with pytest.raises(ValueError, match="unknown space type 'Blob'"):
        space_from_dict({"type": "Blob"})
    with pytest.raises(ValueError):
        space_from_dict({"n": 3})


def test_batch_check_keeps_rejecting_after_it_has_seen_valid_batches_of_the_shape() -> None:
    space = gs.Box(low=-np.array([4.8, np.inf], np.float32), high=np.array([4.8, np.inf], np.float32))
    check = BatchCheck(space)
    good = np.array([[1.0, 1e30], [-4.8, -np.inf], [0.0, 0.0]], np.float32)
    assert check(good) is None and check(good) is None  # the second call takes the cached bounds
    for bad in ([[1.0, 0.0], [4.9, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0], [np.nan, 0.0]]):
        batch = np.array(bad, np.float32)
        assert check(batch) == batch_contains(space, batch) is not None
    assert "element 1" in (check(np.array([[1.0, 0.0], [4.9, 0.0], [0.0, 0.0]], np.float32)) or "")


def test_a_float_box_refuses_integers_its_dtype_would_round() -> None:
    """int64 values in a float32 Box are refused (float32 holds integers exactly only up to 2**24); integer
    dtypes the float dtype holds exactly are accepted, as gymnasium's Box.contains does with np.can_cast."""
    import numpy as np
    from gymnasium import spaces as gs

    from vcollect.spaces import BatchCheck, batch_contains

    box32, box64 = gs.Box(-1e9, 1e9, (2,), np.float32), gs.Box(-1e9, 1e9, (2,), np.float64)
    big = np.array([[2**24 + 1, 0]], np.int64)
    for check in (BatchCheck(box32), lambda b: batch_contains(box32, b)):
        assert "would be rounded" in (check(big) or "")
        assert check(np.array([[7, 0]], np.int16)) is None and check(np.array([[7, 0]], np.uint8)) is None
        assert check(np.array([[0.5, 0]], np.float64)) is None  # floats are range-checked, as before
    assert batch_contains(box64, np.array([[7, 0]], np.int32)) is None
