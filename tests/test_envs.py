"""Vector env backends: real worker processes, CartPole/Pendulum/Dict spaces, subsets, async, failures."""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.envs import (
    BadObsEnv,
    CountingEnv,
    DictObsEnv,
    FailingEnv,
    SlowEnv,
    make_cartpole,
    make_pendulum,
)
from vcollect.envs import (
    DummyVectorEnv,
    SubprocVectorEnv,
    VectorEnv,
    make_vector,
)
from vcollect.errors import ActionError, CollectorStateError, EnvWorkerError, ObservationError

BACKENDS = ["dummy", "subproc"]


def build(backend: str, env_fns: list[Callable[[], gym.Env]], **kwargs: Any) -> VectorEnv:
    if backend == "dummy":
        return DummyVectorEnv(env_fns)
    return SubprocVectorEnv(env_fns, num_workers=kwargs.get("num_workers", 2))


@pytest.fixture
def closing() -> Iterator[list[VectorEnv]]:
    """Collects vector envs made in a test and closes them afterwards, even when the test fails."""
    made: list[VectorEnv] = []
    yield made
    for env in made:
        env.close()


def make(
    closing: list[VectorEnv], backend: str, env_fns: list[Callable[[], gym.Env]], **kwargs: Any
) -> VectorEnv:
    env = build(backend, env_fns, **kwargs)
    closing.append(env)
    return env


def leaves(value: Any) -> list[np.ndarray]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in leaves(v)]
    return [np.asarray(value)]


def assert_identical(a: Any, b: Any) -> None:
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def random_actions(space: gym.Space, k: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, int(space.n), k)
    assert isinstance(space, gym.spaces.Box)
    return rng.uniform(space.low, space.high, (k,) + space.shape).astype(space.dtype)


ENV_FACTORIES = {"cartpole": make_cartpole, "pendulum": make_pendulum, "dict": DictObsEnv}


# --------------------------------------------------------------------------------------------------
# basics


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("env_name", list(ENV_FACTORIES))
def test_reset_and_step_return_batches_in_the_spaces(closing, backend, env_name):
    envs = make(closing, backend, [ENV_FACTORIES[env_name]] * 4)
    assert isinstance(envs, VectorEnv)
    assert envs.num_envs == 4
    obs, infos = envs.reset(seeds=3)
    assert envs.observation_space.contains(obs)
    assert len(infos) == 4 and all(isinstance(i, dict) for i in infos)
    actions = random_actions(envs.single_action_space, 4, np.random.default_rng(0))
    obs, rewards, terms, truncs, infos = envs.step(actions)
    assert envs.observation_space.contains(obs)
    assert rewards.dtype == np.float64 and rewards.shape == (4,)
    assert terms.dtype == bool and truncs.dtype == bool and terms.shape == truncs.shape == (4,)
    assert len(infos) == 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_returned_arrays_are_copies_not_views_a_later_step_overwrites(closing, backend):
    # Tianshou bug #1281: an observation returned by one step must not change after the next step.
    envs = make(closing, backend, [DictObsEnv] * 4)
    reset_obs, _ = envs.reset(seeds=1)
    kept_reset = copy.deepcopy(reset_obs)
    first = envs.step(np.ones(4, np.int64))
    kept_first = copy.deepcopy(first)
    subset = envs.step(np.full(2, 2), env_ids=[2, 0])
    kept_subset = copy.deepcopy(subset)
    envs.step(np.zeros(4, np.int64))
    envs.reset(seeds=99)
    envs.send(np.zeros(4, np.int64))
    *async_result, _ = envs.recv(min_ready=4)
    kept_async = copy.deepcopy(async_result)
    envs.step(np.full(4, 2))
    assert_identical(reset_obs, kept_reset)
    for got, kept in [(first, kept_first), (subset, kept_subset), (tuple(async_result), tuple(kept_async))]:
        assert_identical(got[0], kept[0])
        for i in (1, 2, 3):
            assert np.array_equal(got[i], kept[i])
    # and the steps really did change the observations (so the check above could fail)
    assert not np.array_equal(first[0]["position"], envs.step(np.full(4, 2))[0]["position"])


@pytest.mark.parametrize("env_name", list(ENV_FACTORIES))
def test_same_seeds_give_bit_identical_results_on_dummy_and_subproc(closing, env_name):
    n = 5
    dummy = make(closing, "dummy", [ENV_FACTORIES[env_name]] * n)
    sub = make(closing, "subproc", [ENV_FACTORIES[env_name]] * n)
    rng = np.random.default_rng(42)
    assert_identical(dummy.reset(seeds=7)[0], sub.reset(seeds=7)[0])
    episodes_ended = 0
    for t in range(60):
        ids = np.arange(n) if t % 3 else rng.permutation(n)[: rng.integers(1, n + 1)]
        actions = random_actions(dummy.single_action_space, ids.size, rng)
        a = dummy.step(actions, env_ids=None if t % 3 else ids)
        b = sub.step(actions, env_ids=None if t % 3 else ids)
        assert_identical(a[0], b[0])
        for i in (1, 2, 3):
            assert a[i].tobytes() == b[i].tobytes()
        assert a[4] == b[4]
        done = (a[2] | a[3]).nonzero()[0]
        if done.size:
            episodes_ended += done.size
            seeds = (1000 * t + np.arange(done.size)).tolist()
            finished = (np.arange(n) if t % 3 else ids)[done]
            assert_identical(dummy.reset(finished, seeds=seeds)[0], sub.reset(finished, seeds=seeds)[0])
    if env_name == "dict":
        assert episodes_ended > 5  # the episode boundaries were exercised


@pytest.mark.parametrize("backend", BACKENDS)
def test_seed_conventions(closing, backend):
    envs = make(closing, backend, [CountingEnv] * 4)
    _, infos = envs.reset(seeds=10)
    assert [i["seed"] for i in infos] == [10, 11, 12, 13]
    _, infos = envs.reset(env_ids=[3, 1], seeds=5)
    assert [i["seed"] for i in infos] == [5, 6]
    _, infos = envs.reset(env_ids=[2, 0], seeds=[None, 8])
    assert [i["seed"] for i in infos] == [None, 8]
    with pytest.raises(ValueError, match="seeds"):
        envs.reset(env_ids=[0, 1], seeds=[1, 2, 3])
    a = make(closing, backend, [DictObsEnv] * 3)
    first = a.reset(seeds=[4, 5, 6])[0]
    assert_identical(first, a.reset(seeds=4)[0])


# --------------------------------------------------------------------------------------------------
# subsets


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_reset_equals_step_then_reset_of_the_ended_envs(closing, backend):
    # Envs of lengths 2..5 end at different steps; a dummy twin does the same work as step + reset.
    fns = [functools.partial(CountingEnv, length) for length in (2, 3, 4, 5)]
    fused = make(closing, backend, fns)
    twin = make(closing, "dummy", fns)
    fused.reset(seeds=0)
    twin.reset(seeds=0)
    restarts = 0
    for t in range(14):
        step_ids = np.arange(4) if t % 2 else np.array([0, 2, 3])
        k = step_ids.size
        seeds = [100 * t + j for j in range(k)]
        may = None if t < 7 else np.arange(k) != 0  # later on, the first stepped env may not restart
        options = {"start": 10.0} if t == 3 else None
        actions = np.zeros(k, np.int64)
        ids_arg = None if k == 4 else step_ids
        got = fused.step_reset(actions, ids_arg, reset_seeds=seeds, may_reset=may, options=options)
        want = twin.step(actions, ids_arg)
        for i in range(4):
            assert np.array_equal(got[i], want[i])
        assert got.infos == want[4]
        ended = want[2] | want[3]
        allowed = ended if may is None else ended & may
        assert got.reset_ids.tolist() == step_ids[allowed].tolist()
        if allowed.any():
            want_seeds = [seeds[p] for p in np.flatnonzero(allowed).tolist()]
            want_obs, want_infos = twin.reset(step_ids[allowed], seeds=want_seeds, options=options)
            assert np.array_equal(got.reset_obs, want_obs)
            assert got.reset_infos == want_infos
            assert [info["seed"] for info in got.reset_infos] == want_seeds
            restarts += int(allowed.sum())
        else:
            assert got.reset_obs is None and got.reset_infos == []
        held = step_ids[ended & ~allowed]  # ended but not allowed to restart: reset both alike
        if held.size:
            fused.reset(held, seeds=7)
            twin.reset(held, seeds=7)
    assert restarts >= 8
    assert fused.in_flight.size == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_reset_failing_restart_names_the_env(closing, backend):
    failing = functools.partial(FailingEnv, fail_step=None, episode_length=1, fail_on_reset_number=2)
    envs = make(closing, backend, [functools.partial(CountingEnv, 5), failing])
    envs.reset(seeds=0)
    with pytest.raises(EnvWorkerError, match="FailingEnv exploded in reset") as info:
        envs.step_reset(np.zeros(2, np.int64), reset_seeds=[1, 2])
    assert info.value.env_id == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_reset_and_reset_refuse_a_wrong_seed_count_and_non_dict_options(closing, backend):
    envs = make(closing, backend, [functools.partial(CountingEnv, 3)] * 2)
    envs.reset(seeds=0)
    with pytest.raises(ValueError, match="got 1 reset seeds for 2 env ids"):
        envs.step_reset(np.zeros(2, np.int64), reset_seeds=[1])
    with pytest.raises(ValueError, match="options must be a dict or None, got list"):
        envs.step_reset(np.zeros(2, np.int64), reset_seeds=[1, 2], options=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="options must be a dict or None, got str"):
        envs.reset(options="start")  # type: ignore[arg-type]
    obs, *_ = envs.step(np.zeros(2, np.int64))  # nothing was stepped or reset by the refused calls
    np.testing.assert_array_equal(obs[:, 0], [1.0, 1.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_subsets_step_only_those_envs_in_the_given_order(closing, backend):
    envs = make(closing, backend, [functools.partial(CountingEnv, 100)] * 5)
    obs, _ = envs.reset()
    assert obs.ravel().tolist() == [0, 0, 0, 0, 0]
    obs, rewards, _, _, infos = envs.step(np.zeros(3, np.int64), env_ids=[4, 0, 3])
    assert obs.ravel().tolist() == [1, 1, 1] and rewards.tolist() == [1, 1, 1] and len(infos) == 3
    obs, *_ = envs.step(np.zeros(2, np.int64), env_ids=np.array([3, 1]))
    assert obs.ravel().tolist() == [2, 1]
    obs, *_ = envs.step(np.zeros(5, np.int64))
    assert obs.ravel().tolist() == [2, 2, 1, 3, 2]
    obs, _ = envs.reset(env_ids=[3])
    obs, *_ = envs.step(np.zeros(5, np.int64))
    assert obs.ravel().tolist() == [3, 3, 2, 1, 3]


OPS = st.lists(
    st.tuples(st.sampled_from(["step", "reset", "async"]), st.permutations(range(5)), st.integers(1, 5)),
    min_size=1,
    max_size=12,
)


@pytest.fixture(scope="module")
def counting_pair() -> Iterator[tuple[VectorEnv, VectorEnv]]:
    fns = [functools.partial(CountingEnv, 3)] * 5
    dummy, sub = DummyVectorEnv(fns), SubprocVectorEnv(fns, num_workers=2)
    yield dummy, sub
    dummy.close()
    sub.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_subset_index_arithmetic_matches_a_plain_counter_model(counting_pair, ops):
    for envs in counting_pair:
        envs.reset()
        counters = [0] * 5
        for kind, perm, k in ops:
            ids = list(perm[:k])
            if kind == "reset":
                obs, infos = envs.reset(env_ids=ids)
                for i in ids:
                    counters[i] = 0
                assert obs.ravel().tolist() == [0] * k and len(infos) == k
                continue
            if kind == "step":
                obs, rewards, terms, truncs, infos = envs.step(np.zeros(k, np.int64), env_ids=ids)
                got_ids = ids
            else:
                envs.send(np.zeros(k, np.int64), env_ids=ids)
                assert sorted(envs.in_flight.tolist()) == sorted(ids)
                obs, rewards, terms, truncs, infos, got = envs.recv(min_ready=k)
                got_ids = got.tolist()
                assert sorted(got_ids) == sorted(ids) and envs.in_flight.size == 0
            for i in got_ids:
                counters[i] += 1
            assert obs.ravel().tolist() == [counters[i] for i in got_ids]
            assert infos == [{"t": counters[i]} for i in got_ids]
            assert terms.tolist() == [counters[i] >= 3 for i in got_ids]
            assert not truncs.any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_env_ids_and_actions_are_rejected(closing, backend):
    envs = make(closing, backend, [CountingEnv] * 3)
    envs.reset()
    with pytest.raises(ValueError, match=r"unknown env id.*\[3\]"):
        envs.step(np.zeros(1, np.int64), env_ids=[3])
    with pytest.raises(ValueError, match="distinct"):
        envs.step(np.zeros(2, np.int64), env_ids=[1, 1])
    with pytest.raises(ActionError, match="shape"):
        envs.step(np.zeros(2, np.int64))
    envs.send(np.zeros(1, np.int64), env_ids=[1])
    with pytest.raises(ValueError, match=r"\[1\].*in flight"):
        envs.send(np.zeros(2, np.int64), env_ids=[0, 1])
    with pytest.raises(ValueError, match=r"\[1\].*in flight"):
        envs.reset(env_ids=[1])
    assert envs.recv()[-1].tolist() == [1]
    with pytest.raises(ValueError, match="no step in flight"):
        envs.recv()


# --------------------------------------------------------------------------------------------------
# async


def _slow_fast_fns(slow_time: float) -> list[Callable[[], gym.Env]]:
    fast = functools.partial(SlowEnv, fast_time=0.0, slow_prob=0.0)
    slow = functools.partial(SlowEnv, slow_time=slow_time, slow_prob=1.0)
    return [fast, fast, slow, slow]  # on 2 workers: envs 0, 1 fast (worker 0); 2, 3 slow (worker 1)


def test_async_recv_min_ready_and_timeout(closing):
    envs = make(closing, "subproc", _slow_fast_fns(slow_time=0.25))
    envs.reset(seeds=0)
    envs.send(np.zeros(4, np.int64))
    assert envs.in_flight.tolist() == [0, 1, 2, 3]
    obs, rewards, terms, truncs, infos, ids = envs.recv(min_ready=1)
    assert ids.tolist() == [0, 1]  # the fast worker's envs, without waiting for the slow ones
    assert obs.shape == (2, 4) and rewards.tolist() == [1.0, 1.0] and len(infos) == 2
    assert envs.in_flight.tolist() == [2, 3]
    with pytest.raises(TimeoutError, match=r"in flight: \[2, 3\]"):
        envs.recv(timeout=0.05)
    assert envs.in_flight.tolist() == [2, 3]  # nothing lost
    obs, rewards, *_, ids = envs.recv(min_ready=2, timeout=10)
    assert ids.tolist() == [2, 3] and obs.shape == (2, 4)
    assert envs.in_flight.size == 0
    # the fast envs can be stepped again while the slow ones are still busy
    envs.send(np.zeros(2, np.int64), env_ids=[2, 3])
    for _ in range(3):
        assert envs.step(np.zeros(2, np.int64), env_ids=[0, 1])[0].shape == (2, 4)
    assert envs.recv(min_ready=2)[-1].tolist() == [2, 3]


def test_slow_reset_via_reset_async_does_not_block_other_envs_steps(closing):
    envs = make(closing, "subproc", [functools.partial(SlowEnv, fast_time=0.0, slow_prob=0.0)] * 4)
    envs.reset(seeds=0)
    envs.reset_async(env_ids=[0], seeds=5, options={"reset_time": 1.0})
    start = time.monotonic()
    envs.send(np.zeros(2, np.int64), env_ids=[2, 3])
    *_, ids = envs.recv(min_ready=2, timeout=5)
    assert ids.tolist() == [2, 3]
    assert time.monotonic() - start < 0.8  # well before the 1 s reset finished
    assert envs.in_flight.tolist() == [0]
    with pytest.raises(ValueError, match="no step in flight"):
        envs.recv()
    obs, infos, ids = envs.recv_reset(timeout=10)
    assert ids.tolist() == [0] and obs.shape == (1, 4)
    assert_identical(obs, make(closing, "dummy", [make_cartpole]).reset(seeds=5)[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_results_match_the_sync_ones(closing, backend):
    a = make(closing, backend, [DictObsEnv] * 4)
    b = make(closing, "dummy", [DictObsEnv] * 4)
    a.reset_async(seeds=3)
    obs, _, ids = a.recv_reset(min_ready=4)
    assert ids.tolist() == [0, 1, 2, 3]
    assert_identical(obs, b.reset(seeds=3)[0])
    a.send(np.array([2, 0]), env_ids=[3, 1])
    a.send(np.array([1]), env_ids=[0])
    got: dict[int, Any] = {}
    while a.in_flight.size:
        obs, rewards, *_, ids = a.recv()
        for row, env_id in enumerate(ids.tolist()):
            got[env_id] = (obs["position"][row], rewards[row])
    want = b.step(np.array([1, 2, 0]), env_ids=[0, 3, 1])
    for row, env_id in enumerate([0, 3, 1]):
        assert got[env_id][0].tobytes() == want[0]["position"][row].tobytes()
        assert got[env_id][1] == want[1][row]


# --------------------------------------------------------------------------------------------------
# failures


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_raising_in_step_names_env_and_keeps_traceback(closing, backend):
    fns = [CountingEnv, CountingEnv, functools.partial(FailingEnv, fail_step=2), CountingEnv]
    envs = make(closing, backend, fns)
    envs.reset()
    envs.step(np.zeros(4, np.int64))
    with pytest.raises(EnvWorkerError, match="env 2") as info:
        envs.step(np.zeros(4, np.int64))
    assert info.value.env_id == 2
    assert "FailingEnv exploded at step 2" in info.value.traceback_text
    assert "Traceback" in info.value.traceback_text
    # the vector env stays usable: nothing is left in flight, a reset brings env 2 back
    assert envs.in_flight.size == 0
    obs, _ = envs.reset(env_ids=[2])
    assert obs.ravel().tolist() == [0]
    assert envs.step(np.zeros(4, np.int64))[0].ravel().tolist() == [3, 3, 1, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_raising_in_reset_or_async_step(closing, backend):
    envs = make(closing, backend, [CountingEnv, functools.partial(FailingEnv, fail_on_reset=True)])
    with pytest.raises(EnvWorkerError, match="FailingEnv exploded in reset") as info:
        envs.reset()
    assert info.value.env_id == 1
    envs2 = make(closing, backend, [CountingEnv, functools.partial(FailingEnv, fail_step=1)])
    envs2.reset()
    envs2.send(np.zeros(2, np.int64))
    received, errors = [], []
    while envs2.in_flight.size:
        try:
            received += envs2.recv()[-1].tolist()
        except EnvWorkerError as exc:
            errors.append(exc.env_id)
    assert received == [0] and errors == [1]  # the failure costs nothing but the failing env's step


@pytest.mark.parametrize("backend", BACKENDS)
def test_observations_are_passed_through_or_rejected_when_they_cannot_fit(closing, backend):
    envs = make(closing, backend, [functools.partial(BadObsEnv, bad_step=1)] * 2)
    envs.reset()
    obs, *_ = envs.step(np.zeros(2, np.int64))
    assert obs.ravel().tolist() == [-5.0, -5.0]  # out of bounds: for the collector to check
    bad_shape = make(
        closing,
        backend,
        [
            functools.partial(BadObsEnv, bad_step=None),
            functools.partial(BadObsEnv, bad_step=1, bad_shape=True),
        ],
    )
    bad_shape.reset()
    with pytest.raises(ObservationError, match="env 1"):
        bad_shape.step(np.zeros(2, np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_envs_with_different_spaces_are_rejected(backend):
    with pytest.raises(ValueError, match="spaces"):
        build(backend, [CountingEnv, DictObsEnv])


@pytest.mark.parametrize("backend", BACKENDS)
def test_use_after_close_raises_collector_state_error(backend):
    envs = build(backend, [CountingEnv] * 2)
    envs.reset()
    envs.close()
    envs.close()  # idempotent
    assert envs.closed
    calls = [
        lambda: envs.step(np.zeros(2, np.int64)),
        lambda: envs.reset(),
        lambda: envs.send(np.zeros(2, np.int64)),
        lambda: envs.reset_async(),
        lambda: envs.recv(),
        lambda: envs.recv_reset(),
        lambda: envs.render(),
    ]
    for call in calls:
        with pytest.raises(CollectorStateError, match="closed"):
            call()


@pytest.mark.parametrize("backend", BACKENDS)
def test_render(closing, backend):
    envs = make(closing, backend, [functools.partial(DictObsEnv, render_mode="rgb_array")] * 3)
    envs.reset(seeds=0)
    envs.step(np.ones(3, np.int64))
    frames = envs.render()
    assert frames is not None and len(frames) == 3
    assert all(f.shape == (4, 4, 3) and f[0, 0, 0] == 1 for f in frames)
    assert make(closing, backend, [DictObsEnv] * 2).render() is None


# --------------------------------------------------------------------------------------------------
# make_vector


def test_make_vector(closing):
    envs = make_vector(
        "CartPole-v1", 3, backend="subproc", num_workers=2, env_kwargs={"max_episode_steps": 2}
    )
    closing.append(envs)
    assert isinstance(envs, SubprocVectorEnv) and envs.num_envs == 3
    envs.reset(seeds=0)
    envs.step(np.zeros(3, np.int64))
    _, _, terms, truncs, _ = envs.step(np.zeros(3, np.int64))
    assert truncs.all() and not terms.any()
    dummy = make_vector(DictObsEnv, 2)
    closing.append(dummy)
    assert isinstance(dummy, DummyVectorEnv) and isinstance(dummy.single_observation_space, gym.spaces.Dict)
    with pytest.raises(ValueError, match="available backends: dummy, subproc"):
        make_vector("CartPole-v1", 2, backend="nope")
    with pytest.raises(ValueError, match="unknown environment id 'NoSuchEnv-v0'"):
        make_vector("NoSuchEnv-v0", 2)


def test_layout_row_views_write_what_write_row_writes() -> None:
    """A backend's per-env write through FixedLayout.row_views stores what write_row stores (cast and
    broadcast alike, into the named rows only); layouts with scalar or nested values have no row views."""
    from vcollect.envs.layout import FixedLayout

    layout = FixedLayout(gym.spaces.Box(-10, 10, shape=(2, 3), dtype=np.float32))
    by_views, by_rows = layout.allocate(4), layout.allocate(4)
    views = layout.row_views(by_views, [3, 1])
    assert views is not None and len(views) == 2
    for view, row, value in ((views[0], 3, np.arange(6.0).reshape(2, 3)), (views[1], 1, [[1, 2, 3]]), (views[0], 3, 2.5)):
        view[...] = value
        layout.write_row(by_rows, row, value)
    np.testing.assert_array_equal(by_views[0], by_rows[0])
    assert by_views[0].dtype == np.float32 and not by_views[0][[0, 2]].any()
    assert FixedLayout(gym.spaces.Discrete(3)).row_views(FixedLayout(gym.spaces.Discrete(3)).allocate(2), [0, 1]) is None
    nested = FixedLayout(gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,))}))
    assert nested.row_views(nested.allocate(2), [0, 1]) is None
