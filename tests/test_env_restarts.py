"""Env workers that restart (``max_restarts``): a worker process or Ray actor that dies, or whose env raises,
is replaced; the episode it was in is abandoned and reported, and counts stay exact. Also: env errors that
arrive whole (EnvOutputError naming the env, the call and the value's type), and the async collector's
waits bounded by the backend's timeout. The AsyncCollector restarts envs as the Collector does."""

from __future__ import annotations

import copy
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
from tests.restart_envs import (
    AlwaysKillingEnv,
    AlwaysRaisingEnv,
    FlakyEnv,
    ListRewardEnv,
    NoSpaceEnv,
    SleepingEnv,
    marker_in,
)
from tests.sinks import ListStore
from tests.test_cli import Cli, Result
from vcollect.async_collector import AsyncCollector
from vcollect.cli import main
from vcollect.collecting.reset_seeds import ResetSeeds
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


# ---------------------------------------------------------------- AsyncCollector on envs that restart


def seed_gaps(store: ListStore, stream: ResetSeeds, num_envs: int) -> dict[int, list[int]]:
    """Per env id, the positions in its seed stream whose seeds no stored episode has, below the last stored
    one (the resets of abandoned episodes, or resets lost with a worker), checking that each env's stored
    episodes have seeds of its own stream, in the stream's order. Uses ``stream`` up."""
    gaps = {}
    for env_id in range(num_envs):
        seeds = [episode.seed for episode in store.episodes if episode.env_id == env_id]
        own = stream.take([env_id] * (len(seeds) + 8))
        positions = [own.index(seed) for seed in seeds]
        assert positions == sorted(positions), (env_id, positions)
        gaps[env_id] = sorted(set(range(positions[-1] + 1)) - set(positions)) if positions else []
    return gaps


@pytest.mark.parametrize(("mode", "workers"), [("raise", 4), ("kill", 4), ("kill", 2)])
def test_async_collector_replaces_a_failed_worker_and_counts_stay_exact(
    tmp_path: Path, mode: str, workers: int
) -> None:
    envs = SubprocVectorEnv(flaky(tmp_path, mode), num_workers=workers, max_restarts=1)
    store = ListStore()
    with AsyncCollector(None, envs, store=store, seed=0, timeout=30) as collector:
        stream = copy.deepcopy(collector.context.reset_seeds)
        steps = collector.collect(n_step=101, random=True, reset_before_collect=True)
        assert steps.n_collected_steps == 101
        assert envs.restarts.used == 1
        expected = "FlakyEnv failed at step 3" if mode == "raise" else "died with exit code -9"
        assert steps.abandoned and all(expected in a.error for a in steps.abandoned), steps.abandoned
        # the env that failed had taken 2 steps of its first episode; with 2 envs a worker, its neighbour's
        # running episode (if it had one) went with the worker too
        assert any(a.steps == 2 for a in steps.abandoned), steps.abandoned
        group = {a.env_id // (4 // workers) for a in steps.abandoned}
        assert len(group) == 1 and len(steps.abandoned) <= 4 // workers, steps.abandoned
        episodes = collector.collect(n_episode=7, random=True)
        assert episodes.n_collected_episodes == 7 and episodes.n_abandoned_episodes == 0
    check_stored(store, [steps, episodes])
    # every env's new episodes got the next seeds of its own stream: an env whose episode was abandoned skipped
    # exactly that episode's seed (the failed env: its first), its neighbour in the replaced worker at most the
    # seed of a reset lost with it, the other envs none
    gaps = seed_gaps(store, stream, 4)
    abandoned = {a.env_id for a in steps.abandoned}
    replaced = {i for i in range(4) if i // (4 // workers) in group}
    assert [0] in [gaps[i] for i in abandoned], gaps
    for env_id, skipped in gaps.items():
        if env_id in abandoned:
            assert len(skipped) == 1, gaps
        elif env_id in replaced:
            assert len(skipped) <= 1, gaps
        else:
            assert skipped == [], gaps


def test_async_collector_episodes_stay_exact_when_a_worker_dies(tmp_path: Path) -> None:
    envs = SubprocVectorEnv(flaky(tmp_path, "kill", num_envs=3), num_workers=3, max_restarts=2)
    store = ListStore()
    with AsyncCollector(None, envs, store=store, seed=3, timeout=30) as collector:
        stats = collector.collect(n_episode=9, random=True, reset_before_collect=True)
        assert stats.n_collected_episodes == 9
        assert [(a.steps, "died with exit code -9" in a.error) for a in stats.abandoned] == [(2, True)]
        assert envs.restarts.used == 1
    check_stored(store, [stats])


def test_async_collector_worker_killed_from_outside_between_calls(tmp_path: Path) -> None:
    envs = SubprocVectorEnv([functools.partial(FlakyEnv, marker_in(tmp_path), fail_step=99)] * 2, num_workers=2,
                            max_restarts=3)
    store = ListStore()
    with AsyncCollector(None, envs, store=store, seed=1, timeout=30) as collector:
        stream = copy.deepcopy(collector.context.reset_seeds)
        first = collector.collect(n_step=6, random=True, reset_before_collect=True)
        os.kill(envs._pool.procs[1].pid, signal.SIGKILL)
        envs._pool.procs[1].join(5)
        second = collector.collect(n_episode=4, random=True)
        assert envs.restarts.used == 1
    assert first.n_collected_steps == 6
    assert second.n_collected_episodes == 4
    # env 1 was mid-episode (abandoned) or had its reset in flight (nothing to abandon) when it was killed
    assert [a.env_id for a in second.abandoned] in ([], [1]), second.abandoned
    assert all("died with exit code -9" in a.error for a in second.abandoned)
    check_stored(store, [first, second])
    gaps = seed_gaps(store, stream, 2)
    assert gaps[0] == [] and len(gaps[1]) == 1, gaps  # the seed of the episode or reset lost with the worker


def test_async_collector_reset_that_raises_is_restarted_with_the_next_seed(tmp_path: Path) -> None:
    envs = SubprocVectorEnv(flaky(tmp_path, "reset", num_envs=2), num_workers=2, max_restarts=1)
    store = ListStore()
    with AsyncCollector(None, envs, store=store, seed=2, timeout=30) as collector:
        stream = copy.deepcopy(collector.context.reset_seeds)
        stats = collector.collect(n_episode=6, random=True, reset_before_collect=True)
        assert stats.n_collected_episodes == 6 == len(store.episodes)
        assert envs.restarts.used == 1
    # the episode that ended before the failed reset is stored (it ended as its env ended it: 3 steps, the
    # last one jumping to the end); nothing was running when the reset failed, so nothing is abandoned
    assert stats.abandoned == ()
    short = [e for e in store.episodes if len(e.rewards) != EPISODE]
    assert len(short) == 1 and short[0].terminations[-1]
    gaps = seed_gaps(store, stream, 2)
    assert gaps[1 - short[0].env_id] == [] and gaps[short[0].env_id] == [1]  # the failed reset's seed


def test_async_collector_budget_spent_raises_env_worker_error_saying_so() -> None:
    envs = SubprocVectorEnv([AlwaysRaisingEnv] * 2, num_workers=2, max_restarts=3)
    with pytest.raises(EnvWorkerError, match=r"AlwaysRaisingEnv fails every episode.*max_restarts=3 is spent") as info:
        AsyncCollector(None, envs, seed=0, timeout=30).collect(n_step=1000, random=True, reset_before_collect=True)
    assert "original traceback" in str(info.value)
    assert envs.restarts.used == 3
    envs.close()


def test_async_collector_dead_worker_past_the_budget_raises_and_closes() -> None:
    # one worker: its deaths come one at a time, each a replacement until the budget is spent (two workers
    # may die in one wait, which raises once they outnumber the replacements left: the test below)
    envs = SubprocVectorEnv([AlwaysKillingEnv] * 2, num_workers=1, max_restarts=2)
    with pytest.raises(EnvWorkerError, match=r"died with exit code -9; the vector env has been closed.*max_restarts=2 is "
                       "spent"):
        AsyncCollector(None, envs, seed=0, timeout=30).collect(n_step=1000, random=True, reset_before_collect=True)
    assert envs.restarts.used == 2
    assert envs.closed


def test_workers_dying_in_one_call_beyond_the_replacements_left_raise_at_once() -> None:
    envs = SubprocVectorEnv([AlwaysKillingEnv] * 2, num_workers=2, max_restarts=1)
    envs.reset(seeds=[0, 1])
    envs.step(np.zeros(2, np.int64))
    with pytest.raises(EnvWorkerError, match=r"died with exit code -9; the vector env has been closed.*max_restarts=1 is "
                       "spent"):
        envs.step(np.zeros(2, np.int64))  # both envs kill their workers at their second step
    assert envs.restarts.used == 0  # two losses, one replacement left: none is made, the vector env closes
    assert envs.closed


def test_async_send_to_a_worker_killed_while_idle_is_replaced_by_the_next_recv(tmp_path: Path) -> None:
    with SubprocVectorEnv([functools.partial(FlakyEnv, marker_in(tmp_path), fail_step=99)] * 2, num_workers=2,
                          max_restarts=1) as envs:
        envs.reset(seeds=[0, 1])
        os.kill(envs._pool.procs[1].pid, signal.SIGKILL)
        envs._pool.procs[1].join(5)
        envs.send(np.zeros(2, np.int64))  # the dead worker's command cannot be sent: noted, not raised
        received = []
        while envs.in_flight.size:
            *_, ids = envs.recv(timeout=30)
            received += ids.tolist()
        assert received == [0]
        (restart,) = envs.take_restarts()
        assert restart.env_id == 1 and "died with exit code -9" in restart.error
        envs.reset(seeds=[2, 3])
        assert envs.step(np.zeros(2, np.int64))[0].ravel().tolist() == [1, 1]  # the new worker steps


def test_async_recv_left_with_nothing_in_flight_by_a_restart_returns_no_env_ids(tmp_path: Path) -> None:
    with SubprocVectorEnv(flaky(tmp_path, "raise", num_envs=1, fail_step=1), max_restarts=1) as envs:
        envs.reset(seeds=[0])
        envs.send(np.zeros(1, np.int64))
        *_, ids = envs.recv(timeout=30)
        assert ids.tolist() == []
        assert [r.env_id for r in envs.take_restarts()] == [0]
        with pytest.raises(ValueError, match="no step in flight"):
            envs.recv(timeout=1)


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


@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_ray_async_collector_replaces_a_failed_actor(ray_ready: Any, tmp_path: Path, mode: str) -> None:
    from vcollect.envs.ray_env import RayVectorEnv

    envs = RayVectorEnv(flaky(tmp_path, mode, num_envs=2), max_restarts=1)
    store = ListStore()
    with AsyncCollector(None, envs, store=store, seed=0, timeout=60) as collector:
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


def test_cli_async_max_env_restarts_carries_on(tmp_path: Path, cli: Cli) -> None:
    kwargs = f'{{"marker": "{marker_in(tmp_path)}", "mode": "kill"}}'
    result = cli("collect", "tests.restart_envs:Flaky-v0", "--num-envs", "2", "--backend", "subproc", "--episodes", "6",
                 "--env-kwargs", kwargs, "--max-env-restarts", "2", "--async", "--timeout", "30", "--no-progress",
                 "--dataset", "cli/flaky-async-v0")
    assert result.returncode == 0, result
    assert "AsyncCollector" in result.stdout
    assert "abandoned 1 episodes (2 steps, not stored)" in result.stdout, result.stdout
    assert "died with exit code -9" in result.stdout
    dataset = load_dataset("cli/flaky-async-v0", root=tmp_path)
    assert dataset.total_episodes == 6
    for episode in dataset.iterate_episodes():
        np.testing.assert_array_equal(np.asarray(episode.observations).ravel(), np.arange(EPISODE + 1))


def test_cli_ray_workers_max_env_restarts_carries_on(tmp_path: Path, cli: Cli) -> None:
    kwargs = f'{{"marker": "{marker_in(tmp_path)}", "mode": "raise"}}'
    result = cli("collect", "tests.restart_envs:Flaky-v0", "--num-envs", "2", "--backend", "subproc", "--episodes", "6",
                 "--env-kwargs", kwargs, "--max-env-restarts", "1", "--ray-workers", "1", "--no-progress",
                 "--dataset", "cli/flaky-ray-v0")
    assert result.returncode == 0, result
    assert "abandoned 1 episodes (2 steps, not stored)" in result.stdout, result.stdout
    assert "FlakyEnv failed at step 3" in result.stdout
    dataset = load_dataset("cli/flaky-ray-v0", root=tmp_path)
    assert dataset.total_episodes == 6
    for episode in dataset.iterate_episodes():
        np.testing.assert_array_equal(np.asarray(episode.observations).ravel(), np.arange(EPISODE + 1))


def test_cli_max_env_restarts_is_checked(cli: Cli) -> None:
    for args, message in [
        (["--backend", "dummy", "--max-env-restarts", "1"], "--max-env-restarts needs a backend"),
        (["--backend", "subproc", "--max-env-restarts", "-1"], "--max-env-restarts must be >= 0"),
        (["--backend", "dummy", "--max-env-restarts", "1", "--async"], "--max-env-restarts needs a backend"),
    ]:
        result = cli("collect", "CartPole-v1", "--steps", "10", *args)
        assert result.returncode == 2 and message in result.stderr, result


def test_distributed_workers_report_the_episodes_their_envs_abandoned(ray_ready: Any, tmp_path: Path) -> None:
    from vcollect.distributed import DistributedCollector

    with DistributedCollector(
        FlakyEnv, None, num_workers=2, envs_per_worker=2, backend="subproc",
        backend_kwargs={"max_restarts": 1, "num_workers": 2}, seed=0,
        env_kwargs={"marker": marker_in(tmp_path), "fail_step": 3, "mode": "raise"},
    ) as dc:
        stats = dc.collect(n_step=81, random=True)
        per_worker = dict(dc.last_worker_stats)
    assert stats.n_collected_steps == 81
    assert len(stats.abandoned) == 1
    abandoned = stats.abandoned[0]
    assert abandoned.steps == 2 and "FlakyEnv failed at step 3" in abandoned.error
    # named by its env id across the workers: worker w holds env ids 2w and 2w + 1
    (worker,) = [w for w, s in per_worker.items() if s.abandoned]
    assert per_worker[worker].abandoned == (abandoned,)
    assert abandoned.env_id in (2 * worker, 2 * worker + 1)
