"""Tests of vcollect.policies: RandomPolicy, TorchPolicy, EpsilonGreedy and the lazy torch import."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch  # a dev dependency; the RandomPolicy tests never let vcollect.policies import it
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from vcollect.errors import ActionError
from vcollect.policies import EpsilonGreedy, Policy, RandomPolicy, SupportsExplorationNoise, TorchPolicy

# ---------------------------------------------------------------------------------------------------
# helpers


def rows(space: gym.Space[Any], batch: Any, k: int) -> list[Any]:
    """Split a batched nested value into its k single values (the obvious reference walk)."""
    if isinstance(space, spaces.Dict):
        assert isinstance(batch, dict) and list(batch) == list(space.spaces)
        per_key = {key: rows(sub, batch[key], k) for key, sub in space.spaces.items()}
        return [{key: per_key[key][i] for key in space.spaces} for i in range(k)]
    if isinstance(space, spaces.Tuple):
        assert isinstance(batch, tuple) and len(batch) == len(space.spaces)
        parts = [rows(sub, part, k) for sub, part in zip(space.spaces, batch)]
        return [tuple(part[i] for part in parts) for i in range(k)]
    assert isinstance(batch, np.ndarray)
    expected_dtype = np.dtype(np.int64) if isinstance(space, spaces.Discrete) else space.dtype
    assert batch.dtype == expected_dtype, (batch.dtype, space)
    assert batch.shape == (k, *(space.shape or ())), (batch.shape, space)
    return [batch[i, ...] for i in range(k)]  # 0-d arrays, not numpy scalars, for shape () leaves


def assert_batch_in_space(space: gym.Space[Any], batch: Any, k: int) -> None:
    """Every row of the batch has the leaf shapes/dtypes of the space and lies in it."""
    for i, value in enumerate(rows(space, batch, k)):
        assert space.contains(value), f"row {i} = {value!r} not in {space}"


def assert_batches_equal(a: Any, b: Any) -> None:
    """Exact equality of two batched nested values (structure, dtypes, values)."""
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_batches_equal(a[key], b[key])
    elif isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_batches_equal(x, y)
    else:
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------------
# hypothesis strategies over action spaces

shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
FLOAT_DTYPES = [np.float16, np.float32, np.float64]
INT_DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.uint64]
BOOL: Any = np.bool_  # (gymnasium's Box stubs reject a bool dtype with integer bounds)


@st.composite
def float_boxes(draw: st.DrawFn) -> spaces.Box:
    """Float Box with per-coordinate bounds: finite (incl. the dtype extremes), half- or unbounded."""
    dtype = np.dtype(draw(st.sampled_from(FLOAT_DTYPES)))
    shape = draw(shapes)
    finfo = np.finfo(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    finite = st.one_of(
        st.floats(-100, 100, width=16),
        st.sampled_from([float(finfo.min), float(finfo.max), 0.0, -1e-3]),
    )
    low = np.empty(size, dtype=dtype)
    high = np.empty(size, dtype=dtype)
    for i in range(size):
        a, b = sorted([draw(finite), draw(finite)])
        low[i] = -np.inf if draw(st.booleans()) else a
        high[i] = np.inf if draw(st.booleans()) else b
    return spaces.Box(low.reshape(shape), high.reshape(shape), shape=shape, dtype=dtype)


@st.composite
def int_boxes(draw: st.DrawFn) -> spaces.Box:
    """Integer Box, bounds anywhere in the dtype range, signed ones sometimes unbounded (+-inf)."""
    dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(INT_DTYPES)))
    shape = draw(shapes)
    info = np.iinfo(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    near = st.integers(max(int(info.min), -50), min(int(info.max), 50))
    edge = st.sampled_from([int(info.min), int(info.max), int(info.max) - 1, int(info.min) + 1])
    bound = st.one_of(near, edge, st.integers(int(info.min), int(info.max)))
    pairs = [sorted([draw(bound), draw(bound)]) for _ in range(size)]
    if dtype.kind == "i" and draw(st.booleans()):
        low = np.array([-np.inf if draw(st.booleans()) else a for a, _ in pairs], dtype=np.float64)
        high = np.array([np.inf if draw(st.booleans()) else b for _, b in pairs], dtype=np.float64)
        # exact bounds as Python ints where finite: build the Box from int arrays, then mark unbounded
        low_int = np.array(
            [info.min if np.isinf(x) else p[0] for x, p in zip(low, pairs)], dtype=dtype
        ).reshape(shape)
        high_int = np.array(
            [info.max if np.isinf(x) else p[1] for x, p in zip(high, pairs)], dtype=dtype
        ).reshape(shape)
        # (float64 cannot hold every int64 bound exactly, so mark +-inf coordinates as gymnasium would)
        box = spaces.Box(low_int, high_int, shape=shape, dtype=dtype)
        box.bounded_below = ~np.isinf(low).reshape(shape)
        box.bounded_above = ~np.isinf(high).reshape(shape)
        return box
    low_arr = np.array([a for a, _ in pairs], dtype=dtype).reshape(shape)
    high_arr = np.array([b for _, b in pairs], dtype=dtype).reshape(shape)
    return spaces.Box(low_arr, high_arr, shape=shape, dtype=dtype)


leaf_spaces = st.one_of(
    float_boxes(),
    int_boxes(),
    st.builds(lambda shape: spaces.Box(0, 1, shape=shape, dtype=BOOL), shapes),
    st.builds(spaces.Discrete, st.integers(1, 10), start=st.integers(-5, 5)),
    st.builds(spaces.Discrete, st.sampled_from([2**52, 2**53 + 3, 2**62])),
    st.builds(
        lambda nvec, start: spaces.MultiDiscrete(nvec, start=[start] * len(nvec)),
        st.lists(st.integers(1, 6), min_size=1, max_size=3),
        st.integers(-3, 3),
    ),
    st.builds(spaces.MultiBinary, st.sampled_from([1, 3, [2, 2]])),
)
action_spaces = st.recursive(
    leaf_spaces,
    lambda children: st.one_of(
        st.builds(spaces.Tuple, st.lists(children, min_size=1, max_size=3)),
        st.builds(
            lambda subs: spaces.Dict({f"k{i}": sub for i, sub in enumerate(subs)}),
            st.lists(children, min_size=1, max_size=3),
        ),
    ),
    max_leaves=4,
)


# ---------------------------------------------------------------------------------------------------
# RandomPolicy


@settings(max_examples=250, deadline=None)
@given(space=action_spaces, seed=st.integers(0, 2**32), k=st.integers(0, 9))
def test_random_policy_actions_lie_in_the_space(space: gym.Space[Any], seed: int, k: int) -> None:
    policy = RandomPolicy(space, seed=seed)
    actions, state = policy(np.zeros((k, 3), dtype=np.float32))
    assert state is None
    assert_batch_in_space(space, actions, k)
    assert policy.actions_in_space  # what lets a collector skip checking them


@settings(max_examples=60, deadline=None)
@given(space=action_spaces, seed=st.integers(0, 2**32))
def test_random_policy_is_deterministic_for_a_seed(space: gym.Space[Any], seed: int) -> None:
    a, b = RandomPolicy(space, seed=seed), RandomPolicy(space, seed=seed)
    for k in (1, 5, 3):
        assert_batches_equal(a.sample(k), b.sample(k))


def test_random_policy_differs_between_seeds() -> None:
    space = spaces.Box(-1.0, 1.0, shape=(16,), dtype=np.float32)
    a = RandomPolicy(space, seed=1).sample(4)
    b = RandomPolicy(space, seed=2).sample(4)
    assert not np.array_equal(a, b)


def test_random_policy_batch_size_comes_from_the_observations() -> None:
    space = spaces.Dict(
        {"d": spaces.Discrete(3), "t": spaces.Tuple((spaces.MultiBinary(2), spaces.Box(0, 1)))}
    )
    policy = RandomPolicy(space, seed=0)
    nested_obs = {"pos": (np.zeros((7, 2)), np.zeros(7)), "img": np.zeros((7, 4, 4))}
    for obs, k in [(np.zeros((5, 4)), 5), (nested_obs, 7), (np.zeros((0, 4)), 0), ([1, 2], 2)]:
        actions, _ = policy(obs, state="ignored")
        assert_batch_in_space(space, actions, k)


def test_random_policy_discrete_is_uniform_over_start_to_end() -> None:
    policy = RandomPolicy(spaces.Discrete(3, start=-1), seed=0)
    draws = policy.sample(30_000)
    values, counts = np.unique(draws, return_counts=True)
    assert values.tolist() == [-1, 0, 1]
    np.testing.assert_allclose(counts / draws.size, 1 / 3, atol=0.015)


def test_random_policy_box_distributions_follow_boundedness_like_gymnasium() -> None:
    low = np.array([-2.0, 3.0, -np.inf, -np.inf])
    high = np.array([2.0, np.inf, -5.0, np.inf])
    space = spaces.Box(low, high, dtype=np.float64)
    draws = RandomPolicy(space, seed=0).sample(40_000)
    # uniform on [-2, 2]: mean 0, variance 16/12; exponential from 3 upward / from -5 downward: mean
    # offset 1; unbounded: standard normal
    np.testing.assert_allclose(draws.mean(axis=0), [0.0, 4.0, -6.0, 0.0], atol=0.03)
    np.testing.assert_allclose(draws.var(axis=0), [16 / 12, 1.0, 1.0, 1.0], rtol=0.05)
    assert draws[:, 0].min() >= -2 and draws[:, 0].max() <= 2
    assert draws[:, 1].min() >= 3 and draws[:, 2].max() <= -5


def test_random_policy_integer_box_covers_its_range() -> None:
    space = spaces.Box(np.array([0, -3]), np.array([1, 3]), dtype=np.int32)
    draws = RandomPolicy(space, seed=0).sample(5_000)
    assert set(draws[:, 0].tolist()) == {0, 1}
    assert set(draws[:, 1].tolist()) == set(range(-3, 4))


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
def test_random_policy_half_bounded_integer_box_saturates_at_the_dtype_limits(dtype: Any) -> None:
    info = np.iinfo(dtype)
    space = spaces.Box(
        np.array([info.max - 1, info.min], dtype=dtype),
        np.array([info.max, info.min + 1], dtype=dtype),
        dtype=dtype,
    )
    space.bounded_above = np.array([False, True])  # as gymnasium marks high=+inf / low=-inf on int Boxes
    space.bounded_below = np.array([True, False])
    draws = RandomPolicy(space, seed=0).sample(2_000)
    assert draws.dtype == dtype
    assert set(draws[:, 0].tolist()) == {int(info.max) - 1, int(info.max)}
    assert set(draws[:, 1].tolist()) == {int(info.min), int(info.min) + 1}


def test_random_policy_image_box_covers_its_range() -> None:
    space = spaces.Box(0, 3, shape=(8, 8), dtype=np.uint8)
    draws = RandomPolicy(space, seed=0).sample(50)
    assert draws.dtype == np.uint8
    assert set(np.unique(draws).tolist()) == {0, 1, 2, 3}


def test_random_policy_multi_discrete_and_multi_binary_cover_their_values() -> None:
    md = RandomPolicy(spaces.MultiDiscrete([2, 5], start=[-1, 10]), seed=0).sample(10_000)
    assert set(md[:, 0].tolist()) == {-1, 0}
    assert set(md[:, 1].tolist()) == set(range(10, 15))
    np.testing.assert_allclose(np.bincount(md[:, 1] - 10) / len(md), 0.2, atol=0.015)
    mb = RandomPolicy(spaces.MultiBinary([2, 3]), seed=0).sample(10_000)
    np.testing.assert_allclose(mb.mean(axis=0), 0.5, atol=0.02)


def test_random_policy_rejects_unsupported_spaces() -> None:
    with pytest.raises(TypeError, match="Sequence"):
        RandomPolicy(spaces.Dict({"a": spaces.Discrete(2), "t": spaces.Sequence(spaces.Discrete(5))}))


def test_policies_satisfy_the_protocols() -> None:
    policy = RandomPolicy(spaces.Discrete(2))
    assert isinstance(policy, Policy)
    assert not isinstance(policy, SupportsExplorationNoise)
    assert isinstance(EpsilonGreedy(policy, spaces.Discrete(2), 0.1), SupportsExplorationNoise)


# ---------------------------------------------------------------------------------------------------
# lazy torch import


def test_importing_policies_does_not_import_torch() -> None:
    code = (
        "import sys, vcollect.policies as p; assert 'torch' not in sys.modules, 'torch imported'; "
        "p.RandomPolicy; p.EpsilonGreedy; p.TorchPolicy; assert 'torch' in sys.modules; print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# ---------------------------------------------------------------------------------------------------
# EpsilonGreedy


class ConstantPolicy:
    """Always action 0, for counting how many rows exploration changed."""

    def __call__(self, obs: Any, state: Any = None) -> tuple[np.ndarray, None]:
        return np.zeros(len(obs), dtype=np.int64), None


def test_epsilon_greedy_replaces_a_fraction_epsilon_of_rows_with_random_actions() -> None:
    space = spaces.Discrete(10)
    policy = EpsilonGreedy(ConstantPolicy(), space, epsilon=0.3, seed=0)
    obs = np.zeros((20_000, 4))
    actions, state = policy(obs)
    assert state is None and not actions.any()
    noisy = policy.add_exploration_noise(actions, obs)
    assert not actions.any(), "the input actions were modified"
    # a replaced row is uniform over 10 actions, so 0.3 * 9/10 of rows change
    assert abs((noisy != 0).mean() - 0.27) < 0.015
    assert set(noisy.tolist()) == set(range(10))


def test_epsilon_greedy_extremes_and_determinism() -> None:
    space = spaces.Discrete(4)
    actions = np.zeros(64, dtype=np.int64)
    obs = np.zeros((64, 2))
    kept = EpsilonGreedy(ConstantPolicy(), space, 0.0, seed=0).add_exploration_noise(actions, obs)
    np.testing.assert_array_equal(kept, actions)
    a = EpsilonGreedy(ConstantPolicy(), space, 1.0, seed=5).add_exploration_noise(actions, obs)
    b = EpsilonGreedy(ConstantPolicy(), space, 1.0, seed=5).add_exploration_noise(actions, obs)
    np.testing.assert_array_equal(a, b)
    assert set(a.tolist()) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="epsilon"):
        EpsilonGreedy(ConstantPolicy(), space, 1.5)


def test_epsilon_greedy_replaces_whole_nested_actions() -> None:
    space = spaces.Dict({"a": spaces.Discrete(1000), "b": spaces.Discrete(1000)})
    k = 2_000
    actions = {"a": np.zeros(k, dtype=np.int64), "b": np.zeros(k, dtype=np.int64)}
    noisy = EpsilonGreedy(ConstantPolicy(), space, 0.5, seed=0).add_exploration_noise(actions, None)
    changed_a, changed_b = noisy["a"] != 0, noisy["b"] != 0
    # both leaves of a row are replaced together (a value of 0 by chance is rare: 1/1000)
    assert (changed_a != changed_b).mean() < 0.01
    assert 0.45 < changed_a.mean() < 0.55
    assert_batch_in_space(space, noisy, k)


# ---------------------------------------------------------------------------------------------------
# TorchPolicy


def mlp(seed: int = 0) -> Any:
    """The 4-64-64-2 MLP of a CartPole policy."""
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))


def cartpole_obs(k: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(k, 4)).astype(np.float32)


@pytest.mark.parametrize("start", [0, 3])
def test_torch_policy_discrete_argmax_matches_torch(start: int) -> None:
    net = mlp()
    policy = TorchPolicy(net, spaces.Discrete(2, start=start))
    obs = cartpole_obs(256)
    actions, state = policy(obs)
    assert state is None
    expected = net(torch.as_tensor(obs)).argmax(dim=-1).numpy() + start
    assert actions.dtype == np.int64 and actions.shape == (256,)
    np.testing.assert_array_equal(actions, expected)
    assert len(set(expected.tolist())) == 2, "the test needs both actions to be chosen somewhere"
    # float64 observations are converted to float32, same answer
    np.testing.assert_array_equal(policy(obs.astype(np.float64))[0], expected)


class Cast(torch.nn.Module):
    """out = obs in ``dtype`` (logits chosen exactly by the test, in the dtype under test)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, obs: Any) -> Any:
        return obs.to(self.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("k", [7, 40_000])  # small batches take numpy's argmax, large ones torch's
def test_torch_policy_discrete_argmax_ties_nan_and_inf_like_torch(dtype: torch.dtype, k: int) -> None:
    nan, inf = float("nan"), float("inf")
    rows = [[1, 3, 3], [2, 2, 2], [1, nan, 5], [nan, nan, 0], [-inf, -inf, -inf], [0, inf, nan], [-0.0, 0.0, -1]]
    obs = np.resize(np.array(rows, dtype=np.float32), (k, 3))
    actions, _ = TorchPolicy(Cast(dtype), spaces.Discrete(3, start=-1))(obs)
    expected = torch.as_tensor(obs).to(dtype).argmax(dim=-1).numpy() - 1
    assert actions.dtype == np.int64 and actions.shape == (k,)
    np.testing.assert_array_equal(actions, expected)
    np.testing.assert_array_equal(actions[:7], [0, -1, 0, -1, -1, 1, -1])


def test_torch_policy_samples_from_the_categorical_distribution() -> None:
    net = torch.nn.Linear(4, 2)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor([0.0, float(np.log(3.0))]))  # p = [0.25, 0.75]
    policy = TorchPolicy(net, spaces.Discrete(2), deterministic=False)
    torch.manual_seed(0)
    draws = np.concatenate([policy(cartpole_obs(100, seed=i))[0] for i in range(40)])
    assert set(draws.tolist()) == {0, 1}
    assert abs(draws.mean() - 0.75) < 0.03
    policy.deterministic = True
    assert (policy(cartpole_obs(100))[0] == 1).all()


def test_torch_policy_stochastic_mlp_is_reproducible_with_a_torch_seed() -> None:
    policy = TorchPolicy(mlp(), spaces.Discrete(2), deterministic=False)
    obs = cartpole_obs(8)
    torch.manual_seed(123)
    first = np.stack([policy(obs)[0] for _ in range(200)])
    torch.manual_seed(123)
    second = np.stack([policy(obs)[0] for _ in range(200)])
    np.testing.assert_array_equal(first, second)
    assert set(np.unique(first).tolist()) == {0, 1}


class Scale(torch.nn.Module):
    """out = factor * obs, so tests choose raw outputs exactly."""

    def __init__(self, factor: float = 1.0) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, obs: Any) -> Any:
        return obs * self.factor if self.factor != 1.0 else obs


def test_torch_policy_box_clips_to_the_bounds_without_touching_observations() -> None:
    space = spaces.Box(np.array([-1.0, -2.0], np.float32), np.array([1.0, 0.5], np.float32), dtype=np.float32)
    policy = TorchPolicy(Scale(), space)  # identity: the output tensor shares the observation memory
    obs = np.array([[-5.0, 0.25], [0.5, 3.0], [2.0, -2.5]], dtype=np.float32)
    before = obs.copy()
    actions, _ = policy(obs)
    np.testing.assert_array_equal(obs, before)
    assert actions.dtype == np.float32
    np.testing.assert_array_equal(actions, np.clip(obs, space.low, space.high))


def test_torch_policy_box_float64_and_integer_dtypes() -> None:
    obs = np.array([[0.3, -7.0], [0.1000001, 9.6]], dtype=np.float32)
    box64 = spaces.Box(-0.1, 0.1, shape=(2,), dtype=np.float64)
    actions, _ = TorchPolicy(Scale(), box64)(obs)
    assert actions.dtype == np.float64 and actions.max() <= 0.1 and actions.min() >= -0.1
    int_box = spaces.Box(np.array([0, -5]), np.array([3, 5]), dtype=np.int64)
    actions, _ = TorchPolicy(Scale(), int_box)(obs)
    assert actions.dtype == np.int64
    np.testing.assert_array_equal(actions, [[0, -5], [0, 5]])


def test_torch_policy_box_squash_maps_into_the_bounds() -> None:
    low, high = np.array([-1.0, 0.0], np.float32), np.array([1.0, 10.0], np.float32)
    space = spaces.Box(low, high, dtype=np.float32)
    policy = TorchPolicy(Scale(), space, squash=True)
    obs = np.array([[0.0, 0.0], [0.5, -0.5], [100.0, -100.0], [-100.0, 100.0]], dtype=np.float32)
    actions, _ = policy(obs)
    expected = (low + high) / 2 + (high - low) / 2 * np.tanh(obs)
    np.testing.assert_allclose(actions, expected, rtol=1e-6, atol=1e-6)
    assert np.all(actions >= space.low) and np.all(actions <= space.high)
    np.testing.assert_array_equal(actions[2], [1.0, 0.0])
    with pytest.raises(ValueError, match="bounded"):
        TorchPolicy(Scale(), spaces.Box(-np.inf, 1.0, shape=(2,)), squash=True)


class GaussianHead(torch.nn.Module):
    """Returns (mean, log_std) with mean = obs and a fixed small std."""

    def forward(self, obs: Any) -> Any:
        return obs, torch.full_like(obs, float(np.log(0.5)))


def test_torch_policy_box_gaussian_outputs() -> None:
    space = spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32)
    obs = np.tile(np.array([[1.0, -2.0]], dtype=np.float32), (20_000, 1))
    mean_actions, _ = TorchPolicy(GaussianHead(), space)(obs)
    np.testing.assert_array_equal(mean_actions, obs)
    torch.manual_seed(0)
    sampled, _ = TorchPolicy(GaussianHead(), space, deterministic=False)(obs)
    np.testing.assert_allclose(sampled.mean(axis=0), [1.0, -2.0], atol=0.02)
    np.testing.assert_allclose(sampled.std(axis=0), [0.5, 0.5], rtol=0.03)


def test_torch_policy_multi_discrete_dict_obs_and_bad_output_shapes() -> None:
    class DictNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seen: dict[str, Any] = {}

        def forward(self, obs: Any) -> Any:
            self.seen = {key: (value.dtype, tuple(value.shape)) for key, value in obs.items()}
            return torch.cat([obs["a"], obs["b"]], dim=-1)

    net = DictNet()
    space = spaces.MultiDiscrete([2, 3], start=[0, -1])
    policy = TorchPolicy(net, space)
    obs = {"a": np.array([[0.0, 1.0], [5.0, 0.0]]), "b": np.array([[0, 0, 9], [9, 0, 0]], dtype=np.uint8)}
    actions, _ = policy(obs)
    assert net.seen == {"a": (torch.float32, (2, 2)), "b": (torch.float32, (2, 3))}
    np.testing.assert_array_equal(actions, [[1, 1], [0, -1]])
    assert actions.dtype == space.dtype
    with pytest.raises(ActionError, match="shape"):
        TorchPolicy(Scale(), spaces.Discrete(3))(np.zeros((4, 2), dtype=np.float32))


def test_torch_policy_weights_pass_through() -> None:
    a, b = TorchPolicy(mlp(0), spaces.Discrete(2)), TorchPolicy(mlp(1), spaces.Discrete(2))
    obs = cartpole_obs(512)
    assert not np.array_equal(a(obs)[0], b(obs)[0])
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a(obs)[0], b(obs)[0])


# recurrent ------------------------------------------------------------------------------------------


class RecurrentNet(torch.nn.Module):
    """A 2-layer GRU (or LSTM) on one step: module(obs, hidden) -> (out, hidden), torch's hidden layout."""

    def __init__(self, lstm: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        rnn = torch.nn.LSTM if lstm else torch.nn.GRU
        self.rnn = rnn(4, 8, num_layers=2)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, obs: Any, hidden: Any) -> tuple[Any, Any]:
        out, hidden = self.rnn(obs.unsqueeze(0), hidden)
        return self.head(out[0]), hidden


RNN_SPACE = spaces.Box(-100.0, 100.0, shape=(3,), dtype=np.float32)


def put_rows(store: Any, env_ids: np.ndarray, rows_: Any) -> Any:
    """What the collector does with returned state: write rows by env id (tuples recursively)."""
    if isinstance(rows_, tuple):
        return tuple(put_rows(s, env_ids, r) for s, r in zip(store, rows_))
    store[torch.as_tensor(env_ids)] = rows_
    return store


def take_rows(store: Any, env_ids: np.ndarray) -> Any:
    if isinstance(store, tuple):
        return tuple(take_rows(s, env_ids) for s in store)
    return store[torch.as_tensor(env_ids)]


@pytest.mark.parametrize("lstm", [False, True])
def test_recurrent_state_rows_per_env_match_env_by_env_calls(lstm: bool) -> None:
    policy = TorchPolicy(RecurrentNet(lstm), RNN_SPACE, recurrent=True)
    num_envs, steps = 5, 4
    obs_seq = np.random.default_rng(0).normal(size=(steps, num_envs, 4)).astype(np.float32)

    # reference: each env alone, with its own hidden state
    reference = np.zeros((steps, num_envs, 3), dtype=np.float32)
    for env in range(num_envs):
        state = None
        for t in range(steps):
            actions, state = policy(obs_seq[t, env : env + 1], state)
            reference[t, env] = actions[0]

    # collector-like: first step all envs at once, then interleaved subsets with rows written back
    actions, store = policy(obs_seq[0], None)
    parts = store if isinstance(store, tuple) else (store,)
    assert all(part.shape == (num_envs, 2, 8) and not part.is_inference() for part in parts)
    np.testing.assert_allclose(actions, reference[0], rtol=1e-5, atol=1e-6)
    done = np.ones(num_envs, dtype=np.int64)  # steps done per env
    schedule = [
        np.array([0, 2]),
        np.array([4, 1, 3]),
        np.array([2]),
        np.array([0, 1, 2, 3, 4]),
        np.array([3, 4, 1, 0]),
    ]
    for env_ids in schedule:
        env_ids = env_ids[done[env_ids] < steps]
        obs = obs_seq[done[env_ids], env_ids]
        actions, new_rows = policy(obs, take_rows(store, env_ids))
        store = put_rows(store, env_ids, new_rows)
        np.testing.assert_allclose(actions, reference[done[env_ids], env_ids], rtol=1e-5, atol=1e-6)
        done[env_ids] += 1
    assert (done == steps).all()


@pytest.mark.parametrize("lstm", [False, True])
def test_reset_state_zeroes_only_the_given_env_rows(lstm: bool) -> None:
    policy = TorchPolicy(RecurrentNet(lstm), RNN_SPACE, recurrent=True)
    obs = cartpole_obs(6)
    _, store = policy(obs, None)
    _, store = policy(obs, store)
    parts = store if isinstance(store, tuple) else (store,)
    before = [part.clone() for part in parts]
    assert all(part.abs().sum(dim=(1, 2)).min() > 0 for part in before)

    result = policy.reset_state(store, np.array([1, 4]))
    after = result if isinstance(result, tuple) else (result,)
    for old, new in zip(before, after):
        assert (new[[1, 4]] == 0).all()
        torch.testing.assert_close(new[[0, 2, 3, 5]], old[[0, 2, 3, 5]], rtol=0, atol=0)
    # a zeroed row behaves like a fresh (None) state
    fresh, _ = policy(obs[[1]], None)
    again, _ = policy(obs[[1]], take_rows(result, np.array([1])))
    np.testing.assert_allclose(again, fresh, rtol=1e-6, atol=1e-7)
    assert policy.reset_state(None, np.array([0])) is None


def test_recurrent_hidden_batch_dim_zero_for_cell_modules() -> None:
    class CellNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.cell = torch.nn.GRUCell(4, 6)
            self.head = torch.nn.Linear(6, 2)

        def forward(self, obs: Any, hidden: Any) -> tuple[Any, Any]:
            hidden = self.cell(obs, hidden)
            return self.head(hidden), hidden

    net = CellNet()
    policy = TorchPolicy(net, spaces.Discrete(2), recurrent=True, hidden_batch_dim=0)
    obs = cartpole_obs(3)
    actions, state = policy(obs)
    assert state.shape == (3, 6) and not state.is_inference()
    _, state2 = policy(obs, state)
    state2[torch.as_tensor([0])] = state2[[0]]  # the collector writes rows into returned state
    expected = net.cell(torch.as_tensor(obs), net.cell(torch.as_tensor(obs)))
    torch.testing.assert_close(state2, expected.detach())


@pytest.mark.parametrize(
    "space",
    [spaces.Discrete(3, start=-1), spaces.Box(-1.0, 2.0, (3,), np.float32), spaces.MultiDiscrete([3, 4]),
     spaces.MultiBinary(5)],
)
def test_random_policy_block_draws_equal_per_batch_draws(space: gym.Space[Any]) -> None:
    # RandomPolicy draws BLOCK_ROWS rows per numpy call; the rows must be those per-batch draws give.
    from vcollect.policies import random as random_module

    sizes = [8, 8, 5, random_module.BLOCK_ROWS - 20, 3 * random_module.BLOCK_ROWS, 2]
    policy = RandomPolicy(space, seed=3)
    batches = [policy.sample(k) for k in sizes]
    per_batch = random_module._compile(space, np.random.default_rng(3))
    for batch, k in zip(batches, sizes):
        np.testing.assert_array_equal(batch, per_batch(k))
    assert not np.shares_memory(batches[0], batches[1])  # batches are copies, not views of one block


def test_torch_policy_vouches_for_index_valued_actions_only() -> None:
    net = torch.nn.Linear(3, 4)
    assert TorchPolicy(net, spaces.Discrete(4)).actions_in_space
    assert TorchPolicy(net, spaces.MultiBinary(4)).actions_in_space
    # a module that outputs NaN gives NaN Box actions: those stay checked by the collector
    assert not TorchPolicy(net, spaces.Box(-1.0, 1.0, (4,), np.float32)).actions_in_space


class _ThreadSpy(torch.nn.Module):
    """Records torch.get_num_threads() as seen inside its forward pass; logits favour action 1."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        self.seen.append(torch.get_num_threads())
        return torch.tensor([[0.0, 1.0]]).expand(obs.shape[0], 2)


@pytest.fixture
def two_threads():
    """torch at 2 intra-op threads for the test (set back afterwards), so 1 differs from the setting."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("num_threads, inside", [(None, 2), (1, 1), (3, 3)], ids=["none", "one", "three"])
def test_torch_policy_runs_its_forward_pass_at_num_threads_and_restores_torchs_setting(
    two_threads: None, num_threads: int | None, inside: int
) -> None:
    spy = _ThreadSpy()
    kwargs = {} if num_threads == 1 else {"num_threads": num_threads}  # 1 is the default
    policy = TorchPolicy(spy, spaces.Discrete(2), **kwargs)
    for _ in range(3):
        actions, _ = policy(np.zeros((4, 3), np.float32))
        assert actions.tolist() == [1, 1, 1, 1]
        assert torch.get_num_threads() == 2
    assert spy.seen == [inside] * 3


def test_torch_policy_restores_the_thread_count_when_the_module_raises(two_threads: None) -> None:
    class Failing(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")

    policy = TorchPolicy(Failing(), spaces.Discrete(2))
    with pytest.raises(RuntimeError, match="boom"):
        policy(np.zeros((2, 3), np.float32))
    assert torch.get_num_threads() == 2


def test_torch_policy_follows_a_thread_count_the_program_changes_later(two_threads: None) -> None:
    # the setting is read at each call: a change between calls is what the next call restores
    spy = _ThreadSpy()
    policy = TorchPolicy(spy, spaces.Discrete(2), num_threads=None)
    policy(np.zeros((1, 3), np.float32))
    torch.set_num_threads(1)
    policy(np.zeros((1, 3), np.float32))
    assert spy.seen == [2, 1]
    scoped = TorchPolicy(_ThreadSpy(), spaces.Discrete(2), num_threads=2)
    scoped(np.zeros((1, 3), np.float32))
    assert scoped.module.seen == [2] and torch.get_num_threads() == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_torch_policy_rejects_a_bad_num_threads(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        TorchPolicy(torch.nn.Linear(3, 2), spaces.Discrete(2), num_threads=bad)


@pytest.mark.parametrize(("name", "hidden", "extra"), [("TorchPolicy", "torch", "torch"),
                                                       ("TianshouPolicy", "tianshou", "tianshou")])
def test_a_policy_whose_package_is_missing_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, name: str, hidden: str, extra: str
) -> None:
    import importlib
    import sys

    import vcollect.policies

    for module in [m for m in sys.modules if m == hidden or m.startswith(hidden + ".")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, hidden, None)  # as if not installed
    for module in ("vcollect.policies.torch_policy", "vcollect.policies.tianshou_policy"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ModuleNotFoundError, match=rf"needs {hidden}, which is not installed: pip install 'vcollect\[{extra}\]'"):
        getattr(vcollect.policies, name)
    importlib.import_module("vcollect.policies")  # the package itself still imports
