"""One set of invariants over every entry point that writes data, on every backend it applies to.

Entry points: ``Collector`` and ``AsyncCollector`` from Python (with the ring they make, and with a small
``VectorRingBuffer`` passed in that long episodes spill out of), ``vcollect collect --dataset`` (a real
subprocess), ``DistributedCollector`` (real Ray workers writing real HDF5 shards) and ``DataCollector``.

The invariants, the same everywhere (``check_episodes`` and ``check_reported``):

* every stored episode has T >= 1 actions, rewards and flags, T + 1 observations, ends with a termination or
  a truncation and has no earlier one; its env id is one of the entry point's env ids;
* every stored episode that carries a seed replays bit-exact on a fresh CartPole (the backend's seeding rule
  is checked too: every episode seeded, or only each env's first, or none where the backend cannot seed);
* the stored episodes are exactly the ones the collect calls report. What is compared: the (length, return)
  of every episode in the calls' ``CollectStats`` (``lens``, ``returns``), all calls concatenated, against
  the (T, sum of rewards) of every stored episode. Backends that step a subset of envs (dummy, subprocess,
  Ray) report each episode in the call that stores it and in the order it is stored: the two sequences are
  equal, call by call. Backends that step every env at once (gymnasium, EnvPool) store episodes that a
  later call reports (``pending_transitions``) and report a call's episodes by env quota: there, after the
  last call the collector is drained (``collect(n_step=pending_transitions)``, which steps no env) and the
  two are equal as multisets; before that, every call's report is contained in what is stored.

A last group checks that the CLI's collector and a Ray worker's collector take the same route as the plain
Python one for the same backend: the same vector env and capabilities, the same step loop class, and an
``EpisodeSink`` that receives every episode in batches (``take_episodes`` or ``write_episodes``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests import cli_envs, forked_scripts
from tests.entry_spy import STATS_FILE_ENV, read_calls
from tests.envs import make_cartpole
from tests.replay import assert_replays
from tests.sinks import ListStore
from vcollect import Collector, RandomPolicy, VectorRingBuffer, make_vector
from vcollect.async_collector import AsyncCollector
from vcollect.minari.recorder import DataCollector
from vcollect.stats import CollectStats
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.sink import EpisodeSink

REPO = Path(__file__).resolve().parents[1]
NUM_ENVS = 4
RING_ROWS = 12
"""Rows per env of the small ring passed in: random CartPole episodes (about 10 to 40 steps) spill out of it."""

# (count, n, random): several calls in a row, both counts, policy and random actions
CALLS: list[tuple[str, int, bool]] = [("n_step", 37, True), ("n_episode", 5, False), ("n_step", 50, False),
                                      ("n_episode", 6, True)]


@dataclass
class Reported:
    """One collect call's report: the episodes it counts (length and return each), and its totals."""

    lens: list[int]
    returns: list[float]
    n_episodes: int
    n_steps: int

    @classmethod
    def of(cls, stats: CollectStats) -> Reported:
        return cls([int(n) for n in stats.lens], [float(r) for r in stats.returns],
                   int(stats.n_collected_episodes), int(stats.n_collected_steps))


# ----------------------------------------------------------------------------------------- invariants


def episode_key(episode: Any) -> tuple[int, float]:
    """(T, return) of a stored episode, as CollectStats reports them."""
    return len(episode.actions), float(np.asarray(episode.rewards, dtype=np.float64).sum())


def check_episodes(episodes: Sequence[Any], env_ids: Iterable[int], seeds: str, *, no_replay: Iterable[int] = ()) -> None:
    """Shape, ending, env id and replay of every stored episode. ``seeds``: "every" (every episode carries
    its reset's seed), "first" (each env id's first stored episode does, the episodes its env restarted by
    itself do not), "none" (the backend cannot seed its resets), or "any" (no rule: only replay).
    ``no_replay``: indices of episodes the caller replays itself."""
    allowed = set(env_ids)
    assert episodes, "nothing was stored"
    for i, episode in enumerate(episodes):
        steps = len(episode.actions)
        assert steps >= 1, f"stored episode {i} has no step"
        assert len(episode.observations) == steps + 1, (i, len(episode.observations), steps)
        for name in ("rewards", "terminations", "truncations"):
            assert np.asarray(getattr(episode, name)).shape == (steps,), (i, name)
        done = np.asarray(episode.terminations, bool) | np.asarray(episode.truncations, bool)
        assert done[-1], f"stored episode {i} (env {episode.env_id}, T={steps}) ends without termination or truncation"
        assert not done[:-1].any(), f"stored episode {i} ends at step {int(done.argmax())} of {steps}"
        assert episode.env_id in allowed, f"stored episode {i} has env id {episode.env_id}, not in {sorted(allowed)}"
        if hasattr(episode, "id"):  # read back from a dataset: episode ids 0..n-1, in order
            assert episode.id == i, f"stored episode {i} has episode id {episode.id}"
    seeded = [episode.seed is not None for episode in episodes]
    if seeds == "every":
        assert all(seeded), f"episodes {[i for i, s in enumerate(seeded) if not s]} carry no seed"
    elif seeds == "none":
        assert not any(seeded), "a backend that cannot seed its resets stored seeds"
    elif seeds == "first":
        first: dict[int, int] = {}
        for i, episode in enumerate(episodes):
            first.setdefault(episode.env_id, i)
        assert seeded == [first[e.env_id] == i for i, e in enumerate(episodes)], seeded
    else:
        assert seeds == "any", seeds
    env = gym.make("CartPole-v1")
    try:
        skip = set(no_replay)
        for i, episode in enumerate(episodes):
            if episode.seed is not None and i not in skip:
                assert_replays(env, episode)
    finally:
        env.close()


def check_reported(episodes: Sequence[Any], calls: Sequence[Reported], *, pending: int, in_order: bool) -> None:
    """The stored episodes are the reported ones (see the module docstring). ``pending``: transitions the
    collector still holds for a later call after the last of ``calls``; ``in_order``: the backend reports
    every episode in the call that stores it, in store order."""
    for call in calls:
        assert call.n_episodes == len(call.lens) == len(call.returns), call
    reported = [(n, r) for call in calls for n, r in zip(call.lens, call.returns)]
    stored = [episode_key(episode) for episode in episodes]
    if in_order:
        assert pending == 0, f"a subset-stepping backend left {pending} transitions for a later call"
        assert reported == stored, "the reported episodes are not the stored ones, in order"
        return
    missing = Counter(reported) - Counter(stored)
    assert not missing, f"reported but not stored: {missing}"
    surplus = Counter(stored) - Counter(reported)
    if pending == 0:
        assert not surplus, f"stored but never reported: {surplus}"
    else:  # stored episodes not reported yet each end with one of the transitions held for a later call
        assert sum(surplus.values()) <= pending, (surplus, pending)


# ------------------------------------------------------------------------------------ Python entry points

LOCAL_BACKENDS = ["dummy", "subproc", "gym_same_step", "gym_next_step", "gym_vector_entry", "envpool"]
SUBSET_BACKENDS = {"dummy", "subproc", "ray"}
SEEDING = {"dummy": "every", "subproc": "every", "ray": "every", "gym_same_step": "first",
           "gym_next_step": "first", "gym_vector_entry": "none", "envpool": "none"}


def make_envs(backend: str, num_envs: int) -> Any:
    """CartPole on ``backend``, as a user builds it."""
    if backend == "subproc":
        return make_vector(make_cartpole, num_envs, backend="subproc", num_workers=2)
    if backend == "gym_same_step":
        return SyncVectorEnv([make_cartpole] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    if backend == "gym_next_step":
        return SyncVectorEnv([make_cartpole] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP)
    if backend == "gym_vector_entry":  # CartPole's own vector env (gymnasium.make_vec's vector entry point)
        return make_vector("CartPole-v1", num_envs, backend="gymnasium")
    if backend in ("dummy", "envpool", "ray"):
        return make_vector("CartPole-v1", num_envs, backend=backend)
    raise ValueError(backend)


PYTHON_CASES = [
    pytest.param(cls, ring, backend, id=f"{cls.__name__}-{ring}-{backend}")
    for backend in LOCAL_BACKENDS
    for cls in (Collector, AsyncCollector)
    for ring in ("own_ring", "small_ring")
] + [
    pytest.param(Collector, "own_ring", "ray", id="Collector-own_ring-ray"),
    pytest.param(AsyncCollector, "small_ring", "ray", id="AsyncCollector-small_ring-ray"),
]


@pytest.mark.parametrize(("cls", "ring", "backend"), PYTHON_CASES)
def test_python_collectors(cls: type[Collector], ring: str, backend: str, tmp_path: Path,
                           request: pytest.FixtureRequest) -> None:
    """Collector/AsyncCollector x own ring/small ring x backend: four calls (n_step, n_episode, with the policy
    and with random actions), every invariant. The Collector rows with a small ring write a real
    EpisodeStore and read it back with load_dataset; the others an in-memory ListStore."""
    if backend == "ray":
        request.getfixturevalue("ray_local")
    num_envs = 2 if backend == "ray" else NUM_ENVS
    envs = make_envs(backend, num_envs)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    buffer = VectorRingBuffer(num_envs, RING_ROWS, obs_space, act_space) if ring == "small_ring" else None
    on_disk = ring == "small_ring" and cls is Collector
    store: Any = (EpisodeStore.create("py/inv-v0", obs_space, act_space, root=tmp_path) if on_disk
                  else ListStore(obs_space, act_space))
    stored_so_far = (lambda: store.committed_episodes + store.pending_episodes) if on_disk else (lambda: len(store.episodes))
    calls: list[Reported] = []
    try:
        try:
            collector = cls(RandomPolicy(act_space, seed=3), envs, buffer, store, seed=11)
        except BaseException:
            envs.close()  # the collector owns (and closes) the envs only once it is built
            raise
        with collector:
            if buffer is not None:
                assert collector.buffer is buffer
            collector.reset()
            for count, n, random in CALLS:
                stats = collector.collect(**{count: n}, random=random)
                calls.append(Reported.of(stats))
                if count == "n_step":
                    assert stats.n_collected_steps == n
                else:
                    assert stats.n_collected_episodes == n
                reported = sum(call.n_episodes for call in calls)
                if backend in SUBSET_BACKENDS:
                    assert stored_so_far() == reported, "a call stored other episodes than it reported"
                else:
                    assert stored_so_far() >= reported, "a call reported episodes that are not stored"
            pending = collector.pending_transitions
            if backend in SUBSET_BACKENDS:
                assert pending == 0
            elif pending:  # report what is held: no env steps, every stored episode is then reported
                before = stored_so_far(), len(collector.buffer)
                drained = collector.collect(n_step=pending, random=True)
                assert drained.n_collected_steps == pending and collector.pending_transitions == 0
                assert (stored_so_far(), len(collector.buffer)) == before, "draining the ledger stepped the envs"
                calls.append(Reported.of(drained))
    finally:
        if on_disk:
            store.close()
    if on_disk:  # every shard's manifest line (recorded as it was written) agrees with the file, and so on
        assert load_dataset("py/inv-v0", root=tmp_path).verify() == []
    episodes = list(load_dataset("py/inv-v0", root=tmp_path)) if on_disk else store.episodes
    check_episodes(episodes, range(num_envs), SEEDING[backend])
    check_reported(episodes, calls, pending=0, in_order=backend in SUBSET_BACKENDS)
    if ring == "small_ring":  # the case is only worth its name if some episode was longer than the ring
        assert max(len(e.actions) for e in episodes) >= RING_ROWS


# ----------------------------------------------------------------------------------------------- the CLI


def run_cli(root: Path, *args: str, stats_file: Path) -> subprocess.CompletedProcess[str]:
    """``python -m tests.entry_spy ARGS``: the vcollect command, recording each collect call's report, in a
    process of its own forked from a server that has imported vcollect (tests/forked_scripts.py)."""
    env = {"VCOLLECT_DATASETS_PATH": str(root), STATS_FILE_ENV: str(stats_file)}
    return forked_scripts.run(["-m", "tests.entry_spy", *args], env, str(REPO), str(root.parent / f"{root.name}-cli-stderr.txt"),
                              timeout=180, daemon=False)  # the subproc backend starts workers of its own


def printed(stdout: str, name: str) -> str:
    """The value cell of row ``name`` of the printed CollectStats table."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) >= 2 and cells[0] == name:
            return cells[1]
    raise AssertionError(f"no row {name!r} in:\n{stdout}")


CLI_CASES = [
    pytest.param("dummy", ["--episodes", "9"], "every", id="dummy-episodes"),
    pytest.param("subproc", ["--steps", "61"], "every", id="subproc-steps"),
    pytest.param("subproc", ["--async", "--episodes", "9"], "every", id="subproc-async-episodes"),
    pytest.param("gymnasium", ["--episodes", "9"], "any", id="gymnasium-episodes"),
    pytest.param("gymnasium", ["--steps", "61"], "any", id="gymnasium-steps"),
    pytest.param("envpool", ["--episodes", "7"], "none", id="envpool-episodes"),
]


@pytest.mark.parametrize("progress", [True, False], ids=["progress-bar", "no-progress"])
@pytest.mark.parametrize(("backend", "count", "seeds"), CLI_CASES)
def test_cli_collect_into_a_dataset(backend: str, count: list[str], seeds: str, progress: bool, tmp_path: Path) -> None:
    """``vcollect collect --dataset`` in a real subprocess, its collect call's report recorded (tests.entry_spy):
    the dataset on disk holds exactly the reported episodes, each whole and replayable; with the command's
    default flags (its progress bar shown, ending at the count) and with --no-progress. (gymnasium: the
    stored seeds depend on the vector env the CLI builds, which test_cli_collector_takes_the_python_route
    checks; here only: every seed replays.)"""
    stats_file = tmp_path / "calls.jsonl"
    flags = [] if progress else ["--no-progress"]
    result = run_cli(tmp_path, "collect", "CartPole-v1", "--num-envs", str(NUM_ENVS), "--backend", backend, *count,
                     "--seed", "0", "--dataset", "cli/inv-v0", *flags, stats_file=stats_file)
    assert result.returncode == 0, result.stderr
    calls = read_calls(str(stats_file))
    assert len(calls) == 1, calls
    call = calls[0]
    # the spy saw what the command printed
    assert printed(result.stdout, "episodes") == f"{call['n_collected_episodes']:,}"
    assert printed(result.stdout, "steps") == f"{call['n_collected_steps']:,}"
    kind, n = count[-2], int(count[-1])
    assert call["n_collected_episodes" if kind == "--episodes" else "n_collected_steps"] == n
    if progress:
        assert f"{n}/{n}" in result.stderr, result.stderr  # the bar was shown and ends at the count
    else:
        assert f"{n}/{n}" not in result.stderr, result.stderr
    assert load_dataset("cli/inv-v0", root=tmp_path).verify() == []
    episodes = list(load_dataset("cli/inv-v0", root=tmp_path))
    check_episodes(episodes, range(NUM_ENVS), seeds)
    reported = [Reported(call["lens"], call["returns"], call["n_collected_episodes"], call["n_collected_steps"])]
    check_reported(episodes, reported, pending=call["pending_transitions"], in_order=backend in SUBSET_BACKENDS)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one usable CPU: the overlap is off by default")
def test_cli_default_subproc_overlaps_steps_and_stores_what_it_reports(tmp_path: Path) -> None:
    """``vcollect collect --backend subproc`` on its default flags (progress bar shown) with one env, so one worker
    process and a CPU beside it: the subprocess backend declares ``split_step_reset`` by default and every step of
    the call goes through the overlapped path (its next actions sent before it is recorded). The dataset holds
    exactly the reported episodes and transitions, and is the one the in-process backend stores for the same
    seed (the overlap reorders nothing)."""
    steps = 300
    data = {}
    for backend in ("subproc", "dummy"):
        stats_file = tmp_path / f"{backend}-calls.jsonl"
        result = run_cli(tmp_path, "collect", "CartPole-v1", "--num-envs", "1", "--backend", backend,
                         "--steps", str(steps), "--seed", "0", "--dataset", f"cli/{backend}-v0", stats_file=stats_file)
        assert result.returncode == 0, result.stderr
        assert f"{steps}/{steps}" in result.stderr, result.stderr  # the progress bar was shown, ending at the count
        calls = read_calls(str(stats_file))
        assert len(calls) == 1, calls
        call = calls[0]
        assert call["n_collected_steps"] == steps
        dataset = load_dataset(f"cli/{backend}-v0", root=tmp_path)
        episodes = list(dataset)
        check_episodes(episodes, [0], "every")
        reported = [Reported(call["lens"], call["returns"], call["n_collected_episodes"], call["n_collected_steps"])]
        check_reported(episodes, reported, pending=call["pending_transitions"], in_order=True)
        assert dataset.total_episodes == call["n_collected_episodes"] == len(episodes) >= 5
        assert dataset.total_steps == sum(call["lens"])  # the dropped unfinished episode's steps are not stored
        assert printed(result.stdout, "steps") == f"{steps:,}"
        data[backend] = (call, episodes)
    overlapped, _ = data["subproc"]
    assert overlapped["split_step_reset"], "the CLI's subprocess backend does not declare split_step_reset"
    assert overlapped["sent_step_resets"] == steps, "the CLI's steps did not take the overlapped path"
    assert not data["dummy"][0]["split_step_reset"] and data["dummy"][0]["sent_step_resets"] == 0
    (subproc_call, subproc_eps), (dummy_call, dummy_eps) = data["subproc"], data["dummy"]
    assert subproc_call["lens"] == dummy_call["lens"] and subproc_call["returns"] == dummy_call["returns"]
    assert len(subproc_eps) == len(dummy_eps)
    for a, b in zip(subproc_eps, dummy_eps):
        assert a.seed == b.seed and a.env_id == b.env_id
        for name in ("observations", "actions", "rewards", "terminations", "truncations"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name


# ----------------------------------------------------------------------------------------- Ray workers

RAY_CALLS: list[tuple[str, int]] = [("n_step", 30), ("n_episode", 5), ("n_step", 21), ("n_episode", 3)]


@pytest.mark.parametrize(("kind", "flush_every_call"), [("sync", True), ("async", True), ("sync", False)])
def test_distributed_collector_workers(kind: str, flush_every_call: bool, ray_local: Any, tmp_path: Path) -> None:
    """DistributedCollector, 2 Ray workers x 2 dummy envs (Collector or AsyncCollector in each), appending to
    one real dataset: after every call (flush_every_call), or after every call and a flush() (the workers
    commit per shard size), the dataset holds exactly the episodes reported so far; each worker's stored
    episodes (by its global env ids) are the ones its stats reported, over all calls."""
    from vcollect.distributed import DistributedCollector

    env = gym.make("CartPole-v1")
    EpisodeStore.create("ray/inv-v0", env.observation_space, env.action_space, root=tmp_path).close()
    env.close()
    per_worker: dict[int, list[Reported]] = {0: [], 1: []}
    total = 0
    with DistributedCollector("CartPole-v1", None, num_workers=2, envs_per_worker=2, store="ray/inv-v0",
                              root=tmp_path, seed=5, collector=kind, flush_every_call=flush_every_call) as dc:
        for count, n in RAY_CALLS:
            stats = dc.collect(**{count: n}, random=True)
            if not flush_every_call:
                dc.flush()
            assert (stats.n_collected_steps if count == "n_step" else stats.n_collected_episodes) == n
            for w, worker_stats in dc.last_worker_stats.items():
                per_worker[w].append(Reported.of(worker_stats))
            total += stats.n_collected_episodes
            assert load_dataset("ray/inv-v0", root=tmp_path).total_episodes == total
    assert load_dataset("ray/inv-v0", root=tmp_path).verify() == []
    episodes = list(load_dataset("ray/inv-v0", root=tmp_path))
    check_episodes(episodes, range(4), "every")
    for w, calls in per_worker.items():
        mine = [e for e in episodes if e.env_id in (2 * w, 2 * w + 1)]
        check_reported(mine, calls, pending=0, in_order=False)  # shards of two writers: order across them is by name


# --------------------------------------------------------------------------------------- DataCollector


def test_data_collector(tmp_path: Path) -> None:
    """DataCollector around CartPole, driven with the gymnasium API: 3 whole episodes, then 40 steps (resetting
    at each end), then 2 whole episodes (the reset cuts the running episode: Minari records it truncated).
    The dataset holds exactly the episodes the loop saw, in order, with its observations and actions."""
    env = DataCollector(gym.make("CartPole-v1"), root=tmp_path, seed=3, flush_every=2)
    env.action_space.seed(0)
    seen: list[dict[str, list[Any]]] = []

    def start() -> None:
        obs, _ = env.reset()
        seen.append({"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []})

    def step() -> bool:
        action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in (("obs", obs), ("act", action), ("rew", reward), ("term", terminated), ("trunc", truncated)):
            seen[-1][key].append(value)
        return bool(terminated or truncated)

    for _ in range(3):  # whole episodes (n_episode)
        start()
        while not step():
            pass
    start()
    for _ in range(40):  # a step count (n_step), the last episode left running
        if step():
            start()
    assert seen[-1]["act"] and not (seen[-1]["term"][-1] or seen[-1]["trunc"][-1]), "the step phase ended an episode"
    cut = len(seen) - 1
    for _ in range(2):
        start()
        while not step():
            pass
    dataset = env.create_dataset("rec/inv-v0")
    env.close()
    assert load_dataset("rec/inv-v0", root=tmp_path).verify() == []
    episodes = list(load_dataset("rec/inv-v0", root=tmp_path))
    assert len(episodes) == len(seen) == dataset.total_episodes
    for episode, want in zip(episodes, seen):
        np.testing.assert_array_equal(episode.observations, np.array(want["obs"]))
        np.testing.assert_array_equal(episode.actions, np.array(want["act"]))
        np.testing.assert_array_equal(episode.rewards, np.array(want["rew"], np.float64))
        np.testing.assert_array_equal(episode.terminations, np.array(want["term"]))
    for i, (episode, want) in enumerate(zip(episodes, seen)):
        expected = list(want["trunc"])
        if i == cut:  # Minari's rule for an episode a reset cuts: truncated at its last step
            expected[-1] = True
        np.testing.assert_array_equal(episode.truncations, np.array(expected))
    check_episodes(episodes, [0], "every", no_replay=[cut])
    # the cut episode replays, up to the truncation the recorder added (the env itself did not end it)
    uncut = dataclasses.replace(episodes[cut], truncations=np.array(seen[cut]["trunc"]))
    assert_replays(gym.make("CartPole-v1"), uncut)
    reported = [Reported([len(w["act"]) for w in seen], [float(np.sum(w["rew"], dtype=np.float64)) for w in seen],
                         len(seen), sum(len(w["act"]) for w in seen))]
    check_reported(episodes, reported, pending=0, in_order=True)


# --------------------------------------------------------------------- same route as the Python collector


def python_collector(backend: str, num_envs: int) -> Collector:
    """The plain Python collector for ``backend``: make_vector("CartPole-v1", ...) and an EpisodeSink."""
    return Collector(None, make_vector("CartPole-v1", num_envs, backend=backend), store=ListStore())


def env_route(collector: Collector) -> tuple[Any, ...]:
    """What decides a collector's path: the adapter, the env it wraps (a gymnasium vector env's class), the
    declared capabilities and the step loop class."""
    envs = collector.envs
    inner = getattr(envs, "env", None)
    inner_type = type(inner.unwrapped) if isinstance(inner, gym.vector.VectorEnv) else None
    return type(envs), inner_type, envs.capabilities, type(collector._loop)


def count_batched_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Episodes handed to EpisodeStore.take_episodes or write_episodes: (method, episodes) per batch, from now on."""
    batches: list[tuple[str, int]] = []
    for name in ("write_episodes", "take_episodes"):
        method = getattr(EpisodeStore, name)

        @functools.wraps(method)
        def spied(self: Any, observations: Any, actions: Any, rewards: Any, terminations: Any, truncations: Any,
                  lengths: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            batches.append((_name, len(lengths)))
            return _method(self, observations, actions, rewards, terminations, truncations, lengths, **kwargs)

        monkeypatch.setattr(EpisodeStore, name, spied)
    return batches


def assert_handed_over(batches: list[tuple[str, int]], total_episodes: int) -> None:
    """Every stored episode came in a batch handed over uncopied (take_episodes: the collector's fast path)."""
    assert sum(n for _, n in batches) == total_episodes, f"episodes through the batched calls: {batches}"
    assert {name for name, _ in batches} == {"take_episodes"}, f"batches not handed over uncopied: {batches}"


@pytest.mark.parametrize("progress", [True, False], ids=["progress-bar", "no-progress"])
@pytest.mark.parametrize("backend", ["dummy", "gymnasium", "envpool"])
def test_cli_collector_takes_the_python_route(backend: str, progress: bool, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``vcollect collect --dataset`` (vcollect.cli.main, in process) builds the collector Python builds for the
    backend: same vector env, capabilities and step loop, and an EpisodeSink that takes every episode through
    EpisodeStore.take_episodes (handed over, uncopied); with its default flags (progress bar) as with --no-progress."""
    from vcollect.cli import main as cli_main

    built: list[tuple[Collector, tuple[Any, ...], dict[str, Any]]] = []
    init = Collector.__init__

    @functools.wraps(init)
    def spied_init(self: Collector, *args: Any, **kwargs: Any) -> None:
        built.append((self, args, kwargs))
        init(self, *args, **kwargs)

    monkeypatch.setattr(Collector, "__init__", spied_init)
    batches = count_batched_writes(monkeypatch)
    argv = ["collect", "CartPole-v1", "--num-envs", str(NUM_ENVS), "--backend", backend, "--episodes", "6",
            "--seed", "0", "--dataset", "route/cli-v0", "--root", str(tmp_path), *([] if progress else ["--no-progress"])]
    error: BaseException | None = None
    status = None
    try:
        status = cli_main(argv)
    except Exception as exc:  # reported below, after what the CLI handed the Collector
        error = exc
    assert len(built) == 1, f"the CLI built {len(built)} collectors"
    cli, args, kwargs = built[0]
    sink = kwargs["store"] if "store" in kwargs else args[3]
    assert isinstance(sink, EpisodeSink), f"the CLI hands the Collector a {type(sink).__name__}, not an EpisodeSink"
    assert error is None and status == 0, f"vcollect collect failed: {error!r} (status {status})"
    assert sink.store._commits.background, "the CLI's store commits shards inside the collect loop"
    assert not cli.hooked, "the CLI's collector has a hook set, so blocks are recorded step by step"
    python = python_collector(backend, NUM_ENVS)
    try:
        assert env_route(cli) == env_route(python), "the CLI's collector is not the one Python builds"
    finally:
        python.close()
    dataset = load_dataset("route/cli-v0", root=tmp_path)
    assert dataset.total_episodes >= 6
    assert_handed_over(batches, dataset.total_episodes)


@pytest.mark.parametrize("backend", ["dummy", "gymnasium"])
def test_ray_worker_collector_takes_the_python_route(backend: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A DistributedCollector worker's body (distributed.worker.CollectorWorker, run in process) builds the collector
    Python builds: same vector env, capabilities and step loop, with the worker's EpisodeStore itself as the
    sink (batches handed over uncopied), storing global env ids (worker 1 of 2-env workers: 2 and 3)."""
    from vcollect.distributed.worker import CollectorWorker, WorkerSpec

    env = gym.make("CartPole-v1")
    EpisodeStore.create("route/ray-v0", env.observation_space, env.action_space, root=tmp_path).close()
    env.close()
    batches = count_batched_writes(monkeypatch)
    spec = WorkerSpec(env="CartPole-v1", env_kwargs={}, backend=backend, backend_kwargs={}, num_envs=2,
                       env_id_offset=2, policy_fn=None, seed=9, collector="sync", store_id="route/ray-v0",
                       root=str(tmp_path))
    worker = CollectorWorker(1)
    ok, value = worker.setup(spec)
    try:
        assert ok, f"worker setup failed: {getattr(value, 'type_name', '')}: {getattr(value, 'message', value)}"
        assert isinstance(worker.collector.store, EpisodeStore), (
            f"the worker hands its Collector a {type(worker.collector.store).__name__}, not its EpisodeStore"
        )
        python = python_collector(backend, 2)
        try:
            assert env_route(worker.collector) == env_route(python), "the worker's collector is not Python's"
        finally:
            python.close()
        ok, value = worker.collect(None, 4, True)
        assert ok, getattr(value, "message", value)
        assert value.n_collected_episodes == 4
    finally:
        closed, committed = worker.close()
    assert closed, getattr(committed, "message", committed)
    dataset = load_dataset("route/ray-v0", root=tmp_path)
    assert dataset.total_episodes == committed >= 4
    assert {e.env_id for e in dataset} <= {2, 3}
    assert_handed_over(batches, dataset.total_episodes)


def collect_in_a_worker(policy_fn: Any, backend: str, n_step: int, **options: Any) -> None:
    """n_step steps on 2 CartPole envs through a DistributedCollector worker's body (CollectorWorker, in process,
    no store), with these WorkerSpec options; asserts that setup and the call succeed and count n_step."""
    from vcollect.distributed.worker import CollectorWorker, WorkerSpec

    spec = WorkerSpec(env="CartPole-v1", env_kwargs={}, backend=backend, backend_kwargs={}, num_envs=2,
                      env_id_offset=0, policy_fn=policy_fn, seed=0, collector="sync", store_id=None, root=None,
                      **options)
    worker = CollectorWorker(0)
    ok, value = worker.setup(spec)
    try:
        assert ok, getattr(value, "message", value)
        ok, value = worker.collect(n_step, None, False)
        assert ok and value.n_collected_steps == n_step, getattr(value, "message", value)
    finally:
        worker.close()


def epsilon_greedy_torch_policy(observation_space: gym.Space, action_space: gym.Space) -> Any:
    """A worker's policy_fn: EpsilonGreedy around a TorchPolicy (argmax actions: they lie in the space)."""
    torch = pytest.importorskip("torch")
    from vcollect.policies import EpsilonGreedy, TorchPolicy

    net = torch.nn.Linear(int(np.prod(observation_space.shape)), int(action_space.n))
    return EpsilonGreedy(TorchPolicy(net, action_space), action_space, epsilon=0.5, seed=0)


def test_trusted_policy_actions_are_not_checked_on_any_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """An EpsilonGreedy(TorchPolicy) acts unchecked (its actions and its noise lie in the space) in a plain
    Collector, an AsyncCollector and a DistributedCollector worker's collector alike; a policy that does not
    vouch for its actions is checked in each of them."""
    from vcollect.collecting.acting import PolicyActor

    checks: list[int] = []
    checked = PolicyActor._checked

    def spied(self: PolicyActor, actions: Any, env_ids: np.ndarray) -> Any:
        checks.append(len(env_ids))
        return checked(self, actions, env_ids)

    monkeypatch.setattr(PolicyActor, "_checked", spied)
    unvouched = lambda obs_space, act_space: lambda obs, state=None: (np.zeros(len(obs), np.int64), None)  # noqa: E731
    for policy_fn, expect_checks in ((epsilon_greedy_torch_policy, False), (unvouched, True)):
        for cls in (Collector, AsyncCollector):
            checks.clear()
            envs = make_vector("CartPole-v1", 2, backend="dummy")
            policy = policy_fn(envs.single_observation_space, envs.single_action_space)
            with cls(policy, envs, seed=0, exploration_noise=True) as collector:
                collector.collect(n_step=20, reset_before_collect=True)
            assert bool(checks) is expect_checks, (cls.__name__, policy_fn, checks)
        checks.clear()
        collect_in_a_worker(policy_fn, "dummy", 20, exploration_noise=True)
        assert bool(checks) is expect_checks, ("Ray worker", policy_fn, checks)


def test_observations_are_checked_before_each_call_only_for_a_policy_that_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the block-staging gymnasium backend, the Python Collector, the CLI (in process, --policy) and a Ray
    worker's collector check each row before a policy that reads observations acts on it (ConstantPolicy: no
    block is left to check), and check whole blocks for one that reads none (RandomPolicy)."""
    from vcollect.cli import main as cli_main
    from vcollect.collecting.loops.blocks import BlockLoop

    block_checks: list[int] = []
    first_bad_row = BlockLoop._first_bad_row

    def spied(self: BlockLoop, first: int, stop: int) -> int | None:
        block_checks.append(stop - first)
        return first_bad_row(self, first, stop)

    monkeypatch.setattr(BlockLoop, "_first_bad_row", spied)
    for name, reads in (("constant_policy", True), ("random_policy", False)):
        factory = getattr(cli_envs, name)
        block_checks.clear()
        envs = make_vector("CartPole-v1", NUM_ENVS, backend="gymnasium")
        with Collector(factory(envs.single_observation_space, envs.single_action_space), envs, seed=0) as collector:
            assert isinstance(collector._loop, BlockLoop)
            collector.collect(n_step=200, reset_before_collect=True)
        assert bool(block_checks) is not reads, ("Python", name, block_checks)
        block_checks.clear()
        argv = ["collect", "CartPole-v1", "--num-envs", str(NUM_ENVS), "--backend", "gymnasium", "--steps", "200",
                "--policy", f"tests.cli_envs:{name}", "--seed", "0", "--dataset", f"reads/{name}-v0",
                "--root", str(tmp_path)]
        assert cli_main(argv) == 0
        assert bool(block_checks) is not reads, ("CLI", name, block_checks)
        block_checks.clear()
        collect_in_a_worker(factory, "gymnasium", 200)
        assert bool(block_checks) is not reads, ("Ray worker", name, block_checks)


def zero_policy_all_noise(observation_space: gym.Space, action_space: gym.Space) -> Any:
    """A worker's policy_fn: action 0 always, under EpsilonGreedy with epsilon 1 (every action random)."""
    from vcollect.policies import EpsilonGreedy

    return EpsilonGreedy(lambda obs, state=None: (np.zeros(len(obs), np.int64), None), action_space, 1.0, seed=0)


@pytest.mark.parametrize("noise", [False, True])
def test_distributed_workers_add_exploration_noise_as_asked(noise: bool, ray_local: Any, tmp_path: Path) -> None:
    """DistributedCollector(exploration_noise=...) reaches its workers' collectors (real Ray workers): with it,
    EpsilonGreedy's random actions are what the envs get and the store holds; without it, the policy's own
    (all 0), as with a plain Collector."""
    from vcollect.distributed import DistributedCollector

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module
    env = gym.make("CartPole-v1")
    EpisodeStore.create("ray/noise-v0", env.observation_space, env.action_space, root=tmp_path).close()
    env.close()
    with DistributedCollector("CartPole-v1", zero_policy_all_noise, num_workers=1, envs_per_worker=2,
                              store="ray/noise-v0", root=tmp_path, seed=0, exploration_noise=noise) as dc:
        dc.collect(n_episode=4)
    actions = np.concatenate([episode.actions for episode in load_dataset("ray/noise-v0", root=tmp_path)])
    assert bool(np.any(actions == 1)) is noise, actions
