"""The `vcollect` command, run in-process (``vcollect.cli.main``, output captured): output, exit status, and the
datasets left on disk. A few tests run it as a real process: the installed console script, its exit statuses,
and Ctrl-C."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vcollect import Collector, EpisodeStore, make_vector
from vcollect import stats as stats_module
from vcollect.cli import main
from vcollect.envs.factory import BACKENDS
from vcollect.stats import CollectStats
from vcollect.store import load_dataset

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ["collect", "list", "show", "combine", "split", "export", "import-minari", "verify", "delete", "bench", "view"]
# Backends the CLI tests run collect on (ray has its own tests and a slow start).
LOCAL_BACKENDS = [name for name in BACKENDS if name != "ray"]


class Result(NamedTuple):
    """What one ``vcollect`` command gave: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., Result]


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli(*ARGS)``: ``vcollect ARGS`` in this process, with the datasets root ``tmp_path`` ($VCOLLECT_DATASETS_PATH)."""
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path))

    def run(*args: str) -> Result:
        capsys.readouterr()  # what came before is not this command's output
        handler = signal.getsignal(signal.SIGINT)
        status = main(list(args))
        out, err = capsys.readouterr()
        assert signal.getsignal(signal.SIGINT) is handler  # collect's Ctrl-C handling does not outlive it
        return Result(status, out, err)

    return run


def env_for(root: Path, **extra: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "VCOLLECT_DATASETS_PATH": str(root), "PYTHONPATH": pythonpath, **extra}


def run_process(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m vcollect ARGS`` as a real process with the datasets root ``root`` (stdin closed, like a script)."""
    return subprocess.run(
        [sys.executable, "-m", "vcollect", *args],
        cwd=REPO, env=env_for(root), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )


def table_value(stdout: str, name: str) -> str:
    """The value cell of row ``name`` of a printed key/value table."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) >= 2 and cells[0] == name:
            return cells[1]
    raise AssertionError(f"no row {name!r} in:\n{stdout}")


def assert_usage_error(result: Result | subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vcollect") and "error:" in lines[0]
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -------------------------------------------------------------------------------------------- help


def test_console_script_is_installed_and_runs(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("vcollect")
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable} (vcollect not pip-installed here)")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=env_for(tmp_path))
    assert result.returncode == 0
    import vcollect

    assert result.stdout.strip() == f"vcollect {vcollect.__version__}"


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_on_every_command(tmp_path: Path, command: str | None, cli: Cli) -> None:
    result = cli(*([command] if command else []), "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: vcollect{' ' + command if command else ''}")
    if command is None:
        for name in COMMANDS:
            assert name in result.stdout
    if command == "collect":
        flat = " ".join(result.stdout.split())
        for option in ("--num-envs", "--backend", "--steps", "--episodes", "--policy", "--seed", "--dataset",
                       "--async", "--author", "--algorithm-name", "--record-infos"):
            assert option in flat
        for backend in BACKENDS:  # whatever backends this installation has, at run time
            assert backend in flat


# ----------------------------------------------------------------------------------------- collect


def test_collect_exact_episodes_on_every_backend_into_datasets(tmp_path: Path, cli: Cli) -> None:
    for backend in LOCAL_BACKENDS:
        result = cli(
            "collect", "CartPole-v1", "--num-envs", "4", "--backend", backend, "--episodes", "13",
            "--seed", "0", "--dataset", f"cli/cartpole-{backend}-v0", "--author", "alice",
            "--algorithm-name", "uniform",
        )
        assert result.returncode == 0, result.stderr
        assert table_value(result.stdout, "episodes") == "13"
        dataset = load_dataset(f"cli/cartpole-{backend}-v0", root=tmp_path)
        assert dataset.metadata["author"] == "alice" and dataset.metadata["algorithm_name"] == "uniform"
        assert dataset.metadata["collection"]["backend"] == backend
        assert dataset.env_spec is not None and dataset.env_spec.id == "CartPole-v1"
        assert "%" in result.stderr  # the progress bar
        written = f"wrote {dataset.total_episodes:,} episodes ({dataset.total_steps:,} steps)"
        assert written in " ".join(result.stdout.split())
        if backend not in ("dummy", "subproc"):
            # Backends that step every env at once also store the surplus episodes of the last vector step
            # (kept, and counted by a later collect call).
            assert dataset.total_episodes >= 13
            continue
        assert dataset.total_episodes == 13
        assert table_value(result.stdout, "steps") == f"{dataset.total_steps:,}"
        assert float(table_value(result.stdout, "return mean")) == pytest.approx(dataset.episode_returns.mean(), abs=0.006)
        assert int(table_value(result.stdout, "length max")) == dataset.episode_lengths.max()
    # Same seed, same data, whatever the backend runs the envs on.
    reference = load_dataset("cli/cartpole-dummy-v0", root=tmp_path)
    other = load_dataset("cli/cartpole-subproc-v0", root=tmp_path)
    for a, b in zip(reference, other):
        assert (a.seed, a.env_id) == (b.seed, b.env_id)
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)


@pytest.mark.parametrize("env_kwargs", [None, {"max_episode_steps": 7}])
def test_cli_builds_the_vector_env_python_builds_from_the_id(env_kwargs: dict[str, int] | None) -> None:
    from vcollect.cli import make_envs

    ours = make_envs("CartPole-v1", 6, "gymnasium", env_kwargs)
    theirs = make_vector("CartPole-v1", 6, backend="gymnasium", env_kwargs=env_kwargs)
    try:
        assert type(ours) is type(theirs)
        assert type(ours.env.unwrapped) is type(theirs.env.unwrapped)  # type: ignore[attr-defined]
        # CartPole's vector entry point (one numpy-batched env), not a SyncVectorEnv of 6 envs
        assert not isinstance(ours.env.unwrapped, gym.vector.SyncVectorEnv)  # type: ignore[attr-defined]
        assert ours.env.spec == theirs.env.spec  # type: ignore[attr-defined]
        if env_kwargs:
            assert ours.env.spec.kwargs["max_episode_steps"] == 7  # type: ignore[attr-defined]
    finally:
        ours.close()
        theirs.close()


def test_vector_source_sends_ids_and_keeps_factories_for_worker_processes() -> None:
    from vcollect.cli import vector_source

    assert vector_source("CartPole-v1", "subproc", {"max_episode_steps": 5}) == ("CartPole-v1", {"max_episode_steps": 5})
    assert vector_source("CartPole-v1", "gymnasium").env == "CartPole-v1"
    # module:ENV_ID: the bare id where this process (which imported the module) builds the envs from the id ...
    assert vector_source("tests.cli_envs:InfoCounter-v0", "gymnasium").env == "InfoCounter-v0"
    assert vector_source("tests.cli_envs:InfoCounter-v0", "envpool", in_this_process=False).env == "InfoCounter-v0"
    # ... else a factory that imports the module wherever it runs
    for backend, here in (("subproc", True), ("dummy", True), ("gymnasium", False)):
        factory = vector_source("tests.cli_envs:InfoCounter-v0", backend, in_this_process=here).env
        assert callable(factory)
        env = factory()
        assert type(env.unwrapped).__name__ == "InfoCounterEnv"
        env.close()


def test_cli_collects_on_the_gymnasium_backend_what_python_collects(tmp_path: Path, cli: Cli) -> None:
    result = cli("collect", "CartPole-v1", "--backend", "gymnasium", "--num-envs", "4", "--episodes", "10",
                 "--seed", "5", "--dataset", "cli/vec-v0", "--no-progress")
    assert result.returncode == 0, result.stderr
    envs = make_vector("CartPole-v1", 4, backend="gymnasium")
    store = EpisodeStore.create("py/vec-v0", envs.single_observation_space, envs.single_action_space, root=tmp_path)
    with store, Collector(None, envs, store=store, seed=5) as collector:
        collector.collect(n_episode=10, reset_before_collect=True, random=True)
    cli, python = load_dataset("cli/vec-v0", root=tmp_path), load_dataset("py/vec-v0", root=tmp_path)
    assert cli.total_episodes == python.total_episodes >= 10
    for a, b in zip(cli, python):
        assert (a.seed, a.env_id) == (b.seed, b.env_id)
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)


@pytest.mark.parametrize(("backend", "count"), [("dummy", ["--episodes", "30"]), ("gymnasium", ["--steps", "3000"])])
def test_collect_hands_the_store_whole_batches_of_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, count: list[str]
) -> None:
    # With the CLI's sink class spied on: every stored episode must arrive in batches, handed over
    # (take_episodes: the collector's fresh arrays) or written (write_episodes).
    from vcollect.cli import GuardedSink
    from vcollect.store.sink import EpisodeSink, TakesEpisodes

    sinks: list[object] = []
    batched: list[int] = []
    single: list[int] = []
    write_episodes, write_episode = GuardedSink.write_episodes, GuardedSink.write_episode
    take_episodes = GuardedSink.take_episodes

    def spy_batch(self: GuardedSink, *args: object, **kwargs: object) -> None:
        sinks.append(self)
        batched.append(len(args[5]))  # type: ignore[arg-type]  # lengths: one per episode
        write_episodes(self, *args, **kwargs)  # type: ignore[arg-type]

    def spy_take(self: GuardedSink, *args: object, **kwargs: object) -> None:
        sinks.append(self)
        batched.append(len(args[5]))  # type: ignore[arg-type]
        take_episodes(self, *args, **kwargs)  # type: ignore[arg-type]

    def spy_single(self: GuardedSink, *args: object, **kwargs: object) -> None:
        single.append(1)
        write_episode(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(GuardedSink, "write_episodes", spy_batch)
    monkeypatch.setattr(GuardedSink, "take_episodes", spy_take)
    monkeypatch.setattr(GuardedSink, "write_episode", spy_single)
    status = main(["collect", "CartPole-v1", "--backend", backend, "--num-envs", "4", *count, "--seed", "0",
                   "--dataset", "cli/batched-v0", "--root", str(tmp_path), "--no-progress"])
    assert status == 0
    dataset = load_dataset("cli/batched-v0", root=tmp_path)
    assert dataset.total_episodes >= 1
    assert single == []
    assert sum(batched) == dataset.total_episodes
    assert sinks and all(isinstance(sink, EpisodeSink) and isinstance(sink, TakesEpisodes) for sink in sinks)


def test_guarded_sink_forwards_the_whole_protocol_and_holds_ctrl_c_until_a_write_is_whole() -> None:
    from vcollect.cli import GuardedSink, InterruptGuard
    from vcollect.store.sink import EpisodeSink

    class InterruptedStore:
        """Records each call, after a SIGINT arrives in the middle of it."""

        observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,))
        action_space = gym.spaces.Discrete(2)

        def __init__(self) -> None:
            self.calls: list[tuple[str, dict[str, object]]] = []

        def _call(self, name: str, kwargs: dict[str, object]) -> None:
            signal.raise_signal(signal.SIGINT)
            self.calls.append((name, kwargs))

        def write_episodes(self, *args: object, **kwargs: object) -> None:
            self._call("write_episodes", kwargs)

        def write_episode(self, *args: object, **kwargs: object) -> None:
            self._call("write_episode", kwargs)

        def flush(self) -> None:
            self._call("flush", {})

        def close(self) -> None:
            self._call("close", {})

    store, guard = InterruptedStore(), InterruptGuard()
    sink = GuardedSink(store, guard)  # type: ignore[arg-type]
    assert isinstance(sink, EpisodeSink)
    assert (sink.observation_space, sink.action_space) == (store.observation_space, store.action_space)
    arrays = (np.zeros((3, 2)), np.zeros(2), np.zeros(2), np.array([False, True]), np.zeros(2, bool), [2])
    with guard:
        with pytest.raises(KeyboardInterrupt):  # raised once the write is done, not inside it
            sink.write_episodes(*arrays, seeds=[7], env_ids=[0])
        assert store.calls == [("write_episodes", {"seeds": [7], "env_ids": [0], "options": None})]  # no infos=
        with pytest.raises(KeyboardInterrupt):
            sink.write_episodes(*arrays, seeds=[7], env_ids=[0], infos=[{"t": np.arange(3)}])
        assert list(store.calls[-1][1]) == ["seeds", "env_ids", "options", "infos"]
        with pytest.raises(KeyboardInterrupt):
            sink.write_episode(*arrays[:5], seed=7, env_id=0)
        assert store.calls[-1] == ("write_episode", {"seed": 7, "env_id": 0})
        guard.saving()  # the final commit: SIGINTs are ignored from now on
        sink.flush()
        sink.close()
    assert [name for name, _ in store.calls][-2:] == ["flush", "close"]
    assert guard.interrupted


def test_collect_summarises_episodes_in_bounded_memory(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI keeps no per-episode return or length for its summary, only their running moments (folded
    in every FOLD_EVERY episodes); the summary is numpy's over the stored episodes."""
    monkeypatch.setattr(stats_module, "FOLD_EVERY", 16)
    seen: list[CollectStats] = []
    collect = Collector.collect

    def spy(self: Collector, *args: Any, **kwargs: Any) -> CollectStats:
        stats = collect(self, *args, **kwargs)
        seen.append(stats)
        return stats

    monkeypatch.setattr(Collector, "collect", spy)
    result = cli("collect", "CartPole-v1", "--num-envs", "4", "--episodes", "150", "--seed", "0",
                 "--dataset", "cli/summary-v0", "--no-progress")
    assert result.returncode == 0, result.stderr
    (stats,) = seen
    data = load_dataset("cli/summary-v0", root=tmp_path)
    assert data.total_episodes == stats.n_collected_episodes == 150
    assert stats.returns.size == stats.lens.size == 0  # no array of one value per episode
    for summary, values in ((stats.returns_stat, data.episode_returns), (stats.lens_stat, data.episode_lengths)):
        assert summary is not None
        assert (summary.mean, summary.std) == pytest.approx((values.mean(), values.std()), rel=1e-12)
        assert (summary.min, summary.max) == (values.min(), values.max())
    assert float(table_value(result.stdout, "return std")) == pytest.approx(data.episode_returns.std(), abs=0.006)
    assert float(table_value(result.stdout, "length max")) == data.episode_lengths.max()


def test_collect_steps_without_dataset_only_evaluates(tmp_path: Path, cli: Cli) -> None:
    result = cli("collect", "CartPole-v1", "--num-envs", "3", "--backend", "dummy", "--steps", "50",
                 "--no-progress")
    assert result.returncode == 0, result.stderr
    assert table_value(result.stdout, "steps") == "50"
    assert table_value(result.stdout, "envs").startswith("3 x dummy")
    assert result.stderr == ""  # --no-progress
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("unfinished", ["drop", "truncate"])
def test_episodes_running_at_the_end_are_counted_or_stored_truncated(tmp_path: Path, unfinished: str, cli: Cli) -> None:
    """--steps 50 of three 10-step CountingEnv envs: 48 steps in whole episodes (3 x 16: one running episode
    of 6 steps each). drop: not stored, and the summary says how many; truncate: stored, so the dataset holds
    all 50 steps, the cut episodes' last step marked truncated. No Python warning reaches the terminal."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = cli("collect", "tests.cli_envs:InfoCounter-v0", "--env-kwargs", '{"episode_length": 10}',
                     "--num-envs", "3", "--backend", "dummy", "--steps", "50", "--no-progress", "--dataset",
                     "cli/cut-v0", "--unfinished", unfinished)
    assert result.returncode == 0, result.stderr
    # what a terminal would show: any warning but the deprecations Python hides by default
    shown = [w for w in caught if not issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))]
    assert shown == [] and "Warning" not in result.stderr
    dataset = load_dataset("cli/cut-v0", root=tmp_path)
    assert dataset.metadata["collection"]["unfinished"] == unfinished
    text = " ".join(result.stdout.split())
    if unfinished == "drop":
        assert dataset.total_steps == 30 and dataset.total_episodes == 3
        assert "3 episodes still running at the end, 20 steps, were not stored: --unfinished truncate" in text
    else:
        assert dataset.total_steps == 50 and dataset.total_episodes == 6
        cut = [e for e in dataset if len(e) < 10]
        assert sorted(len(e) for e in cut) == [6, 7, 7] and all(e.truncations[-1] for e in cut)
        assert "including 3 episodes still running at the end, stored with their last step marked truncated" in text


def test_collect_user_policy_and_record_infos(tmp_path: Path, cli: Cli) -> None:
    result = cli(
        "collect", "tests.cli_envs:InfoCounter-v0", "--num-envs", "3", "--backend", "subproc",
        "--episodes", "7", "--policy", "tests.cli_envs:constant_policy", "--record-infos", "--seed", "1",
        "--dataset", "cli/info-v0",
    )
    assert result.returncode == 0, result.stderr
    dataset = load_dataset("cli/info-v0", root=tmp_path)
    assert dataset.total_episodes == 7 and dataset.total_steps == 28
    assert dataset.metadata["algorithm_name"] == "tests.cli_envs:constant_policy"
    for episode in dataset:
        np.testing.assert_array_equal(episode.actions, [2, 2, 2, 2])  # the constant policy acted
        np.testing.assert_array_equal(episode.infos["t"], np.arange(5))  # reset info + 4 step infos
        np.testing.assert_array_equal(episode.infos["nested"]["double"], 2 * np.arange(5))
        np.testing.assert_array_equal(episode.infos["action"], [-1, 2, 2, 2, 2])


def test_collect_append_and_overwrite(tmp_path: Path, cli: Cli) -> None:
    base = ["collect", "CartPole-v1", "--num-envs", "2", "--backend", "dummy", "--no-progress", "--dataset", "cli/a-v0"]
    assert cli(*base, "--episodes", "3", "--seed", "0").returncode == 0
    assert_usage_error(cli(*base, "--episodes", "2"), "exists", "--append", "--overwrite")
    assert cli(*base, "--episodes", "2", "--append", "--seed", "1").returncode == 0
    assert load_dataset("cli/a-v0", root=tmp_path).total_episodes == 5
    assert cli(*base, "--episodes", "4", "--overwrite", "--env-kwargs", '{"max_episode_steps": 5}').returncode == 0
    replaced = load_dataset("cli/a-v0", root=tmp_path)
    assert replaced.total_episodes == 4 and replaced.episode_lengths.max() <= 5
    assert replaced.recover_environment().spec.max_episode_steps == 5  # the stored spec has the --env-kwargs
    assert_usage_error(cli(*base[:-1], "cli/none-v0", "--episodes", "1", "--append"), "no dataset")


def test_seed_first_reset_only_seeds_each_envs_first_episode(tmp_path: Path, cli: Cli) -> None:
    base = ["collect", "CartPole-v1", "--num-envs", "3", "--backend", "dummy", "--episodes", "12", "--seed", "4",
            "--no-progress"]
    assert cli(*base, "--dataset", "cli/every-v0").returncode == 0
    result = cli(*base, "--dataset", "cli/first-v0", "--seed-first-reset-only")
    assert result.returncode == 0, result.stderr
    every, first = load_dataset("cli/every-v0", root=tmp_path), load_dataset("cli/first-v0", root=tmp_path)
    assert every.metadata["collection"]["seed_every_reset"] is True
    assert first.metadata["collection"]["seed_every_reset"] is False
    assert first.total_episodes == 12 and all(episode.seed is not None for episode in every)
    for env_id in range(3):  # per env: the first episode seeded (as by default), later ones not
        ours = [episode for episode in first if episode.env_id == env_id]
        default = next(episode for episode in every if episode.env_id == env_id)
        assert ours[0].seed == default.seed and all(episode.seed is None for episode in ours[1:])


def test_async_collect_or_a_clear_error(tmp_path: Path, cli: Cli) -> None:
    args = ["collect", "CartPole-v1", "--num-envs", "4", "--backend", "subproc", "--steps", "333", "--async",
            "--seed", "0", "--dataset", "cli/async-v0", "--no-progress"]
    result = cli(*args)
    if importlib.util.find_spec("vcollect.async_collector") is None:
        assert_usage_error(result, "--async", "AsyncCollector")
        return
    assert result.returncode == 0, result.stderr
    assert table_value(result.stdout, "steps") == "333"
    assert "AsyncCollector" in table_value(result.stdout, "envs")
    dataset = load_dataset("cli/async-v0", root=tmp_path)
    assert f"{dataset.total_episodes:,}" == table_value(result.stdout, "episodes")


def test_ctrl_c_during_collect_keeps_committed_shards(tmp_path: Path) -> None:
    # A terminal's Ctrl-C reaches the whole process group: the command and its env worker processes.
    process = subprocess.Popen(
        [sys.executable, "-m", "vcollect", "collect", "CartPole-v1", "--num-envs", "4", "--backend", "subproc",
         "--episodes", "100000000", "--shard-steps", "300", "--dataset", "cli/ctrl-c-v0", "--no-progress"],
        cwd=REPO, env=env_for(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    shards = tmp_path / "cli" / "ctrl-c-v0" / "shards"
    deadline = time.monotonic() + 60
    try:
        while not (shards.is_dir() and any(p.suffix == ".h5" for p in shards.iterdir())):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no shard committed within 60 s"
            time.sleep(0.01)  # polling the filesystem, not synchronisation
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    dataset = load_dataset("cli/ctrl-c-v0", root=tmp_path)
    assert dataset.total_episodes > 0
    assert f"interrupted; {dataset.total_episodes:,} episodes ({dataset.total_steps:,} steps) were saved" in stderr
    assert not any(p.name.endswith(".tmp") for p in shards.iterdir())


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["collect", "CartPol-v1", "--episodes", "2"], ["unknown environment id", "CartPole"]),
        (["collect", "nomodule:Foo-v0", "--episodes", "2"], ["cannot import module 'nomodule'"]),
        (["collect", "CartPole-v1", "--episodes", "2", "--steps", "5"], ["exactly one of --steps"]),
        (["collect", "CartPole-v1"], ["exactly one of --steps"]),
        (["collect", "CartPole-v1", "--episodes", "2", "--policy", "no_such_module:make"], ["cannot import policy"]),
        (["collect", "CartPole-v1", "--episodes", "2", "--policy", "tests.cli_envs:broken_policy"], ["broken on purpose"]),
        (["collect", "CartPole-v1", "--episodes", "2", "--dataset", "no version"], ["malformed dataset id"]),
        (["collect", "CartPole-v1", "--episodes", "2", "--backend", "nope"], ["invalid choice"]),
        (["collect", "CartPole-v1", "--episodes", "2", "--backend", "dummy", "--env-kwargs", '{"no_such_kwarg": 1}'],
         ["cannot make CartPole-v1 on backend 'dummy'", "no_such_kwarg"]),
        (["collect", "tests.cli_envs:InfoCounter-v0", "--episodes", "2", "--backend", "envpool"],
         ["cannot make", "envpool has no task 'InfoCounter-v0'"]),
        (["show", "cli/missing-v0"], ["no dataset 'cli/missing-v0'"]),
        (["show", "../escape"], ["malformed dataset id"]),
        (["export", "cli/missing-v0", "--format", "minari"], ["no dataset"]),
        (["bench", "CartPole-v1", "--backends", "dummy,warp"], ["unknown", "warp"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], fragments: list[str], cli: Cli) -> None:
    assert_usage_error(cli(*args), *fragments)
    assert not (tmp_path / "cli").exists()


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a 3-episode CartPole dataset, made once, for tests to copy under their root."""
    root = tmp_path_factory.mktemp("template")
    make_dataset(root, "cli/a-v0", 3, 0)
    return root / "cli" / "a-v0"


def prepare(setup: str, tmp_path: Path, root: Path, template: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make what a bad-input case needs under ``tmp_path``: the datasets ``root`` and, beside it, ``outside``."""
    parts = set(setup.split("+")) if setup else set()
    if "dataset" in parts:
        shutil.copytree(template, root / "cli" / "a-v0")
    if "file" in parts:
        (tmp_path / "afile").write_text("not a folder")
    if "link" in parts:  # a dataset folder that is a link to a dataset outside the root
        shutil.copytree(template, tmp_path / "outside" / "real-v0")
        (root / "cli").mkdir(parents=True, exist_ok=True)
        (root / "cli" / "link-v0").symlink_to(tmp_path / "outside" / "real-v0")
    if "nslink" in parts:  # a namespace folder that is a link to a folder outside the root
        shutil.copytree(template, tmp_path / "outside" / "ns" / "x-v0")
        (root / "linked").symlink_to(tmp_path / "outside" / "ns")
    if "broken_module" in parts:  # an env module that raises when imported
        (tmp_path / "modules").mkdir()
        (tmp_path / "modules" / "vcollect_test_broken_env.py").write_text("raise RuntimeError('broken on import')\n")
        monkeypatch.syspath_prepend(str(tmp_path / "modules"))
        # the interpreter's bytecode cache of the module (written where bytecode writing is on) is not the
        # command's doing: none is written, so the tree compares what the command itself made
        monkeypatch.setattr(sys, "dont_write_bytecode", True)
    if "env_root_file" in parts:
        monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path / "afile"))


def tree(folder: Path) -> list[tuple[str, bool]]:
    """Every path under ``folder`` (links not followed), with whether it is a link: what a command changed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            found.append((path.relative_to(folder).as_posix(), path.is_symlink()))
    return sorted(found)


COLLECT_2 = ["collect", "CartPole-v1", "--episodes", "2"]


@pytest.mark.parametrize(
    ("args", "fragments", "setup"),
    [
        pytest.param([*COLLECT_2, "--seed", "-1"], ["--seed must be a non-negative integer, got -1"], "", id="seed"),
        pytest.param(["collect", "CartPole-v1", "--episodes", str(10**30)], ["--episodes must be at most"], "",
                     id="episodes-past-int64"),
        pytest.param(["collect", "CartPole-v1", "--steps", str(2**63)], ["--steps must be at most"], "",
                     id="steps-past-int64"),
        pytest.param([*COLLECT_2, "--num-envs", "0"], ["--num-envs must be a positive integer"], "", id="num-envs"),
        # the default backend, subproc: the env is made in a worker process
        pytest.param([*COLLECT_2, "--env-kwargs", '{"foo": 1}'],
                     ["on backend 'subproc' with --env-kwargs", "unexpected keyword argument 'foo'"], "",
                     id="env-kwargs-unknown"),
        pytest.param([*COLLECT_2, "--env-kwargs", '{"max_episode_steps": 0}'],
                     ["on backend 'subproc' with --env-kwargs", "max_episode_steps"], "", id="env-kwargs-zero-steps"),
        pytest.param([*COLLECT_2, "--backend", "dummy", "--env-kwargs", '{"max_episode_steps": 0}'],
                     ["on backend 'dummy' with --env-kwargs", "max_episode_steps"], "", id="env-kwargs-dummy"),
        pytest.param(["collect", "vcollect_test_broken_env:X-v0", "--episodes", "2"],
                     ["cannot import module 'vcollect_test_broken_env'", "RuntimeError: broken on import"],
                     "broken_module", id="env-module-raises"),
        pytest.param([*COLLECT_2, "--dataset", "a" * 256 + "/x-v0"], ["has a part of 256 bytes", "at most 255"], "",
                     id="id-part-too-long"),
        pytest.param(["show", "ns/" + "b" * 300 + "-v0"], ["has a part of 303 bytes"], "", id="id-name-too-long"),
        pytest.param(["show", "a/" * 2000 + "x-v0"], ["(4,004 characters) is too long: at most 1024 bytes"], "",
                     id="id-nested-2000"),
        pytest.param(["show", "x-v" + "9" * 5000], ["(5,003 characters) is too long"], "", id="id-version-5000-digits"),
        pytest.param(["split", "cli/a-v0", "--sizes", "nan%,1%", "--into", "cli/b-v0", "cli/c-v0"],
                     ["--sizes must list finite numbers"], "dataset", id="sizes-nan"),
        pytest.param(["split", "cli/a-v0", "--sizes", "inf%", "--into", "cli/b-v0"],
                     ["--sizes must list finite numbers"], "dataset", id="sizes-inf"),
        pytest.param(["split", "cli/a-v0", "--sizes", "1", "--into", "cli/b-v0", "--seed", "-1"],
                     ["--seed must be a non-negative integer"], "dataset", id="split-seed"),
        pytest.param(["split", "cli/a-v0", "--sizes", "1", "--into", "cli/a-v0", "--overwrite"],
                     ["--into names the dataset being split"], "dataset", id="split-into-itself"),
        pytest.param(["export", "cli/a-v0", "--format", "minari", "--minari-root", "{tmp}/afile"],
                     ["--minari-root", "afile' is not a folder"], "dataset+file", id="minari-root-file"),
        pytest.param(["export", "cli/a-v0", "--format", "minari", "--minari-root", "{tmp}/afile/sub"],
                     ["--minari-root", "which is not a folder"], "dataset+file", id="minari-root-under-file"),
        pytest.param(["list", "--root", "{tmp}/afile"], ["--root", "is not a folder"], "file", id="root-file"),
        pytest.param(["list"], ["$VCOLLECT_DATASETS_PATH", "is not a folder"], "file+env_root_file",
                     id="root-env-file"),
        pytest.param(["show", "cli/a-v0", "--plot", "/nonexistent/x.png"],
                     ["--plot '/nonexistent/x.png': there is no folder '/nonexistent'"], "dataset", id="plot-no-folder"),
        pytest.param(["show", "cli/a-v0", "--plot", "{tmp}"], ["--plot", "is a folder"], "dataset", id="plot-folder"),
        pytest.param(["show", "cli/a-v0", "--plot", "{tmp}/x.notaformat"], ["--plot: cannot write", "notaformat"],
                     "dataset", id="plot-format"),
        pytest.param(["delete", "cli/link-v0", "--yes"], ["refusing to delete dataset 'cli/link-v0'", "symbolic link"],
                     "link", id="delete-linked-dataset"),
        pytest.param(["delete", "cli/a-v0", "linked/x-v0", "--yes"], ["refusing to delete", "linked' is a symbolic link"],
                     "dataset+nslink", id="delete-through-linked-namespace"),
        pytest.param([*COLLECT_2, "--backend", "dummy", "--dataset", "cli/link-v0", "--overwrite"],
                     ["refusing to replace dataset 'cli/link-v0'", "symbolic link"], "link", id="overwrite-linked"),
        pytest.param([*COLLECT_2, "--backend", "dummy", "--dataset", "linked/x-v0", "--overwrite"],
                     ["refusing to replace", "symbolic link"], "nslink", id="overwrite-through-linked-namespace"),
        pytest.param(["split", "cli/a-v0", "--sizes", "1", "--into", "cli/link-v0", "--overwrite"],
                     ["refusing to replace", "symbolic link"], "dataset+link", id="split-overwrite-linked"),
        pytest.param(["import-minari", "{tmp}/nowhere", "--into", "cli/link-v0", "--overwrite"],
                     ["refusing to replace", "symbolic link"], "link", id="import-overwrite-linked"),
        pytest.param(["bench", "CartPole-v1", "--seed", "-1"], ["--seed must be a non-negative integer"], "",
                     id="bench-seed"),
    ],
)
def test_bad_input_names_the_option_on_one_line_and_changes_nothing(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch, small_dataset: Path,
    args: list[str], fragments: list[str], setup: str,
) -> None:
    root = tmp_path / "datasets"
    root.mkdir()
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(root))
    prepare(setup, tmp_path, root, small_dataset, monkeypatch)
    before = tree(tmp_path)
    assert_usage_error(cli(*(arg.replace("{tmp}", str(tmp_path)) for arg in args)), *fragments)
    assert tree(tmp_path) == before  # nothing made, nothing deleted (inside the root or outside it)


def test_delete_dataset_refuses_to_delete_through_a_link(tmp_path: Path, small_dataset: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from vcollect.errors import DatasetError
    from vcollect.store import delete_dataset
    from vcollect.store.layout.catalog import symlinked_folder

    root = tmp_path / "datasets"
    root.mkdir()
    prepare("dataset+link+nslink", tmp_path, root, small_dataset, monkeypatch)
    before = tree(tmp_path)
    for dataset_id, link in (("cli/link-v0", root / "cli" / "link-v0"), ("linked/x-v0", root / "linked")):
        assert symlinked_folder(dataset_id, root) == link
        with pytest.raises(DatasetError, match="symbolic link"):
            delete_dataset(dataset_id, root)
    assert tree(tmp_path) == before
    assert symlinked_folder("cli/a-v0", root) is None
    # the root itself may be a link (where the user keeps datasets): deleting under it is fine
    (tmp_path / "root-link").symlink_to(root)
    assert symlinked_folder("cli/a-v0", tmp_path / "root-link") is None
    delete_dataset("cli/a-v0", tmp_path / "root-link")
    assert not (root / "cli" / "a-v0").exists() and (tmp_path / "outside" / "real-v0" / "dataset.json").is_file()


def test_dataset_id_length_limits_count_bytes() -> None:
    from vcollect.errors import InvalidDatasetIdError
    from vcollect.store import parse_dataset_id

    assert parse_dataset_id("n" * 255 + "/" + "x" * 252 + "-v0") == ("n" * 255, "x" * 252, 0)
    assert parse_dataset_id("x-v" + "9" * 252)[2] == int("9" * 252)
    longest = "/".join(["n" * 255] * 3 + ["n" * 251, "x-v0"])
    assert len(longest) == 1024 and parse_dataset_id(longest)[1] == "x"
    for bad in ("n" * 256 + "/x-v0", "é" * 128 + "/x-v0", "x" * 253 + "-v00", "x-v" + "9" * 253,
                "/".join(["n" * 255] * 3 + ["n" * 252, "x-v0"]), "é" * 120 + "/" + "a/" * 395 + "x-v0"):  # 915 characters, 1,035 bytes
        with pytest.raises(InvalidDatasetIdError, match="too long|at most 255 bytes"):
            parse_dataset_id(bad)


@pytest.mark.parametrize(("args", "status"), [(["--version"], 0), (["collect", "CartPole-v1"], 2),
                                              (["show", "cli/missing-v0"], 2)])
def test_exit_status_of_the_real_process(tmp_path: Path, args: list[str], status: int) -> None:
    # main() returns the status; python -m vcollect must hand it to the shell (argparse's, and the commands')
    result = run_process(tmp_path, *args)
    assert result.returncode == status, result.stderr
    if status:
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_store_errors_name_the_commands_flags_not_python_parameters(tmp_path: Path, cli: Cli) -> None:
    from vcollect.cli import build_parser
    from vcollect.cli.exits import flag_wording
    from vcollect.errors import DatasetExistsError, DatasetNotFoundError

    make_dataset(tmp_path, "cli/a-v0", 2, 0)
    # what the command prints
    missing = cli("show", "cli/missing-v0")
    assert_usage_error(missing, "pass --root DIR or set $VCOLLECT_DATASETS_PATH", "'vcollect list'")
    assert "root=" not in missing.stderr and "list_datasets" not in missing.stderr
    minari_root = str(tmp_path / "minari")
    assert cli("export", "cli/a-v0", "--format", "minari", "--minari-id", "vc/a-v0", "--minari-root", minari_root
               ).returncode == 0
    again = cli("export", "cli/a-v0", "--format", "minari", "--minari-id", "vc/a-v0", "--minari-root", minari_root)
    assert_usage_error(again, "already exists", "pass --overwrite to replace it")
    assert "overwrite=True" not in again.stderr
    # the store's own messages (Python wording), as each command says them
    envs = make_vector("CartPole-v1", 1)
    with pytest.raises(DatasetExistsError) as exists:
        EpisodeStore.create("cli/a-v0", envs.single_observation_space, envs.single_action_space, root=tmp_path)
    with pytest.raises(DatasetNotFoundError) as not_found:
        load_dataset("cli/none-v0", root=tmp_path)
    assert "overwrite=True" in str(exists.value) and "root=" in str(not_found.value)  # Python callers keep theirs
    parse = build_parser().parse_args
    for argv, said in (
        (["collect", "CartPole-v1", "--steps", "1"], "pass --overwrite to replace it or --append to add to it"),
        (["import-minari", "x", "--into", "cli/a-v0"], "already exists at"),
        (["combine", "cli/b-v0", "--into", "cli/a-v0"], "delete it first or pick another id"),
    ):
        text = flag_wording(str(exists.value), parse(argv))
        assert said in text and "overwrite=True" not in text and "EpisodeStore" not in text, text
        assert ("--append" in text) == (argv[0] == "collect")
        assert ("--overwrite" in text) == (argv[0] != "combine")
        assert "pass --root DIR" in flag_wording(str(not_found.value), parse(argv))


def test_split_overwrite_replaces_existing_datasets(tmp_path: Path, cli: Cli) -> None:
    make_dataset(tmp_path, "cli/src-v0", 6, 0)
    make_dataset(tmp_path, "cli/old-v0", 2, 1)
    split = ["split", "cli/src-v0", "--sizes", "4,2", "--into", "cli/old-v0", "cli/new-v0", "--seed", "1"]
    assert_usage_error(cli(*split), "'cli/old-v0' already exists", "pass --overwrite")
    assert load_dataset("cli/old-v0", root=tmp_path).total_episodes == 2
    assert not (tmp_path / "cli" / "new-v0").exists()
    result = cli(*split, "--overwrite")
    assert result.returncode == 0, result.stderr
    replaced, new = load_dataset("cli/old-v0", root=tmp_path), load_dataset("cli/new-v0", root=tmp_path)
    assert (replaced.total_episodes, new.total_episodes) == (4, 2)
    assert replaced.metadata["split_from"] == "cli/src-v0"
    assert sorted(episode_keys("cli/old-v0", tmp_path) + episode_keys("cli/new-v0", tmp_path)) == sorted(
        episode_keys("cli/src-v0", tmp_path)
    )


def test_env_failure_while_collecting_exits_1_with_the_env_error(tmp_path: Path, cli: Cli) -> None:
    result = cli("collect", "tests.cli_envs:Exploding-v0", "--num-envs", "2", "--backend", "subproc",
                 "--episodes", "2", "--no-progress", "--dataset", "cli/boom-v0")
    assert result.returncode == 1
    assert not (tmp_path / "cli" / "boom-v0").exists()  # the run's empty dataset is not left behind
    first = result.stderr.splitlines()[0]
    assert first.startswith("vcollect collect: error: env ") and "ExplodingEnv exploded at step 3" in first
    ours, _, env_traceback = result.stderr.partition("--- original traceback ---")
    assert "Traceback" not in ours  # no traceback of the command itself, only the env's own
    assert "ExplodingEnv exploded" in env_traceback and "cli_envs.py" in env_traceback


# ------------------------------------------------------------------------------- list, show, plot


def make_dataset(root: Path, dataset_id: str, episodes: int, seed: int, author: str | None = None) -> None:
    """A CartPole dataset made in-process (the commands under test only read it)."""
    envs = make_vector("CartPole-v1", 2)
    metadata = {"author": author} if author else {}
    store = EpisodeStore.create(dataset_id, envs.single_observation_space, envs.single_action_space,
                                env_spec=gym.spec("CartPole-v1"), root=root, metadata=metadata)
    with store, Collector(None, envs, store=store, seed=seed) as collector:
        collector.collect(n_episode=episodes, reset_before_collect=True, random=True)


def test_list_show_and_plot(tmp_path: Path, cli: Cli) -> None:
    assert "no datasets under" in cli("list").stdout
    make_dataset(tmp_path, "cli/one-v0", 5, 0, author="bob")
    make_dataset(tmp_path, "cli/nested/two-v1", 3, 1)
    listing = cli("list")
    assert listing.returncode == 0
    rows = {line.split("│")[1].strip(): line for line in listing.stdout.splitlines() if line.startswith("│")}
    assert set(rows) == {"cli/one-v0", "cli/nested/two-v1"}
    one = load_dataset("cli/one-v0", root=tmp_path)
    cells = [c.strip() for c in rows["cli/one-v0"].split("│")[1:-1]]
    assert cells[:3] == ["cli/one-v0", "5", f"{one.total_steps:,}"] and cells[4] == "bob"
    assert cells[3].endswith("KiB")

    png = tmp_path / "one.png"
    shown = cli("show", "cli/one-v0", "--plot", str(png))
    assert shown.returncode == 0, shown.stderr
    assert table_value(shown.stdout, "episodes") == "5"
    assert table_value(shown.stdout, "steps") == f"{one.total_steps:,}"
    assert table_value(shown.stdout, "action space") == "Discrete(2)"
    assert table_value(shown.stdout, "author") == "bob"
    assert float(table_value(shown.stdout, "return max")) == one.episode_returns.max()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_figure_holds_the_dataset_statistics(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from vcollect.cli import plot_dataset

    make_dataset(tmp_path, "cli/plot-v0", 9, 3)
    dataset = load_dataset("cli/plot-v0", root=tmp_path)
    figure = plot_dataset(dataset, tmp_path / "plot.png")
    returns_ax, lengths_ax, episodes_ax = figure.axes
    assert sum(patch.get_height() for patch in returns_ax.patches) == 9
    assert sum(patch.get_height() for patch in lengths_ax.patches) == 9
    np.testing.assert_array_equal(episodes_ax.lines[0].get_ydata(), dataset.episode_returns)
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_plot_without_matplotlib_is_a_clear_error(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    make_dataset(tmp_path, "cli/noplot-v0", 2, 0)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # every import of matplotlib raises ImportError
    result = cli("show", "cli/noplot-v0", "--plot", str(tmp_path / "x.png"))
    assert_usage_error(result, "matplotlib", "vcollect[plot]")
    assert not (tmp_path / "x.png").exists()


# ------------------------------------------------------------------ combine, split, delete, minari


def episode_keys(dataset_id: str, root: Path) -> list[tuple[int | None, int, float]]:
    """(seed, env id, return) of every episode, in order."""
    return [(e.seed, e.env_id, float(e.rewards.sum())) for e in load_dataset(dataset_id, root=root)]


def test_combine_split_and_delete(tmp_path: Path, cli: Cli) -> None:
    make_dataset(tmp_path, "cli/a-v0", 6, 0)
    make_dataset(tmp_path, "cli/b-v0", 4, 1)
    result = cli("combine", "cli/a-v0", "cli/b-v0", "--into", "cli/ab-v0")
    assert result.returncode == 0, result.stderr
    combined = episode_keys("cli/ab-v0", tmp_path)
    assert combined == episode_keys("cli/a-v0", tmp_path) + episode_keys("cli/b-v0", tmp_path)
    assert_usage_error(cli("combine", "cli/a-v0", "--into", "cli/ab-v0"), "already exists")

    result = cli("split", "cli/ab-v0", "--sizes", "70%,30%", "--into", "cli/train-v0", "cli/test-v0", "--seed", "0")
    assert result.returncode == 0, result.stderr
    train, test = episode_keys("cli/train-v0", tmp_path), episode_keys("cli/test-v0", tmp_path)
    assert (len(train), len(test)) == (7, 3)
    assert sorted(train + test) == sorted(combined)  # disjoint and complete
    assert load_dataset("cli/train-v0", root=tmp_path).metadata["split_from"] == "cli/ab-v0"

    assert_usage_error(cli("split", "cli/ab-v0", "--sizes", "8,5", "--into", "cli/x-v0", "cli/y-v0"),
                       "more than the 10")
    assert not (tmp_path / "cli" / "x-v0").exists()

    assert_usage_error(cli("delete", "cli/a-v0"), "--yes")  # no terminal to confirm on
    assert (tmp_path / "cli" / "a-v0").exists()
    result = cli("delete", "cli/a-v0", "cli/b-v0", "--yes")
    assert result.returncode == 0 and "deleted cli/a-v0" in result.stdout
    assert not (tmp_path / "cli" / "a-v0").exists() and not (tmp_path / "cli" / "b-v0").exists()


def test_export_minari_and_import_back(tmp_path: Path, cli: Cli) -> None:
    make_dataset(tmp_path, "cli/src-v0", 5, 2, author="carol")
    minari_root = tmp_path / "minari"
    assert_usage_error(cli("export", "cli/src-v0", "--format", "minari", "--minari-id", "c/x-v0",
                           "--minari-root", str(minari_root)), "two characters")
    result = cli("export", "cli/src-v0", "--format", "minari", "--minari-id", "vc/src-v0",
                 "--minari-root", str(minari_root))
    assert result.returncode == 0, result.stderr
    assert (minari_root / "vc" / "src-v0" / "data" / "main_data.hdf5").is_file()
    source = load_dataset("cli/src-v0", root=tmp_path)
    if importlib.util.find_spec("minari") is not None:
        import minari

        theirs = minari.MinariDataset(minari_root / "vc" / "src-v0" / "data")
        assert (theirs.total_episodes, theirs.total_steps) == (5, source.total_steps)
        np.testing.assert_array_equal(theirs[0].observations, source[0].observations)

    result = cli("import-minari", "vc/src-v0", "--minari-root", str(minari_root), "--into", "cli/back-v0")
    assert result.returncode == 0, result.stderr
    back = load_dataset("cli/back-v0", root=tmp_path)
    assert back.total_episodes == 5
    for mine, returned in zip(source, back):  # Minari has no env ids; the rest comes back exactly
        assert returned.seed == mine.seed
        np.testing.assert_array_equal(returned.observations, mine.observations)
        np.testing.assert_array_equal(returned.actions, mine.actions)
    assert back.metadata["minari_dataset_id"] == "vc/src-v0"

    result = cli("export", "cli/src-v0", "--format", "minari", "--minari-id", "vc/parquet-v0", "--data-format",
                 "parquet", "--minari-root", str(minari_root))
    assert result.returncode == 0, result.stderr
    assert not (minari_root / "vc" / "parquet-v0" / "data" / "main_data.hdf5").exists()
    result = cli("import-minari", "vc/parquet-v0", "--minari-root", str(minari_root), "--into", "cli/pq-v0")
    assert result.returncode == 0, result.stderr
    assert [e.seed for e in load_dataset("cli/pq-v0", root=tmp_path)] == [e.seed for e in source]
    assert_usage_error(cli("import-minari", str(tmp_path / "nowhere"), "--into", "cli/z-v0"), "no Minari dataset")


@pytest.mark.parametrize("form", ["folder", "data", "main_data.hdf5"])
def test_import_minari_takes_the_dataset_folder_its_data_folder_or_its_main_file(
    tmp_path: Path, cli: Cli, form: str
) -> None:
    make_dataset(tmp_path, "cli/src-v0", 3, 4)
    minari_root = tmp_path / "minari"
    assert cli("export", "cli/src-v0", "--format", "minari", "--minari-id", "vc/src-v0",
               "--minari-root", str(minari_root)).returncode == 0
    folder = minari_root / "vc" / "src-v0"
    source = {"folder": folder, "data": folder / "data", "main_data.hdf5": folder / "data" / "main_data.hdf5"}[form]
    result = cli("import-minari", str(source), "--into", "cli/back-v0")
    assert result.returncode == 0, result.stderr
    assert episode_keys("cli/back-v0", tmp_path) == [(seed, 0, ret) for seed, _, ret in episode_keys("cli/src-v0", tmp_path)]
    # a file that is not in a Minari dataset's data folder
    assert_usage_error(cli("import-minari", str(tmp_path / "cli" / "src-v0" / "dataset.json"), "--into", "cli/z-v0"),
                       "no Minari dataset")


# ------------------------------------------------------------------------------------------ bench


def test_bench_table_has_raw_row_and_ratios(tmp_path: Path, cli: Cli) -> None:
    result = cli("bench", "CartPole-v1", "--num-envs", "2", "--steps", "400", "--backends", "dummy")
    assert result.returncode == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 3:
            rows[cells[0]] = cells
    assert set(rows) == {"raw", "Collector (dummy)"}
    assert rows["raw"][2] == "1.00"
    raw, dummy = (float(rows[name][1].replace(",", "")) for name in ("raw", "Collector (dummy)"))
    assert raw > 0 and dummy > 0
    assert float(rows["Collector (dummy)"][2]) == pytest.approx(dummy / raw, abs=0.01)


@pytest.mark.skipif("gymnasium" not in BACKENDS, reason="no gymnasium backend in this tree")
def test_record_infos_refuses_backends_that_step_all_envs(tmp_path: Path, cli: Cli) -> None:
    result = cli("collect", "CartPole-v1", "--backend", "gymnasium", "--num-envs", "2", "--episodes", "2",
                 "--record-infos", "--dataset", "cli/gym-v0")
    assert_usage_error(result, "--record-infos", "'gymnasium'")
    assert not (tmp_path / "cli" / "gym-v0").exists()


# ------------------------------------------------------------------ helpers, in process (no subprocess)


def test_stack_episode_infos_keeps_the_resets_structure_as_minaris_data_collector_does() -> None:
    from vcollect.envs.info_recording import stack_episode_infos
    from vcollect.errors import InfoStructureError

    rows = [{"t": t, "d": {"x": t / 2}} for t in range(4)]
    stacked = stack_episode_infos(rows)
    np.testing.assert_array_equal(stacked["t"], [0, 1, 2, 3])
    np.testing.assert_array_equal(stacked["d"]["x"], [0.0, 0.5, 1.0, 1.5])
    assert stack_episode_infos([{}, {}, {}]) == {}
    with pytest.raises(InfoStructureError, match="'late' is new at step 3.*keys \\['t', 'd/x'\\]"):
        stack_episode_infos(rows[:3] + [{**rows[3], "late": 1}])
    with pytest.raises(InfoStructureError, match="'r' is new at step 1"):  # a step-only key: ragged, refused
        stack_episode_infos(rows[:1] + [{**row, "r": -1} for row in rows[1:]])
    with pytest.raises(InfoStructureError, match="'d/x' is missing at step 2"):
        stack_episode_infos(rows[:2] + [{"t": 2}, rows[3]])
    with pytest.raises(InfoStructureError, match="keys must be"):
        stack_episode_infos([{1: 0}, {1: 1}])


def test_parse_sizes_counts_and_errors() -> None:
    from vcollect.cli import UsageError, parse_sizes

    assert parse_sizes("800,200", 1000) == [800, 200]
    assert parse_sizes("3, 0 ,2", 5) == [3, 0, 2]
    assert parse_sizes("50%,50%", 7) == [4, 3]
    assert parse_sizes("80%,20%", 10) == [8, 2]
    for bad in ("", "a,b", "5,-1", "50%,5", "60%,60%", "6,6"):
        with pytest.raises(UsageError):
            parse_sizes(bad, 10)


@given(
    percents=st.lists(st.integers(0, 100), min_size=1, max_size=5).filter(lambda p: sum(p) <= 100),
    total=st.integers(0, 10_000),
)
def test_parse_sizes_percentages_round_like_largest_remainder(percents: list[int], total: int) -> None:
    from vcollect.cli import parse_sizes

    counts = parse_sizes(",".join(f"{p}%" for p in percents), total)
    exact = [p * total / 100 for p in percents]
    # nothing lost or invented by rounding: the total is the exact sum rounded (at an exact half either way:
    # 5%,14%,14%,17% of 345 sum to 172.5, which the fractions' float sum puts a hair above)
    assert abs(sum(counts) - sum(exact)) <= 0.5 + 1e-9
    assert all(abs(c - e) < 1 for c, e in zip(counts, exact))  # each part within one episode of its share


def test_collect_on_ray_workers_writes_exact_episodes_into_one_dataset(
    tmp_path: Path, cli: Cli, ray_local: object
) -> None:
    # In process, on the session's local Ray (the command uses a Ray it finds initialised).
    result = cli(
        "collect", "CartPole-v1", "--ray-workers", "2", "--num-envs", "2", "--backend", "dummy",
        "--episodes", "7", "--seed", "3", "--dataset", "ray/cartpole-v0",
    )
    assert result.returncode == 0, result.stderr
    assert "2 Ray workers" in result.stdout
    dataset = load_dataset("ray/cartpole-v0", root=tmp_path)
    assert dataset.total_episodes == 7
    # Global env ids: worker_index * envs_per_worker + local id.
    assert {int(episode.env_id) for episode in dataset} <= {0, 1, 2, 3}
    assert {int(episode.env_id) // 2 for episode in dataset} == {0, 1}


def test_ray_workers_under_the_command_name_its_flag_and_an_overwrite_does_not_say_appended(
    tmp_path: Path, cli: Cli, ray_local: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vcollect.distributed as distributed

    made: list[dict[str, Any]] = []

    class Recorded(distributed.DistributedCollector):
        """The DistributedCollector the command makes, its keyword arguments kept."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(distributed, "DistributedCollector", Recorded)
    common = ("collect", "CartPole-v1", "--ray-workers", "1", "--num-envs", "2", "--backend", "dummy", "--seed", "1",
              "--no-progress", "--dataset", "ray/over-v0")
    first = cli(*common, "--episodes", "3")
    assert first.returncode == 0, first.stderr
    assert "dataset ray/over-v0: wrote 3 episodes" in " ".join(first.stdout.split())
    again = cli(*common, "--episodes", "2", "--overwrite")
    assert again.returncode == 0, again.stderr
    text = " ".join(again.stdout.split())
    assert "dataset ray/over-v0: wrote 2 episodes" in text and "appended" not in text
    assert load_dataset("ray/over-v0", root=tmp_path).total_episodes == 2
    more = cli(*common, "--episodes", "2", "--append")
    assert more.returncode == 0, more.stderr
    assert "dataset ray/over-v0: appended 2 episodes" in " ".join(more.stdout.split())
    assert [kwargs["unfinished_hint"] for kwargs in made] == ["--unfinished truncate"] * 3


def test_ray_workers_must_be_positive(tmp_path: Path, cli: Cli) -> None:
    result = cli("collect", "CartPole-v1", "--ray-workers", "0", "--episodes", "1")
    assert_usage_error(result, "--ray-workers")


def test_collect_on_the_envpool_backend_uses_the_task_id(tmp_path: Path, cli: Cli) -> None:
    result = cli("collect", "CartPole-v1", "--backend", "envpool", "--num-envs", "4", "--episodes", "6",
                 "--dataset", "pool/cartpole-v0", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert table_value(result.stdout, "episodes") == "6"
    # EnvPool steps all envs at once: surplus episodes of the last step are stored too, never dropped.
    assert load_dataset("pool/cartpole-v0", root=tmp_path).total_episodes >= 6


def test_a_namespaced_id_gets_its_module_imported_in_every_worker(tmp_path: Path, cli: Cli) -> None:
    """``ALE/Pong-v5`` as Python takes it once ale_py is imported: the command imports ale_py itself, and
    its subprocess workers do too (the id goes to them as ``ale_py:ALE/Pong-v5``)."""
    pytest.importorskip("ale_py")
    result = cli("collect", "ALE/Pong-v5", "--num-envs", "2", "--backend", "subproc", "--steps", "40", "--seed", "0",
                 "--no-progress", "--unfinished", "truncate", "--dataset", "ale/pong-v0")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # the spec of ALE/Pong-v5 (an entry point string) is stored: nothing to say
    dataset = load_dataset("ale/pong-v0", root=tmp_path)
    assert dataset.total_steps == 40 and dataset.env_spec is not None and dataset.env_spec.id == "ALE/Pong-v5"
    assert dataset.metadata["collection"]["env_id"] == "ale_py:ALE/Pong-v5"


def test_an_id_no_known_module_registers_fails_in_one_line_naming_the_module_form(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vcollect.cli import sources

    assert_usage_error(cli("collect", "NoSuchSpace/Thing-v0", "--steps", "5"), "unknown environment id",
                       "vcollect collect MODULE:NoSuchSpace/Thing-v0")
    assert_usage_error(cli("collect", "NoSuchThing-v0", "--steps", "5"), "vcollect collect MODULE:NoSuchThing-v0")
    monkeypatch.setitem(sources.NAMESPACE_MODULES, "NoSuchSpace", ("no_such_module_here", "no-such-package"))
    assert_usage_error(cli("collect", "NoSuchSpace/Thing-v0", "--steps", "5"),
                       "namespace 'NoSuchSpace' is registered by no_such_module_here",
                       "pip install 'no-such-package'")
    assert_usage_error(cli("collect", "NoSuchTask-v9", "--backend", "envpool", "--steps", "5"),
                       "unknown environment id 'NoSuchTask-v9'", "nor is it an EnvPool task")


def test_the_envpool_backend_takes_envpool_task_ids_as_make_vector_does(tmp_path: Path, cli: Cli) -> None:
    """``Pong-v5`` is an EnvPool task, not a gymnasium id: collected as ``make_vector('Pong-v5',
    backend='envpool')`` builds it, and the dataset's missing env spec is said in one warning line."""
    pytest.importorskip("envpool")
    assert_usage_error(cli("collect", "Pong-v5", "--steps", "5"), "unknown environment id 'Pong-v5'")
    result = cli("collect", "Pong-v5", "--backend", "envpool", "--num-envs", "2", "--steps", "30", "--seed", "0",
                 "--no-progress", "--unfinished", "truncate", "--dataset", "pool/pong-v0")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vcollect collect: warning: EnvPool task 'Pong-v5' has no "), lines
    assert "cannot be replayed" in lines[0] and "recover_environment() raises" in lines[0]
    dataset = load_dataset("pool/pong-v0", root=tmp_path)
    assert dataset.total_steps >= 30 and dataset.env_spec is None
    pool = make_vector("Pong-v5", 2, backend="envpool")
    try:
        assert dataset.observation_space == pool.single_observation_space
        assert dataset.action_space == pool.single_action_space
    finally:
        pool.close()


def test_an_env_whose_spec_cannot_be_stored_is_said_once_at_collect_time(tmp_path: Path, cli: Cli) -> None:
    """tests.cli_envs registers UnstorableCounter-v0 with a class (a callable) as its entry point: gymnasium
    cannot write that spec as JSON, so the command says, once, what the dataset will lack."""
    result = cli("collect", "tests.cli_envs:UnstorableCounter-v0", "--num-envs", "2", "--backend", "dummy",
                 "--episodes", "2", "--no-progress", "--dataset", "cli/nospec-v0")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("vcollect collect: warning: the env spec of 'UnstorableCounter-v0' cannot be stored")
    assert "entry_point" in lines[0] and "cannot be replayed (vcollect verify --replay)" in lines[0]
    assert "recover_environment() raises" in lines[0]
    assert load_dataset("cli/nospec-v0", root=tmp_path).env_spec is None
    assert_usage_error(cli("verify", "cli/nospec-v0", "--replay", "1"), "stores no env spec")


def test_verify_a_sound_dataset_then_each_kind_of_damage(tmp_path: Path, cli: Cli) -> None:
    """`vcollect verify` is quiet and exits 0 on a sound dataset (with episodes replayed from their seeds),
    then names an altered episode that no longer replays, a deleted shard and a copied one, exiting 1."""
    make_dataset(tmp_path, "cli/v-v0", 6, 0)
    sound = cli("verify", "cli/v-v0", "--replay", "4")
    assert sound.returncode == 0, sound.stdout + sound.stderr
    assert sound.stdout.split()[-2:] == ["no", "problems"] and "4 replayed" in sound.stdout
    shards = sorted((tmp_path / "cli" / "v-v0" / "shards").glob("*.h5"))
    copy = shards[0].with_name("99999999999999999999-copied-000000.h5")
    shutil.copy(shards[0], copy)
    copied = cli("verify", "cli/v-v0")
    assert copied.returncode == 1
    assert f"shard {copy.name} holds shard 0 of writer" in " ".join(copied.stdout.split())
    assert "a copy under another name" in " ".join(copied.stdout.split())
    copy.unlink()
    shards[0].unlink()
    missing = cli("verify", "cli/v-v0")
    assert missing.returncode == 1 and f"shard {shards[0].name} is missing" in " ".join(missing.stdout.split())
    make_dataset(tmp_path, "cli/w-v0", 6, 1)
    (shard,) = (tmp_path / "cli" / "w-v0" / "shards").glob("*.h5")
    shard.with_name("stray.h5").write_bytes(b"not hdf5")
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 3])  # truncated
    damaged = cli("verify", "cli/w-v0")  # listed, never an abort
    text = " ".join(damaged.stdout.split())
    assert damaged.returncode == 1 and "error:" not in damaged.stdout + damaged.stderr, damaged.stderr
    assert f"shard {shard.name} is {len(data) // 3} bytes" in text and "shard stray.h5 is recorded in no" in text
    assert text.endswith("cli/w-v0: 0 shards, 0 episodes: 2 problems")
    assert cli("verify", "cli/v-v0", "--replay", "-1").returncode == 2
    assert cli("verify", "cli/nope-v0").returncode == 2


def test_show_and_verify_take_a_dataset_folders_path(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset saved at any folder (save_to_disk's) is shown and verified by its path; an id stays an id."""
    make_dataset(tmp_path / "runs", "saved-v0", 4, 0)
    folder = tmp_path / "runs" / "saved"
    (tmp_path / "runs" / "saved-v0").rename(folder)
    monkeypatch.chdir(tmp_path)
    for name in (str(folder), "runs/saved", "./runs/saved"):
        shown = cli("show", name)
        assert shown.returncode == 0, shown.stderr
        assert table_value(shown.stdout, "episodes") == "4" and str(folder) in " ".join(shown.stdout.split())
        checked = cli("verify", name, "--replay", "2")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.split()[-2:] == ["no", "problems"] and "2 replayed" in checked.stdout
    assert_usage_error(cli("show", "runs/saved", "--root", str(tmp_path)), "--root applies to dataset ids")
    assert_usage_error(cli("show", "runs/missing"), "no dataset id nor a dataset folder that exists")
    assert_usage_error(cli("verify", "runs-v0"), "no dataset 'runs-v0'")  # an id, looked up under the root


def test_verify_replay_names_an_episode_that_does_not_replay(tmp_path: Path) -> None:
    """A stored episode whose actions were changed after the fact no longer replays from its seed."""
    from vcollect.store.read.replay import replay_episodes

    make_dataset(tmp_path, "cli/r-v0", 3, 1)
    dataset = load_dataset("cli/r-v0", root=tmp_path)
    assert replay_episodes(dataset, 3) == (3, [])

    class Tampered:  # the dataset with episode 1's first action flipped
        episode_seeded = dataset.episode_seeded
        observation_space, action_space = dataset.observation_space, dataset.action_space

        def __getitem__(self, i: int):  # noqa: ANN204
            episode = dataset[i]
            if i == 1:
                actions = np.array(episode.actions)
                actions[0] = 1 - actions[0]
                return episode.__class__(**{**episode.__dict__, "actions": actions})
            return episode

        def recover_environment(self):  # noqa: ANN201
            return dataset.recover_environment()

    count, problems = replay_episodes(Tampered(), 3)  # type: ignore[arg-type]
    assert count == 3 and len(problems) == 1 and problems[0].startswith("episode 1 ")
    assert "differs" in problems[0]


def test_list_shows_a_broken_dataset_as_a_marked_row(tmp_path: Path, cli: Cli) -> None:
    make_dataset(tmp_path, "cli/a-v0", 2, 0, author="bob")
    make_dataset(tmp_path, "cli/bad-v0", 2, 1)
    make_dataset(tmp_path, "cli/z-v0", 3, 2)
    file = tmp_path / "cli" / "bad-v0" / "dataset.json"
    file.write_bytes(b"{nope")
    listing = cli("list")
    assert listing.returncode == 0, listing.stderr
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:-1]]
            for line in listing.stdout.splitlines() if line.startswith("│")}
    assert list(rows) == ["cli/a-v0", "cli/bad-v0 (broken)", "cli/z-v0"]
    assert rows["cli/bad-v0 (broken)"][1:3] == ["-", "-"]
    assert rows["cli/a-v0"][1:3] == ["2", f"{load_dataset('cli/a-v0', root=tmp_path).total_steps:,}"]
    assert rows["cli/z-v0"][1] == "3" and rows["cli/a-v0"][4] == "bob"
    notes = [line for line in listing.stdout.splitlines() if line.startswith("note: cli/bad-v0")]
    assert len(notes) == 1 and str(file) in notes[0] and "is not valid JSON" in notes[0]


def test_import_minari_without_stored_spaces_needs_trust_env_spec(tmp_path: Path, cli: Cli) -> None:
    import json

    make_dataset(tmp_path, "cli/src-v0", 2, 3)
    minari_root = tmp_path / "minari"
    assert cli("export", "cli/src-v0", "--format", "minari", "--minari-id", "vc/src-v0",
               "--minari-root", str(minari_root)).returncode == 0
    file = minari_root / "vc" / "src-v0" / "data" / "metadata.json"
    metadata = json.loads(file.read_text())
    del metadata["observation_space"], metadata["action_space"]
    file.write_text(json.dumps(metadata))
    args = ("import-minari", "vc/src-v0", "--minari-root", str(minari_root), "--into", "cli/back-v0")
    refused = cli(*args)  # a failure of the data (exit 1), with one line saying what to pass
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    line, = refused.stderr.strip().splitlines()
    for fragment in ("error:", str(file), "stores no observation_space and action_space", "--trust-env-spec"):
        assert fragment in line, line
    assert not (tmp_path / "cli" / "back-v0").exists()
    result = cli(*args, "--trust-env-spec")
    assert result.returncode == 0, result.stderr
    back, source = load_dataset("cli/back-v0", root=tmp_path), load_dataset("cli/src-v0", root=tmp_path)
    assert back.observation_space == source.observation_space and back.action_space == source.action_space
    assert back.total_steps == source.total_steps


def test_a_failed_run_removes_only_the_empty_dataset_it_made_not_one_put_in_its_place(tmp_path: Path) -> None:
    """After a failed `collect --overwrite` with nothing committed, the CLI removes the empty dataset it made;
    if a concurrent --overwrite replaced it meanwhile, the other run's dataset is left alone."""
    import argparse

    from vcollect.cli.collect import _remove_if_empty

    envs = make_vector("CartPole-v1", 1)
    spaces = envs.single_observation_space, envs.single_action_space
    envs.close()
    args = argparse.Namespace(dataset="cli/race-v0", root=str(tmp_path), append=False)
    mine = EpisodeStore.create("cli/race-v0", *spaces, root=tmp_path)
    with EpisodeStore.create("cli/race-v0", *spaces, root=tmp_path, overwrite=True) as theirs:
        theirs.write_episode(np.zeros((2, 4), np.float32), np.zeros(1, np.int64), [1.0], [True], [False], seed=0, env_id=0)
    assert _remove_if_empty(args, mine) is False
    assert load_dataset("cli/race-v0", root=tmp_path).total_episodes == 1
    alone = EpisodeStore.create("cli/alone-v0", *spaces, root=tmp_path)
    args.dataset = "cli/alone-v0"
    assert _remove_if_empty(args, alone) is True
    assert not (tmp_path / "cli" / "alone-v0").exists()
