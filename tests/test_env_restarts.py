"""Env workers that restart (``max_restarts``): a worker process or Ray actor that dies, or whose env raises,
is replaced; the episode it was in is abandoned and reported, and counts stay exact. Also: env errors that
arrive whole (EnvOutputError naming the env, the call and the value's type), and the async collector's
waits bounded by the backend's timeout."""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import restart_envs
from tests.restart_envs import AlwaysRaisingEnv, FlakyEnv, ListRewardEnv, NoSpaceEnv, SleepingEnv, marker_in
from tests.sinks import ListStore
from tests.test_cli import Cli, Result
from vcollect.async_collector import AsyncCollector
from vcollect.cli import main
from vcollect.collector import Collector
from vcollect.envs import DummyVectorEnv, SubprocVectorEnv, make_vector
from vcollect.errors import EnvOutputError, EnvWorkerError
from vcollect.stats import CollectStats
from vcollect.store import load_dataset

EPISODE = 5  # FlakyEnv's episode length


def flaky(tmp_path: Path, mode: str, num_envs: int = 4, fail_step: int = 3) -> list[Any]:
    return [functools.partial(FlakyEnv, marker_in(tmp_path), fail_step=fail_step, mode=mode)] * num_envs


def check_stored(store: ListStore, stats: list[CollectStats]) -> None:
    """Every stored episode is whole (EPISODE steps, counting from its reset), each seed once, and the stored
    episodes are those the stats report."""
    assert sum(s.n_collected_episodes for s in stats) == len(store.episodes)
    for episode in store.episodes:
        assert len(episode.rewards) == EPISODE
        np.testing.assert_array_equal(episode.observations.ravel(), np.arange(EPISODE + 1))
        assert episode.terminations[-1] and not episode.terminations[:-1].any()
    seeds = [episode.seed for episode in store.episodes]
    assert None not in seeds and len(set(seeds)) == len(seeds)


# ---------------------------------------------------------------- SubprocVectorEnv


@pytest.mark.parametrize("mode", ["raise", "kill", "reset"])
def test_subproc_replaces_a_failed_worker_and_counts_stay_exact(tmp_path: Path, mode: str) -> None:
    envs = SubprocVectorEnv(flaky(tmp_path, mode), num_workers=2, max_restarts=1)
    assert envs.capabilities.restarts_envs
    first_pids = [p.pid for p in envs._pool.procs]
    store = ListStore()
    with Collector(None, envs, store=store, seed=0) as collector:
        steps = collector.collect(n_step=101, random=True, reset_before_collect=True)
        assert steps.n_collected_steps == 101
        # the failing env's worker held env ids 0..1 (or 2..3): both their episodes were abandoned
        assert steps.n_abandoned_episodes == 2
        ids = sorted(a.env_id for a in steps.abandoned)
        assert ids in ([0, 1], [2, 3])
        assert all(a.steps == 2 for a in steps.abandoned)
        expected = {"raise": "FlakyEnv failed at step 3", "kill": "died with exit code -9",
                    "reset": "FlakyEnv failed in reset"}[mode]
        assert all(expected in a.error for a in steps.abandoned), steps.abandoned
        assert envs.restarts.used == 1
        replaced = ids[0] // 2
        assert envs._pool.procs[replaced].pid != first_pids[replaced]
        assert envs._pool.procs[1 - replaced].pid == first_pids[1 - replaced]
        episodes = collector.collect(n_episode=7, random=True)
        assert episodes.n_collected_episodes == 7 and episodes.n_abandoned_episodes == 0
    check_stored(store, [steps, episodes])


def test_subproc_worker_killed_from_outside_between_calls(tmp_path: Path) -> None:
    envs = SubprocVectorEnv([functools.partial(FlakyEnv, marker_in(tmp_path), fail_step=99)] * 2, num_workers=2,
                            max_restarts=3)
    store = ListStore()
    with Collector(None, envs, store=store, seed=1) as collector:
        first = collector.collect(n_step=6, random=True, reset_before_collect=True)  # 3 steps each: mid-episode
        os.kill(envs._pool.procs[1].pid, signal.SIGKILL)
        envs._pool.procs[1].join(5)
        second = collector.collect(n_episode=4, random=True)
    assert first.n_collected_steps == 6
    assert second.n_collected_episodes == 4
    assert [(a.env_id, a.steps) for a in second.abandoned] == [(1, 3)]
    assert "died with exit code -9" in second.abandoned[0].error
    check_stored(store, [first, second])


def test_subproc_budget_spent_raises_env_worker_error_saying_so() -> None:
    envs = SubprocVectorEnv([AlwaysRaisingEnv] * 2, num_workers=2, max_restarts=3)
    started = time.monotonic()
    with pytest.raises(EnvWorkerError, match=r"AlwaysRaisingEnv fails every episode.*max_restarts=3 is spent") as info:
        Collector(None, envs, seed=0).collect(n_step=1000, random=True, reset_before_collect=True)
    assert "original traceback" in str(info.value)
    assert envs.restarts.used == 3  # an env that raises on every step is not restarted forever
    assert time.monotonic() - started < 10
    envs.close()


def test_subproc_dead_worker_past_the_budget_closes_as_before(tmp_path: Path) -> None:
    envs = SubprocVectorEnv(flaky(tmp_path, "kill", num_envs=2), num_workers=2, max_restarts=0)
    assert not envs.capabilities.restarts_envs
    with pytest.raises(EnvWorkerError, match="died with exit code -9; the vector env has been closed$"):
        Collector(None, envs, seed=0).collect(n_step=100, random=True, reset_before_collect=True)
    assert envs.closed


def test_make_vector_passes_max_restarts_and_refuses_it_in_process(tmp_path: Path) -> None:
    with make_vector(FlakyEnv, 2, backend="subproc", env_kwargs={"marker": marker_in(tmp_path)}, max_restarts=2) as envs:
        assert envs.restarts.used == 0 and envs.restarts.max_restarts == 2  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="cannot replace a failed env"):
        make_vector(FlakyEnv, 2, backend="dummy", max_restarts=1)
    with pytest.raises(ValueError, match="max_restarts must be an int >= 0"):
        SubprocVectorEnv([AlwaysRaisingEnv], max_restarts=-1)


def test_async_collector_refuses_envs_that_restart() -> None:
    envs = SubprocVectorEnv([AlwaysRaisingEnv] * 2, max_restarts=1)
    with envs, pytest.raises(TypeError, match="AsyncCollector does not restart envs"):
        AsyncCollector(None, envs)


# ---------------------------------------------------------------- RayVectorEnv


@pytest.fixture
def ray_ready(ray_local: Any) -> Any:
    """The session's Ray, with the failing envs sent to the actors by value."""
    ray_local.cloudpickle.register_pickle_by_value(restart_envs)
    ray_local.cloudpickle.register_pickle_by_value(sys.modules["tests.envs"])
    return ray_local


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_ray_replaces_a_failed_actor_and_counts_stay_exact(ray_ready: Any, tmp_path: Path, mode: str) -> None:
    from vcollect.envs.ray_env import RayVectorEnv

    envs = RayVectorEnv(flaky(tmp_path, mode, num_envs=2), max_restarts=1)
    assert envs.capabilities.restarts_envs
    store = ListStore()
    with Collector(None, envs, store=store, seed=0) as collector:
        steps = collector.collect(n_step=41, random=True, reset_before_collect=True)
        assert steps.n_collected_steps == 41
        assert len(steps.abandoned) == 1 and steps.abandoned[0].steps == 2
        expected = "FlakyEnv failed at step 3" if mode == "raise" else "died"
        assert expected in steps.abandoned[0].error
        episodes = collector.collect(n_episode=3, random=True)
        assert episodes.n_collected_episodes == 3
    check_stored(store, [steps, episodes])


def test_ray_budget_spent_raises(ray_ready: Any) -> None:
    from vcollect.envs.ray_env import RayVectorEnv

    envs = RayVectorEnv([AlwaysRaisingEnv], max_restarts=1)
    with pytest.raises(EnvWorkerError, match="max_restarts=1 is spent"):
        Collector(None, envs, seed=0).collect(n_step=100, random=True, reset_before_collect=True)
    assert envs.restarts.used == 1
    envs.close()


# ---------------------------------------------------------------- env errors arrive whole


def _backend(name: str, fns: list[Any]) -> Any:
    if name == "ray":
        from vcollect.envs.ray_env import RayVectorEnv

        return RayVectorEnv(fns)
    return DummyVectorEnv(fns) if name == "dummy" else SubprocVectorEnv(fns)


@pytest.fixture(params=["dummy", "subproc", "ray"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_ready")
    return str(request.param)


def test_a_list_reward_is_an_env_output_error_naming_env_call_and_type(backend: str) -> None:
    envs = _backend(backend, [ListRewardEnv] * 2)
    with envs, pytest.raises(EnvOutputError) as info:
        Collector(None, envs, seed=0).collect(n_step=10, random=True, reset_before_collect=True)
    error = info.value
    assert error.env_id == 0
    assert "env 0: step returned a reward of type list ([1.0, 1.0, 1.0, 1.0]), which is not a number" in str(error)
    assert "setting an array element with a sequence" in error.traceback_text


def test_an_env_without_observation_space_is_an_env_output_error(backend: str) -> None:
    with pytest.raises(EnvOutputError, match="env 0: the env factory built a NoSpaceEnv that has no observation_space"):
        _backend(backend, [NoSpaceEnv] * 2)


# ---------------------------------------------------------------- the async collector's timeout


def test_async_collector_on_subproc_fails_after_the_backends_timeout() -> None:
    envs = SubprocVectorEnv([functools.partial(SleepingEnv, 3), functools.partial(SleepingEnv, 999)], num_workers=2,
                            timeout=1.0)
    started = time.monotonic()
    with pytest.raises(EnvWorkerError, match="timeout of 1 s") as info:
        AsyncCollector(None, envs, seed=0).collect(n_step=100, random=True, reset_before_collect=True)
    assert info.value.env_id == 0
    assert time.monotonic() - started < 20
    assert envs.closed


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli(*ARGS)``: ``vcollect ARGS`` in this process, datasets under ``tmp_path``."""
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path))

    def run(*args: str) -> Result:
        capsys.readouterr()
        status = main(list(args))
        out, err = capsys.readouterr()
        return Result(status, out, err)

    return run


def test_cli_async_timeout_on_subproc_fails_within_the_bound(cli: Cli) -> None:
    started = time.monotonic()
    result = cli("collect", "tests.cli_envs:Hanging-v0", "--num-envs", "2", "--backend", "subproc", "--steps", "100",
                 "--async", "--timeout", "1", "--no-progress")
    assert result.returncode == 1, result
    assert "--timeout" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert time.monotonic() - started < 20


def test_cli_max_env_restarts_carries_on_and_says_what_was_abandoned(tmp_path: Path, cli: Cli) -> None:
    kwargs = f'{{"marker": "{marker_in(tmp_path)}", "mode": "kill"}}'
    result = cli("collect", "tests.restart_envs:Flaky-v0", "--num-envs", "2", "--backend", "subproc", "--episodes", "6",
                 "--env-kwargs", kwargs, "--max-env-restarts", "2", "--no-progress", "--dataset", "cli/flaky-v0")
    assert result.returncode == 0, result
    assert "abandoned 1 episodes (2 steps, not stored)" in result.stdout, result.stdout
    assert "died with exit code -9" in result.stdout
    assert load_dataset("cli/flaky-v0", root=tmp_path).total_episodes == 6


def test_cli_max_env_restarts_is_checked(cli: Cli) -> None:
    for args, message in [
        (["--backend", "dummy", "--max-env-restarts", "1"], "--max-env-restarts needs a backend"),
        (["--backend", "subproc", "--max-env-restarts", "-1"], "--max-env-restarts must be >= 0"),
        (["--backend", "subproc", "--max-env-restarts", "1", "--async"], "not supported with --async"),
    ]:
        result = cli("collect", "CartPole-v1", "--steps", "10", *args)
        assert result.returncode == 2 and message in result.stderr, result
