"""`timeout=` of the out-of-process backends: a step or reset that never returns raises EnvWorkerError
naming the env, and the hung workers are stopped; in-process backends refuse the option."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.envs import CountingEnv
from tests.test_cli import Cli, Result, run_process
from vcollect.cli import main
from vcollect.collector import Collector
from vcollect.envs import SubprocVectorEnv, make_vector
from vcollect.errors import EnvWorkerError
from vcollect.store import load_dataset


class HangingEnv(CountingEnv):
    """A CountingEnv whose step number `hang_step` (since reset) never returns (or whose reset never does,
    with hang_reset): it waits on an event nobody sets. Only for worker processes and actors."""

    def __init__(self, hang_step: int = 3, hang_reset: bool = False) -> None:
        super().__init__(episode_length=100)
        self.hang_step = hang_step
        self.hang_reset = hang_reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if self.hang_reset:
            threading.Event().wait()
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.t + 1 == self.hang_step:
            threading.Event().wait()
        return super().step(action)


def hanging_fns(num_envs: int, hung: int, **kwargs: Any) -> list[Any]:
    """Factories of num_envs envs of which env id `hung` hangs (the others are CountingEnvs)."""
    return [
        (lambda: HangingEnv(**kwargs)) if i == hung else (lambda: CountingEnv(episode_length=100))
        for i in range(num_envs)
    ]


def assert_timed_out(exc: EnvWorkerError, env_id: int, started: float, timeout: float) -> None:
    assert exc.env_id == env_id
    assert f"env ids {env_id} " in str(exc) and "timeout" in str(exc) and "has been closed" in str(exc)
    assert time.monotonic() - started < timeout + 10  # raised near the timeout, not never


@pytest.mark.parametrize("call", ["step", "step_reset", "collector"])
def test_subproc_step_that_never_returns_raises_naming_the_env_and_stops_the_workers(call: str) -> None:
    envs = SubprocVectorEnv(hanging_fns(4, hung=2), num_workers=2, timeout=1.0)
    envs.reset(seeds=0)
    envs.step(np.zeros(4, np.int64))  # step 1: every env answers
    procs = list(envs._pool.procs)
    started = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        if call == "collector":
            Collector(None, envs, seed=0).collect(n_step=100, random=True, reset_before_collect=True)
        else:
            for _ in range(3):
                if call == "step":
                    envs.step(np.zeros(4, np.int64))
                else:
                    envs.step_reset(np.zeros(4, np.int64), reset_seeds=[None] * 4)
    assert_timed_out(info.value, 2, started, 1.0)
    assert envs.closed
    assert all(not p.is_alive() for p in procs)  # the hung worker was killed, the others stopped


def test_subproc_reset_that_never_returns_raises() -> None:
    envs = SubprocVectorEnv(hanging_fns(2, hung=1, hang_reset=True), num_workers=2, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        envs.reset(seeds=0)
    assert_timed_out(info.value, 1, started, 0.5)
    assert "reset" in str(info.value)
    assert envs.closed and all(not p.is_alive() for p in envs._pool.procs)


def test_subproc_timeout_also_bounds_a_step_while_others_are_in_flight() -> None:
    """The generic path (async commands outstanding) counts the timeout as well."""
    envs = SubprocVectorEnv(hanging_fns(2, hung=0, hang_step=1), num_workers=2, timeout=0.5)
    envs.reset(seeds=0)
    envs.send(np.zeros(1, np.int64), env_ids=[1])  # env 1 in flight: step() below takes the generic path
    started = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        envs.step(np.zeros(1, np.int64), env_ids=[0])
    assert_timed_out(info.value, 0, started, 0.5)
    assert envs.closed and all(not p.is_alive() for p in envs._pool.procs)


def test_subproc_with_a_timeout_collects_like_without() -> None:
    fns = [lambda: CountingEnv(episode_length=3)] * 3
    with SubprocVectorEnv(fns, timeout=30) as timed, SubprocVectorEnv(fns) as plain:
        a = Collector(None, timed, seed=1).collect(n_step=30, random=True, reset_before_collect=True)
        b = Collector(None, plain, seed=1).collect(n_step=30, random=True, reset_before_collect=True)
        assert (a.n_collected_steps, a.n_collected_episodes) == (b.n_collected_steps, b.n_collected_episodes)


@pytest.mark.parametrize("bad", [0, -1.0, "5", True])
def test_a_timeout_must_be_positive_seconds(bad: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        SubprocVectorEnv([CountingEnv], timeout=bad)


@pytest.mark.parametrize("backend", ["dummy", "gymnasium"])
def test_make_vector_refuses_a_timeout_for_in_process_backends(backend: str) -> None:
    with pytest.raises(ValueError, match="cannot interrupt"):
        make_vector(CountingEnv, 2, backend=backend, timeout=1.0)


def test_make_vector_passes_the_timeout_to_subproc() -> None:
    with make_vector(CountingEnv, 2, backend="subproc", timeout=7) as envs:
        assert envs.timeout == 7.0  # type: ignore[attr-defined]
    with make_vector(CountingEnv, 2, backend="dummy", timeout=None) as envs:
        assert envs.timeout is None  # type: ignore[attr-defined]


# ---------------------------------------------------------------- RayVectorEnv


@pytest.fixture
def ray_ready(ray_local: Any) -> Any:
    """The session's Ray, with this module's HangingEnv sent to the actors by value."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_local


@pytest.mark.parametrize("call", ["step", "reset"])
def test_ray_call_that_never_returns_raises_naming_the_env_and_kills_the_actors(ray_ready: Any, call: str) -> None:
    from vcollect.envs.ray_env import RayVectorEnv

    envs = RayVectorEnv(hanging_fns(2, hung=1, hang_reset=call == "reset"), timeout=1.0)
    actors = list(envs._actors)
    started = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        envs.reset(seeds=0)
        for _ in range(3):
            envs.step(np.zeros(2, np.int64))
    assert_timed_out(info.value, 1, started, 1.0)
    assert call in str(info.value)
    assert envs.closed
    # the killed actors answer nothing any more
    with pytest.raises(ray_ready.exceptions.RayActorError):
        ray_ready.get(actors[1].describe.remote(), timeout=30)


def test_make_vector_passes_the_timeout_to_ray(ray_ready: Any) -> None:
    with make_vector(CountingEnv, 2, backend="ray", timeout=5) as envs:
        assert envs.timeout == 5.0  # type: ignore[attr-defined]
        envs.reset(seeds=0)
        envs.step(np.zeros(2, np.int64))


# ---------------------------------------------------------------- vcollect collect --timeout


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli(*ARGS)``: ``vcollect ARGS`` in this process, datasets under ``tmp_path`` (as in test_cli)."""
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path))

    def run(*args: str) -> Result:
        capsys.readouterr()
        status = main(list(args))
        out, err = capsys.readouterr()
        return Result(status, out, err)

    return run


def test_cli_timeout_on_subproc_fails_naming_the_env_and_keeps_committed_episodes(tmp_path: Path, cli: Cli) -> None:
    result = cli("collect", "tests.cli_envs:Hanging-v0", "--num-envs", "2", "--backend", "subproc", "--steps", "100",
                 "--timeout", "1", "--shard-steps", "4", "--no-progress", "--dataset", "cli/hang-v0")
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vcollect collect: error: env ") and "--timeout" in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    # each env finished 2 episodes of 4 steps before its 10th step hung
    assert load_dataset("cli/hang-v0", root=tmp_path).total_episodes == 4


@pytest.mark.parametrize("backend", ["dummy", "gymnasium"])
def test_cli_timeout_on_an_in_process_backend_ends_the_command(tmp_path: Path, backend: str) -> None:
    started = time.monotonic()
    result = run_process(tmp_path, "collect", "tests.cli_envs:Hanging-v0", "--num-envs", "1", "--backend", backend,
                         "--steps", "5000", "--env-kwargs", '{"hang_after": 1000}', "--timeout", "1",
                         "--shard-steps", "4", "--no-progress", "--dataset", "cli/hang-v0", timeout=60)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vcollect collect: error: no env step or reset") and "--timeout 1" in lines[0]
    assert time.monotonic() - started < 50
    committed = load_dataset("cli/hang-v0", root=tmp_path).total_episodes
    said = re.search(r"keeps (at least )?its ([\d,]+) committed episodes", lines[0])
    assert said is not None and committed >= 1, lines[0]
    # exact once every commit had finished; a commit still running when the message was written adds to it
    told = int(said.group(2).replace(",", ""))
    assert told == committed if said.group(1) is None else told <= committed, (lines[0], committed)


def test_cli_timeout_must_be_positive(cli: Cli) -> None:
    result = cli("collect", "CartPole-v1", "--steps", "10", "--timeout", "0")
    assert result.returncode == 2 and "--timeout must be a positive number" in result.stderr
    result = cli("collect", "CartPole-v1", "--steps", "10", "--timeout", "5", "--ray-workers", "1")
    assert result.returncode == 2 and "--timeout is not supported with --ray-workers" in result.stderr


def test_cli_timeout_does_not_end_a_run_that_progresses(cli: Cli) -> None:
    result = cli("collect", "tests.cli_envs:InfoCounter-v0", "--num-envs", "2", "--backend", "dummy",
                 "--steps", "50", "--timeout", "30", "--no-progress")
    assert result.returncode == 0, result
