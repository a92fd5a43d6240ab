"""SubprocVectorEnv's own machinery with real worker processes: the shared-memory fast path, routing env
ids to workers, and workers that die or fail to start."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

from tests import test_envs
from tests.envs import CountingEnv, DyingEnv, FailingEnv, make_cartpole
from tests.test_envs import assert_identical, make
from vcollect.envs import SubprocVectorEnv
from vcollect.envs.base import BaseVectorEnv
from vcollect.errors import CollectorStateError, EnvWorkerError

closing = test_envs.closing  # the fixture closing the vector envs a test made


def test_subproc_step_reset_seeds_in_shared_rows_or_beyond_int64(closing, monkeypatch):
    envs = make(closing, "subproc", [functools.partial(CountingEnv, 1)] * 3)
    envs.reset(seeds=0)
    big = [2**64 - 1, None, 5]  # too big for the shared int64 rows: the generic step + reset path
    got = envs.step_reset(np.zeros(3, np.int64), reset_seeds=big)
    assert got.reset_ids.tolist() == [0, 1, 2]
    assert [info["seed"] for info in got.reset_infos] == big

    def generic_path(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("took the generic path")

    monkeypatch.setattr(BaseVectorEnv, "step_reset", generic_path)
    got = envs.step_reset(np.zeros(3, np.int64), reset_seeds=[None, 3, 2**63 - 1])
    assert [info["seed"] for info in got.reset_infos] == [None, 3, 2**63 - 1]


@pytest.mark.parametrize("spin_s", [0.0, 300e-6])
def test_subproc_step_reset_of_every_env_skips_the_pipes(closing, monkeypatch, spin_s):
    # The collector's call (all envs, a seed each) goes through the shared control words and semaphores:
    # no pipe message while infos are empty, the same results as in process, restarts included.
    fast = SubprocVectorEnv([make_cartpole] * 4, num_workers=2, spin_s=spin_s)
    closing.append(fast)
    twin = make(closing, "dummy", [make_cartpole] * 4)
    fast.reset(seeds=0)
    twin.reset(seeds=0)
    sent: list[int] = []
    monkeypatch.setattr(fast._pool, "send", lambda w, message: sent.append(w))
    rng = np.random.default_rng(0)
    restarts = 0
    for t in range(80):
        actions = rng.integers(0, 2, 4)
        seeds = [1000 * t + j for j in range(4)]
        got = fast.step_reset(actions, reset_seeds=seeds)
        want = twin.step_reset(actions, reset_seeds=seeds)
        for a, b in zip(got[:4], want[:4]):
            assert_identical(a, b)
        assert got.infos == want.infos and got.reset_ids.tolist() == want.reset_ids.tolist()
        if want.reset_ids.size:
            assert_identical(got.reset_obs, want.reset_obs)
            restarts += want.reset_ids.size
        else:
            assert got.reset_obs is None and got.reset_infos == []
    assert sent == [] and restarts >= 4


@pytest.mark.parametrize("interrupted", ["_await_done", "recv"])
def test_subproc_interrupted_fast_step_reset_is_finished_by_the_next_call(closing, monkeypatch, interrupted):
    # Ctrl-C while waiting for a worker's answer (or for its pickled reply): the workers still do the step,
    # and the next call reads and drops those answers before writing the shared rows again.
    envs = make(closing, "subproc", [functools.partial(CountingEnv, 100)] * 4)
    assert isinstance(envs, SubprocVectorEnv)
    envs.reset()
    pool = envs._pool
    original = getattr(pool, interrupted)

    def interrupt_once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(pool, interrupted, original)
        raise KeyboardInterrupt

    monkeypatch.setattr(pool, interrupted, interrupt_once)
    with pytest.raises(KeyboardInterrupt):
        envs.step_reset(np.zeros(4, np.int64), reset_seeds=[1, 2, 3, 4])
    assert any(pool.owed)
    obs, *_, infos = envs.step(np.zeros(4, np.int64))
    assert obs.ravel().tolist() == [2, 2, 2, 2] and infos == [{"t": 2}] * 4
    assert not any(pool.owed)
    monkeypatch.setattr(pool, interrupted, interrupt_once)
    with pytest.raises(KeyboardInterrupt):
        envs.step_reset(np.zeros(4, np.int64), reset_seeds=[1, 2, 3, 4])
    got = envs.step_reset(np.zeros(4, np.int64), reset_seeds=[1, 2, 3, 4])
    assert got.obs.ravel().tolist() == [4, 4, 4, 4] and got.infos == [{"t": 4}] * 4


def test_subproc_subset_only_messages_the_workers_holding_those_envs(closing, monkeypatch):
    envs = make(closing, "subproc", [functools.partial(CountingEnv, 100)] * 5)
    assert isinstance(envs, SubprocVectorEnv)
    envs.reset()
    sent: list[int] = []
    original = envs._pool.send

    def spy(w: int, message: bytes) -> None:
        sent.append(w)
        original(w, message)

    monkeypatch.setattr(envs._pool, "send", spy)
    envs.step(np.zeros(2, np.int64), env_ids=[1, 2])  # groups: [0, 1, 2] on worker 0, [3, 4] on worker 1
    assert sent == [0]
    envs.reset(env_ids=[4])
    assert sent == [0, 1]
    envs.send(np.zeros(2, np.int64), env_ids=[3, 0])
    assert sorted(sent[2:]) == [0, 1]
    envs.recv(min_ready=2)
    envs.step(np.zeros(5, np.int64))
    assert sorted(sent[4:]) == [0, 1]  # one message per worker for a full step


def test_subproc_puts_several_envs_in_one_worker(closing):
    envs = SubprocVectorEnv([CountingEnv] * 5, num_workers=2)
    closing.append(envs)
    assert len({p.pid for p in envs._pool.procs}) == 2
    assert envs._pool.worker_of.tolist() == [0, 0, 0, 1, 1]
    default = SubprocVectorEnv([CountingEnv] * 3)
    closing.append(default)
    assert default.num_workers == min(3, os.cpu_count() or 1)
    with pytest.raises(ValueError, match="num_workers"):
        SubprocVectorEnv([CountingEnv] * 2, num_workers=3)


def test_dying_worker_raises_quickly_and_closes(closing):
    fns = [CountingEnv, CountingEnv, functools.partial(DyingEnv, die_step=2), CountingEnv]
    envs = make(closing, "subproc", fns)
    envs.reset()
    envs.step(np.zeros(4, np.int64))
    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match="exit code 3") as info:
        envs.step(np.zeros(4, np.int64))
    assert time.monotonic() - start < 5
    assert info.value.env_id == 2
    assert envs.closed
    with pytest.raises(CollectorStateError):
        envs.step(np.zeros(4, np.int64))


def test_dying_worker_during_fast_step_reset_raises_quickly_and_closes(closing):
    # The worker dies while the parent waits on its done semaphore (no pipe to read end-of-file from).
    fns = [CountingEnv, CountingEnv, functools.partial(DyingEnv, die_step=2), CountingEnv]
    envs = make(closing, "subproc", fns)
    envs.reset()
    envs.step_reset(np.zeros(4, np.int64), reset_seeds=[0, 1, 2, 3])
    start = time.monotonic()
    with pytest.raises(EnvWorkerError, match="exit code 3") as info:
        envs.step_reset(np.zeros(4, np.int64), reset_seeds=[0, 1, 2, 3])
    assert time.monotonic() - start < 5
    assert info.value.env_id == 2
    assert envs.closed


def test_workers_exit_when_the_parent_is_gone(closing):
    # A worker waiting on its command semaphore notices that the parent's end of its command pipe closed.
    envs = SubprocVectorEnv([CountingEnv] * 2, num_workers=2)
    closing.append(envs)
    envs.reset()
    for writer in envs._pool.pipes[0::2]:  # each worker's command pipe: what a parent that died leaves behind
        writer.close()
    for proc in envs._pool.procs:
        proc.join(5)
        assert proc.exitcode == 0


def test_dying_worker_during_async_recv(closing):
    envs = make(closing, "subproc", [CountingEnv, functools.partial(DyingEnv, die_step=1)])
    envs.reset()
    envs.send(np.zeros(2, np.int64))
    start = time.monotonic()
    with pytest.raises(EnvWorkerError) as info:
        while True:
            envs.recv(timeout=10)
    assert time.monotonic() - start < 5
    assert info.value.env_id == 1


def test_factory_failing_in_worker_is_reported(closing):
    with pytest.raises(EnvWorkerError, match="env 1.*factory raised") as info:
        SubprocVectorEnv([CountingEnv, functools.partial(FailingEnv, no_such_argument=1)], num_workers=2)
    assert "TypeError" in info.value.traceback_text


# -- the main module in the workers: imported only when needed; a missing __main__ guard in one line ------
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_script(tmp_path: Any, text: str) -> Any:
    """Run ``text`` as a script file with this interpreter (vcollect and tests importable)."""
    script = tmp_path / "collect_script.py"
    script.write_text(text)
    env = {**os.environ, "PYTHONPATH": REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


IMPORT_COUNTING_SCRIPT = '''
import functools, os, sys
import gymnasium as gym
import numpy as np
from vcollect.envs import SubprocVectorEnv

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "imports.log")
with open(LOG, "a") as log:  # one line per process that runs this file
    log.write(f"{os.getpid()}\\n")


class MainEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}


def imports():
    with open(LOG) as log:
        return len(log.readlines())


if __name__ == "__main__":
    gym.register("VcollectTestCounting-v0", entry_point="tests.envs:CountingEnv", kwargs={"episode_length": 3})
    gym.register("VcollectTestMain-v0", entry_point=MainEnv)
    cartpole = functools.partial(gym.make, "CartPole-v1")
    cases = {
        "id": (cartpole, None),
        "registered_here": (functools.partial(gym.make, "VcollectTestCounting-v0"), None),
        "module_id": (functools.partial(gym.make, "tests.cli_envs:InfoCounter-v0"), None),  # gym.make imports it
        "forced": (cartpole, True),
        "lambda": (lambda: gym.make("CartPole-v1"), None),
        "main_class": (MainEnv, None),
        "main_entry_point": (functools.partial(gym.make, "VcollectTestMain-v0"), None),
    }
    for name, (factory, import_main) in cases.items():
        before = imports()
        envs = SubprocVectorEnv([factory] * 2, num_workers=2, import_main=import_main)
        envs.reset(seeds=0)
        envs.step(np.zeros(2, np.int64))
        envs.close()
        print(name, envs.imports_main, imports() - before)
'''


def test_workers_import_the_main_module_only_when_the_factories_need_it(tmp_path):
    done = _run_script(tmp_path, IMPORT_COUNTING_SCRIPT)
    assert done.returncode == 0, done.stderr
    got = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    assert got == {
        "id": ["False", "0"],
        "registered_here": ["False", "0"],  # registered by the script: sent to the workers
        "module_id": ["False", "0"],
        "forced": ["True", "2"],
        "lambda": ["True", "2"],
        "main_class": ["True", "2"],
        "main_entry_point": ["True", "2"],
    }


def test_a_script_without_main_guard_works_when_workers_do_not_import_it(tmp_path):
    done = _run_script(
        tmp_path,
        "import functools\nimport gymnasium as gym\nimport numpy as np\nfrom vcollect.envs import SubprocVectorEnv\n"
        "envs = SubprocVectorEnv([functools.partial(gym.make, 'CartPole-v1')] * 2, num_workers=2)\n"
        "envs.reset(seeds=0)\nenvs.step(np.zeros(2, np.int64))\nenvs.close()\nprint('collected')\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["collected"]


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_a_script_without_main_guard_gets_a_one_line_error(tmp_path, context):
    # The workers import the script (its factory is a lambda of the script), which builds the envs again
    # at import: each worker exits quietly and the parent names the cause.
    done = _run_script(
        tmp_path,
        "import gymnasium as gym\nfrom vcollect.envs import SubprocVectorEnv\n"
        f"envs = SubprocVectorEnv([lambda: gym.make('CartPole-v1')] * 2, num_workers=2, context={context!r})\n"
        "print('built')\n",
    )
    assert done.returncode == 1
    assert done.stdout == ""  # the workers did not get past the script's second line either
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("vcollect.errors.EnvWorkerError: env 0: worker process 0 could not start")
    assert 'has no `if __name__ == "__main__":` guard' in lines[-1]
    assert "put the code that starts collecting under that guard" in lines[-1]
    # the parent's own short traceback, nothing from the workers (no "bootstrapping phase" RuntimeError)
    assert lines[0] == "Traceback (most recent call last):" and done.stderr.count("Traceback") == 1
    assert "RuntimeError" not in done.stderr and "bootstrapping" not in done.stderr
    assert len(lines) < 20


def test_subproc_split_step_reset_returns_what_step_reset_returns_and_holds_other_calls(closing):
    # send_step_reset/recv_step_reset of every env: the results of step_reset, restarts included (fast path with
    # seeds, the synchronous path with options); while one is under way every other call is refused.
    split = SubprocVectorEnv([make_cartpole] * 4, num_workers=2)
    closing.append(split)
    twin = make(closing, "dummy", [make_cartpole] * 4)
    split.reset(seeds=0)
    twin.reset(seeds=0)
    rng = np.random.default_rng(0)
    restarts = 0
    for t in range(60):
        actions = rng.integers(0, 2, 4)
        seeds = [1000 * t + j for j in range(4)]
        options = {"low": -0.01, "high": 0.01} if t % 3 == 0 else None
        split.send_step_reset(actions, reset_seeds=seeds, options=options)
        if t == 0:
            for call in (
                functools.partial(split.step, actions),
                functools.partial(split.reset, seeds=1),
                functools.partial(split.step_reset, actions, reset_seeds=seeds),
                functools.partial(split.send_step_reset, actions, reset_seeds=seeds),
                functools.partial(split.send, actions),
                functools.partial(split.reset_async, seeds=1),
                functools.partial(split.get_env_attr, "spec"),
                split.render,
            ):
                with pytest.raises(ValueError, match="recv_step_reset"):
                    call()
        got = split.recv_step_reset()
        want = twin.step_reset(actions, reset_seeds=seeds, options=options)
        for a, b in zip(got[:4], want[:4]):
            assert_identical(a, b)
        assert got.reset_ids.tolist() == want.reset_ids.tolist() and got.reset_infos == want.reset_infos
        if want.reset_ids.size:
            assert_identical(got.reset_obs, want.reset_obs)
            restarts += want.reset_ids.size
    assert restarts >= 4
    with pytest.raises(ValueError, match="no step_reset is under way"):
        split.recv_step_reset()
    split.step(np.zeros(4, np.int64))  # nothing under way: the vector env takes calls again


class _PolicyFailingAt:
    """Acts on the pole angle; raises on its ``fail_at``-th call (0: never)."""

    def __init__(self, fail_at: int) -> None:
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self, obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("the policy failed")
        return (obs[:, 2] > 0).astype(np.int64), None


def _record_past_a_failing_policy(backend: str) -> list[Any]:
    from tests.sinks import ListStore
    from vcollect import Collector
    from vcollect.envs import make_vector

    workers = {"num_workers": 2, "overlap_steps": True} if backend == "subproc" else {}
    store = ListStore()
    policy = _PolicyFailingAt(40)
    with Collector(policy, make_vector("CartPole-v1", 4, backend=backend, **workers), store=store, seed=0,
                   seed_every_reset=True) as collector:
        with pytest.raises(RuntimeError, match="the policy failed"):
            collector.collect(n_step=4 * 100, reset_before_collect=True)
        seen: list[Any] = [len(collector.buffer)]
        seen += [collector.buffer.episode(e).observations.tobytes() for e in range(4)]
        policy.fail_at = 0
        stats = collector.collect(n_step=4 * 30 + 2)
        seen += [len(collector.buffer), stats.lens.tolist()]
        seen += [collector.buffer.episode(e).observations.tobytes() for e in range(4)]
    seen += [(ep.seed, ep.env_id, ep.observations.tobytes()) for ep in store.episodes]
    return seen


def test_subproc_collector_records_the_steps_before_a_failing_policy_as_in_process():
    # The subprocess collector sends each step's next actions before recording it: a policy that raises
    # still leaves every step before it recorded, exactly as the in-process backend does.
    assert _record_past_a_failing_policy("subproc") == _record_past_a_failing_policy("dummy")


class _SinkFailingOnce:
    """A ListStore whose first write raises OSError."""

    def __init__(self) -> None:
        from tests.sinks import ListStore

        self.inner = ListStore()
        self.observation_space = self.inner.observation_space
        self.action_space = self.inner.action_space
        self.failed = False

    def write_episodes(self, *args: Any, **kwargs: Any) -> None:
        if not self.failed:
            self.failed = True
            raise OSError("the disk is full")
        self.inner.write_episodes(*args, **kwargs)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()


def test_subproc_collector_store_failing_while_the_next_step_runs_abandons_the_running_episodes():
    # The store raises while a step is recorded and the next step is under way: that step is waited for and
    # dropped, the running episodes (their envs took it) are abandoned and listed, and the next call starts
    # every env afresh, so every episode stored afterwards replays exactly from its seed and actions.
    import gymnasium as gym

    from vcollect import Collector
    from vcollect.envs import make_vector
    from vcollect.policies import RandomPolicy

    envs = make_vector("CartPole-v1", 4, backend="subproc", num_workers=2, overlap_steps=True)
    assert envs.capabilities.split_step_reset
    sink = _SinkFailingOnce()
    with Collector(RandomPolicy(envs.single_action_space, seed=0), envs, store=sink, seed=0,
                   seed_every_reset=True) as collector:
        with pytest.raises(OSError, match="the disk is full"):
            collector.collect(n_step=4 * 3000, reset_before_collect=True)
        assert isinstance(envs, SubprocVectorEnv)
        assert envs._split is None and not any(envs._pool.owed)  # nothing left under way
        stats = collector.collect(n_step=4 * 300)
        assert stats.n_collected_steps == 4 * 300
        assert 1 <= len(stats.abandoned) <= 4
        assert all("dropped" in episode.error and episode.steps >= 1 for episode in stats.abandoned)
    stored = sink.inner.episodes
    assert len(stored) >= 20
    env = gym.make("CartPole-v1")
    for episode in stored:
        obs, _ = env.reset(seed=episode.seed)
        rows = [obs]
        for action in episode.actions.tolist():
            obs, *_ = env.step(action)
            rows.append(obs)
        assert np.array_equal(np.array(rows), episode.observations)
        assert episode.terminations[-1] or episode.truncations[-1]


def test_subproc_declares_split_steps_where_a_cpu_is_free(closing):
    # Recording a step while the workers take the next pays only with a CPU beside the workers': declared
    # by default only then; overlap_steps says it outright either way.
    usable = len(os.sched_getaffinity(0))
    for workers, overlap, declared in [(1, None, usable > 1), (2, None, usable > 2), (2, True, True), (1, False, False)]:
        envs = SubprocVectorEnv([make_cartpole] * 2, num_workers=workers, overlap_steps=overlap)
        closing.append(envs)
        assert envs.capabilities.split_step_reset == declared
        assert envs.capabilities.step_reset
