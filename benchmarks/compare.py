"""Print a table of steps/s: the raw gymnasium loop, vcollect's Collector on each backend, and peers.

The machines are shared and noisy: a neighbour's burst slows whatever runs at that moment, never speeds it
up. So every row is set up once (envs, collector, warm-up), then timed in many short windows, the rows
taking turns window by window, and each row keeps its fastest window: the speed it reaches when the
machine leaves it alone. Ratios are taken between those, all within one run. Usage:

    python benchmarks/compare.py [--window-steps 20000] [--rounds 10] [--num-envs 8]
        [--rows issues,entry,distributed,policy,torchrl] [--only raw,dummy,...] [--markdown] [--list]

--rows picks row sets (default: all): ``issues`` (the rows of issues 2 to 4), ``entry`` (``vcollect
collect`` as a process against the same collection written in Python, benchmarks/entry_python.py),
``distributed`` (DistributedCollector with one Ray worker against an in-process Collector), ``policy``
(RandomPolicy as the policy object against the raw loops of the random=True rows), ``torchrl``
(TorchRL's Collector over SerialEnv/ParallelEnv against the dummy/subproc backends, CartPole-v1 and
HalfCheetah-v5, 8 envs, random actions); --only narrows to ratios between the named rows (--list prints
them); --markdown prints the tables for RESULTS.md. The code that runs is the one PYTHONPATH finds (the
CLI rows run ``sys.executable -m vcollect``), so a before/after comparison is two runs with different
PYTHONPATHs.

Tianshou's Collector is measured when `tianshou` is importable or $TIANSHOU_PYTHON names an
interpreter that has it (it is not a vcollect dependency); benchmarks/tianshou_peer.py times it the same
way, in its own process, once per round. TorchRL's likewise: `torchrl` importable or $TORCHRL_PYTHON
(benchmarks/torchrl_peer.py; e.g. ``python3.11 -m venv /tmp/trlvenv && /tmp/trlvenv/bin/pip install
torch==2.13.0 torchrl==0.14.1 gymnasium[mujoco]==1.4.0``). TorchRL is kept out of the dev extra by
choice, not by a conflict: ``pip install --dry-run torchrl==0.14.1`` with torch==2.13.0 into the dev venv
resolves cleanly (it adds tensordict 0.14.3, hoptorch, pyvers, orjson, importlib_metadata, zipp,
lazy-importer and changes nothing installed), but its wheel also installs top-level ``benchmarks/``,
``scripts/``, ``sota-check/`` and ``sota-implementations/`` folders into site-packages (``benchmarks``
then shares its namespace with this folder), for benchmark rows that no test needs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from entry_rows import entry_window, same_vcollect
from rich.console import Console
from rich.table import Table
from tianshou_peer import tianshou_speed
from torchrl_peer import GYM_IDS, PAIRS, torchrl_speed

import vcollect
from vcollect.envs import make_vector

Window = Callable[[int], float | None]
"""Run one timed window of about n transitions on an already warmed-up setup; return transitions/s
(None: the window failed and said why on stderr; only the entry rows' processes do)."""

CLOCK: Callable[[], float] = time.perf_counter
"""What the in-process windows are timed by: wall clock, or this process's CPU time (``--clock cpu``,
``time.process_time``), which a neighbour on a shared machine moves far less."""

CLEANUP = contextlib.ExitStack()
"""Closes the envs, collectors and stores of the rows set up so far (see measure: one group at a time)."""


def raw_sync_vector_loop(num_envs: int, env_id: str = "CartPole-v1") -> Window:
    """gymnasium SyncVectorEnv, SAME_STEP autoreset (every slot a transition), batched random actions
    (uniform within the bounds of a Box action space)."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id)] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    rng = np.random.default_rng(0)
    envs.reset(seed=0)
    CLEANUP.callback(envs.close)
    space = envs.single_action_space

    def actions() -> np.ndarray:
        if isinstance(space, gym.spaces.Discrete):
            return rng.integers(0, int(space.n), size=num_envs)
        return rng.uniform(space.low, space.high, size=(num_envs, *space.shape)).astype(space.dtype)

    def window(steps: int) -> float:
        n_batches = max(1, steps // num_envs)
        start = CLOCK()
        for _ in range(n_batches):
            envs.step(actions())
        return n_batches * num_envs / (CLOCK() - start)

    window(1_000)
    return window


def collector_window(
    envs: Any,
    policy: object = None,
    store: object = None,
    every_reset: bool = True,
    collector_cls: type[vcollect.Collector] = vcollect.Collector,
    warm_up: int = 1_000,
) -> Window:
    """``collect(n_step=n)`` on one collector kept for the whole run (its rings wrap, its store commits
    shards as usual), timed from the call to its return. ``every_reset=False``: seed_every_reset=False."""
    collector = collector_cls(
        policy, envs, store=store, seed=0, seed_every_reset=every_reset  # type: ignore[arg-type]
    )
    CLEANUP.callback(collector.close)  # closes its envs; runs before the store's close (registered later)
    random = policy is None
    collector.collect(n_step=warm_up, reset_before_collect=True, random=random)

    def window(steps: int) -> float:
        start = CLOCK()
        collector.collect(n_step=steps, random=random)
        return steps / (CLOCK() - start)

    return window


def mlp_policy(action_space: gym.Space) -> object:
    """TorchPolicy with a 4-64-64-2 MLP (the network of the issue's Tianshou DQN comparison)."""
    import torch

    from vcollect.policies import TorchPolicy

    torch.manual_seed(0)
    torch.set_num_threads(1)  # as tianshou_peer.py does: a tiny net on CPU is fastest single-threaded
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)
    )
    return TorchPolicy(net, action_space)


def store_window(
    num_envs: int, shard_steps: int, every_reset: bool = True, *, backend: str = "dummy", policy: bool = False
) -> Window | None:
    """Collector (dummy backend unless said) writing every episode into an EpisodeStore in a temporary
    folder; shards of ``shard_steps`` (the window size: each window pays for one shard commit, more often
    than the 100k-step default). ``policy``: RandomPolicy as the policy object instead of random=True.
    None when the backend is not installed (envpool)."""
    from vcollect.store import EpisodeStore

    if backend == "envpool" and importlib.util.find_spec("envpool") is None:
        return None
    envs = make_vector("CartPole-v1", num_envs, backend=backend)
    root = tempfile.mkdtemp(prefix="vcollect-compare-")
    CLEANUP.callback(shutil.rmtree, root, ignore_errors=True)
    store = EpisodeStore.create(
        "bench/cartpole-v0", envs.single_observation_space, envs.single_action_space, root=root,
        shard_steps=shard_steps,
    )
    CLEANUP.callback(store.close)
    return collector_window(envs, random_policy(envs) if policy else None, store=store, every_reset=every_reset)


def random_policy(envs: Any) -> object:
    """RandomPolicy on the envs' action space: random actions drawn through the policy path (the
    Collector calls it with the observations) instead of the Collector's own ``random=True`` draws."""
    from vcollect.policies import RandomPolicy

    return RandomPolicy(envs.single_action_space, seed=0)


# ---------------------------------------------------------------------------------------------------
# Async collection on uneven envs, gymnasium vector envs, EnvPool, each against its own baseline.


def slow_env_window(collector_cls: str, num_envs: int = 8) -> Window:
    """Collector or AsyncCollector on envs whose steps take 0.2 ms, or 5 ms with probability 0.1, one
    worker process per env (SlowEnv: tests/envs.py, from the checkout that vcollect was imported from,
    so that the worker processes, which get this sys.path, import the same vcollect)."""
    checkout = Path(vcollect.__file__).resolve().parents[1]
    if (checkout / "tests" / "envs.py").is_file():
        sys.path.insert(0, str(checkout))
    else:  # vcollect installed, not a checkout: this script's checkout, after everything else
        sys.path.append(str(Path(__file__).resolve().parents[1]))
    from tests.envs import SlowEnv
    from vcollect.async_collector import AsyncCollector

    cls = AsyncCollector if collector_cls == "async" else vcollect.Collector
    envs = make_vector(SlowEnv, num_envs, backend="subproc", num_workers=num_envs)
    return collector_window(envs, collector_cls=cls, warm_up=200)


def real_transitions_window(envs: Any, num_envs: int) -> Window:
    """Step an autoresetting (NEXT_STEP) vector env with random actions; count only real transitions.

    A slot whose env finished on the previous step holds its restart, not a transition."""
    rng = np.random.default_rng(0)
    restarting = np.zeros(num_envs, dtype=bool)

    def window(steps: int) -> float:
        nonlocal restarting
        real = 0
        start = CLOCK()
        for _ in range(max(1, steps // num_envs)):
            _, _, terminations, truncations, _ = envs.step(rng.integers(0, 2, size=num_envs))
            real += num_envs - int(np.count_nonzero(restarting))
            restarting = terminations | truncations
        return real / (CLOCK() - start)

    window(1_000)
    return window


def raw_vector_entry_loop(num_envs: int) -> Window:
    """gym.make_vec's CartPole vector entry point (NEXT_STEP autoreset): real transitions per second, not
    counting the restart rows."""
    envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    CLEANUP.callback(envs.close)
    return real_transitions_window(envs, num_envs)


def vector_entry_collector(num_envs: int, policy: bool = False) -> Window:
    """The Collector on the same vector env (wrapped in GymnasiumVectorEnv), real transitions per second.
    ``policy``: RandomPolicy as the policy object instead of random=True."""
    envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    return collector_window(envs, random_policy(envs) if policy else None)


def raw_envpool_loop(num_envs: int) -> Window | None:
    """EnvPool's own sync loop (its autoreset restarts finished envs): real transitions per second."""
    try:
        import envpool
    except ImportError:
        return None
    envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, seed=0)
    envs.reset()
    CLEANUP.callback(envs.close)
    return real_transitions_window(envs, num_envs)


def envpool_collector(num_envs: int, policy: bool = False) -> Window | None:
    """The Collector on an EnvPoolVectorEnv with the same pool settings (``policy``: RandomPolicy)."""
    if importlib.util.find_spec("envpool") is None:
        return None
    envs = make_vector("CartPole-v1", num_envs, backend="envpool", seed=0)
    return collector_window(envs, random_policy(envs) if policy else None)


# ---------------------------------------------------------------------------------------------------
# issue "One typed route from envs to store": the real entry points against the direct Python route
# (the CLI's and entry_python.py's processes: entry_rows.py; DistributedCollector's Ray worker: here).


def vcollect_file() -> str:
    """Where this process imported vcollect from (also run in a Ray worker)."""
    import vcollect as module

    return str(module.__file__)




def distributed_window(backend: str, num_envs: int, shard_steps: int) -> Window | None:
    """DistributedCollector with one Ray worker (``num_envs`` CartPole-v1 envs on ``backend``, random
    actions) appending every episode to a dataset in a temporary folder; a window is one ``collect`` call,
    its steps/s the CollectStats' (the driver's clock: the Ray call and the worker's end-of-call shard
    commit included). Shards of ``shard_steps`` (the window size), as its baseline's (store_window).
    Starts a local Ray once, unless Ray is initialised or $RAY_ADDRESS is set; it stays up to the end."""
    if backend == "envpool" and importlib.util.find_spec("envpool") is None:
        return None
    import ray

    from vcollect.distributed import DistributedCollector
    from vcollect.store import EpisodeStore

    if not ray.is_initialized() and not os.environ.get("RAY_ADDRESS"):
        # Ray puts the driver's working directory on its workers' sys.path: start it from an empty folder,
        # so that the workers import the vcollect this process imported (checked below), not a checkout
        # that happens to be the working directory.
        here = os.getcwd()
        os.chdir(tempfile.gettempdir())  # (contextlib.chdir is Python 3.11+)
        try:
            ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        finally:
            os.chdir(here)
    same_vcollect(ray.get(ray.remote(vcollect_file).options(num_cpus=0).remote()), "a Ray worker")
    root = tempfile.mkdtemp(prefix="vcollect-distributed-")
    CLEANUP.callback(shutil.rmtree, root, ignore_errors=True)
    dataset = f"bench/distributed-{backend}-v0"
    probe = make_vector("CartPole-v1", num_envs, backend=backend)  # the spaces as the worker will see them
    try:
        EpisodeStore.create(dataset, probe.single_observation_space, probe.single_action_space, root=root).close()
    finally:
        probe.close()
    collector = DistributedCollector(
        "CartPole-v1", None, num_workers=1, envs_per_worker=num_envs, backend=backend, store=dataset, root=root,
        seed=0, store_kwargs={"shard_steps": shard_steps},
    )
    CLEANUP.callback(collector.close)  # registered after the folder's removal, so it runs before it
    collector.collect(n_step=1_000, random=True)  # warm-up: the worker's first reset and shard

    def window(steps: int) -> float:
        return float(collector.collect(n_step=steps, random=True).collect_speed)

    return window


class Ratio(NamedTuple):
    """One line of the ratio table: ``row``'s best window over ``base``'s, against ``bar`` (None: shown
    for information, no bar); ``rows`` names the set it belongs to (``--rows``)."""

    label: str
    row: str
    base: str
    bar: float | None
    rows: str


RATIOS: list[Ratio] = [
    Ratio("Collector dummy / raw SyncVectorEnv", "dummy", "raw", 0.85, "issues"),
    Ratio("  the same, resets seeded as raw's (first only)", "dummy, first reset seeded", "raw", 0.85, "issues"),
    Ratio("Collector subproc, 2 workers / raw", "subproc (2 workers)", "raw", 0.6, "issues"),
    Ratio("Collector dummy / Tianshou dummy, random", "dummy", "tianshou dummy", 4.0, "issues"),
    Ratio("Collector subproc / Tianshou subproc, random", "subproc (2 workers)", "tianshou subproc", 4.0,
          "issues"),
    Ratio("TorchPolicy MLP / Tianshou DQN, same MLP", "dummy+torch mlp", "tianshou dummy+dqn mlp", 4.0,
          "issues"),
    Ratio("  the same, resets seeded as Tianshou's (first only)", "dummy+torch mlp, first reset seeded",
          "tianshou dummy+dqn mlp", 4.0, "issues"),
    Ratio("Collector dummy + store / raw", "dummy+store", "raw", 0.75, "issues"),
    Ratio("  the same, resets seeded as raw's (first only)", "dummy+store, first reset seeded", "raw", 0.75, "issues"),
    Ratio("AsyncCollector / Collector, 8 slow envs on 8 workers", "slow envs async", "slow envs sync", 2.0,
          "issues"),
    Ratio("Collector / raw, CartPole vector entry point, 64 envs", "vector entry 64", "raw vector entry 64",
          0.8, "issues"),
    Ratio("Collector / raw, EnvPool CartPole, 8 envs", "envpool", "raw envpool", 0.7, "issues"),
    # the real entry points, each against the direct Python Collector + EpisodeStore on the same work
    Ratio("`vcollect collect` / Python Collector+EpisodeStore, gymnasium, 64 envs, store on",
          "CLI gymnasium 64+store", "Python gymnasium 64+store", 0.9, "entry"),
    Ratio("`vcollect collect` / Python Collector+EpisodeStore, EnvPool, 8 envs, store on",
          "CLI envpool+store", "Python envpool+store", 0.9, "entry"),
    # the command's default path (its progress bar) against the same command with --no-progress
    Ratio("`vcollect collect` progress bar / --no-progress, dummy, 8 envs, store on",
          "CLI dummy+store", "CLI dummy+store, --no-progress", 0.95, "entry"),
    Ratio("`vcollect collect` progress bar / --no-progress, subproc, 8 envs, store on",
          "CLI subproc+store", "CLI subproc+store, --no-progress", 0.95, "entry"),
    Ratio("DistributedCollector, 1 worker / Collector+EpisodeStore, gymnasium, 64 envs, store on",
          "distributed gymnasium 64+store", "Collector gymnasium 64+store", 0.9, "distributed"),
    Ratio("DistributedCollector, 1 worker / Collector+EpisodeStore, EnvPool, 8 envs, store on",
          "distributed envpool+store", "Collector envpool+store", 0.9, "distributed"),
    # RandomPolicy as the policy object (the policy path) against the raw loop of the random=True row
    Ratio("Collector dummy + RandomPolicy / raw", "dummy+RandomPolicy", "raw", 0.95, "policy"),
    Ratio("  the same / Collector dummy, random=True", "dummy+RandomPolicy", "dummy", None, "policy"),
    Ratio("Collector subproc, 2 workers + RandomPolicy / raw", "subproc (2 workers)+RandomPolicy", "raw", 0.8,
          "policy"),
    Ratio("  the same / Collector subproc, random=True", "subproc (2 workers)+RandomPolicy", "subproc (2 workers)",
          None, "policy"),
    Ratio("Collector dummy + store + RandomPolicy / raw", "dummy+store+RandomPolicy", "raw", 0.9, "policy"),
    Ratio("  the same / Collector dummy + store, random=True", "dummy+store+RandomPolicy", "dummy+store", None,
          "policy"),
    Ratio("Collector dummy + RandomPolicy / raw, resets seeded as raw's (first only)",
          "dummy+RandomPolicy, first reset seeded", "raw", None, "policy"),
    Ratio("Collector dummy + store + RandomPolicy / raw, resets seeded as raw's (first only)",
          "dummy+store+RandomPolicy, first reset seeded", "raw", None, "policy"),
    Ratio("Collector + RandomPolicy / raw, CartPole vector entry point, 64 envs", "vector entry 64+RandomPolicy",
          "raw vector entry 64", 0.95, "policy"),
    Ratio("  the same / Collector, random=True", "vector entry 64+RandomPolicy", "vector entry 64", None, "policy"),
    Ratio("Collector + RandomPolicy / raw, EnvPool CartPole, 8 envs", "envpool+RandomPolicy", "raw envpool", 0.7,
          "policy"),
    Ratio("  the same / Collector, random=True", "envpool+RandomPolicy", "envpool", None, "policy"),
    # TorchRL's Collector on the same work (torchrl_peer.PAIRS: the goals)
    *(Ratio(f"Collector {p.backend} / TorchRL Collector {p.peer}, {GYM_IDS[p.env]}, random",
            p.vcollect_row, p.torchrl_row, p.bar, "torchrl") for p in PAIRS),
    # stepping the envs alone (no collector) against TorchRL: about the most an in-process collector can show
    Ratio("  raw SyncVectorEnv loop / TorchRL SerialEnv, CartPole-v1", "raw", "CartPole torchrl SerialEnv", None,
          "torchrl"),
    Ratio("  raw SyncVectorEnv loop / TorchRL SerialEnv, HalfCheetah-v5", "raw HalfCheetah-v5",
          "HalfCheetah torchrl SerialEnv", None, "torchrl"),
]
"""The ratios: (label, row, baseline row, bar, row set), each taken between the two rows' best windows.

The Collector seeds every reset by default (each stored episode replays alone from its seed); the raw
gymnasium loop and Tianshou seed only once, and gymnasium's reset with a seed makes a new generator
(about 10 us). The indented "seeded as" rows measure the Collector doing the same as the baseline
(``seed_every_reset=False``).

Row sets (``--rows``): ``issues``, the rows of issues 2 to 4 (unchanged); ``entry``, ``vcollect collect``
against the same collection from Python (entry_window); ``distributed``, DistributedCollector with one
worker against an in-process Collector (distributed_window); ``policy``, RandomPolicy passed as the
policy object against the raw loop of the matching random=True row (the indented lines: against the
random=True row itself, for information); ``torchrl``, TorchRL's Collector against the dummy/subproc
backends (torchrl_peer.PAIRS; the indented lines: the raw SyncVectorEnv loop against TorchRL's SerialEnv,
about the most a collector stepping the same envs in one process can show, no bar). Bars of the new sets:
the goals set for them (entry points 0.9, the progress bar 0.95; policy rows: dummy 0.95, dummy + store
0.9, vector entry 64 0.95, subproc 8 envs / 2 workers 0.8; TorchRL 10x and 5x); the EnvPool policy row
carries its random=True row's bar."""

ROW_SETS = ("issues", "entry", "distributed", "policy", "torchrl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window-steps", type=int, default=20_000, help="transitions per window (8-env rows)")
    parser.add_argument("--rounds", type=int, default=10, help="windows per row, rows taking turns")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument(
        "--rows", default=",".join(ROW_SETS),
        help=f"comma-separated row sets: the ratios of these sets only (from: {', '.join(ROW_SETS)}; default: all)",
    )
    parser.add_argument("--only", default="", help="comma-separated row names (a comma followed by a space is part of a name): only the ratios between them")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown (for RESULTS.md)")
    parser.add_argument("--list", action="store_true", help="list the ratios (set, row, baseline) and exit")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall",
        help="time the in-process windows by wall clock or by this process's CPU time (time.process_time); "
        "rows run in other processes (subproc workers, CLI, Ray, peers) are always wall clock",
    )
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    sets = {name for name in args.rows.split(",") if name}
    if sets - set(ROW_SETS):
        parser.error(f"--rows: unknown {sorted(sets - set(ROW_SETS))}; row sets: {', '.join(ROW_SETS)}")
    if args.list:
        for ratio in RATIOS:
            print(f"{ratio.rows:12s} {ratio.row!r} / {ratio.base!r}")
        return
    measure(args)


GROUPS: list[tuple[str, ...]] = [
    ("raw envpool", "envpool", "envpool+RandomPolicy"),
    ("CLI gymnasium 64+store", "Python gymnasium 64+store", "CLI envpool+store", "Python envpool+store",
     "CLI dummy+store", "CLI dummy+store, --no-progress", "CLI subproc+store", "CLI subproc+store, --no-progress"),
    ("distributed gymnasium 64+store", "Collector gymnasium 64+store"),
    ("distributed envpool+store", "Collector envpool+store"),
]
"""Rows timed in groups of their own, after the other rows (closed by then), in this order:

* EnvPool rows: an EnvPool pool's threads keep polling while it is idle, which slowed a plain
  SyncVectorEnv loop beside it to half its speed here;
* the entry-point rows: each window is a process of its own, which nothing idle in this one should slow;
* the DistributedCollector rows, last (Ray's processes stay up once started), each with its in-process
  baseline, the EnvPool pair apart from the gymnasium one (a pool idling in one process or worker would
  slow the other side)."""


def measure(args: argparse.Namespace) -> None:
    """Set the wanted rows up group by group, time rounds of windows, close the group; print the tables."""
    n, steps = args.num_envs, args.window_steps
    space = gym.make("CartPole-v1").action_space

    # The TorchRL rows' windows (vcollect, TorchRL): a HalfCheetah step costs ~5x a CartPole one; TorchRL's
    # as in bench_workloads.py (8,000 and 4,000 frames by default), its speed a few thousand frames/s.
    pair_steps = {"CartPole": (steps, steps * 2 // 5), "HalfCheetah": (steps // 5, steps // 5)}
    # Each row: (set-up returning its window function or None when not installed, steps per window).
    # A 64-env vector step costs ~20x less per transition than 8 CartPole envs: more steps, similar time.
    # The entry rows' windows are whole collect calls in fresh processes: a few seconds each by default.
    setups: dict[str, tuple[Callable[[], Window | None], int]] = {
        "raw": (lambda: raw_sync_vector_loop(n), steps),
        "dummy": (lambda: collector_window(make_vector("CartPole-v1", n)), steps),
        "dummy, first reset seeded": (
            lambda: collector_window(make_vector("CartPole-v1", n), every_reset=False), steps
        ),
        "dummy+store": (lambda: store_window(n, steps), steps),
        "dummy+store, first reset seeded": (lambda: store_window(n, steps, every_reset=False), steps),
        "subproc (2 workers)": (
            lambda: collector_window(make_vector("CartPole-v1", n, backend="subproc", num_workers=2)), steps
        ),
        "dummy+torch mlp": (lambda: collector_window(make_vector("CartPole-v1", n), mlp_policy(space)), steps // 4),
        "dummy+torch mlp, first reset seeded": (
            lambda: collector_window(make_vector("CartPole-v1", n), mlp_policy(space), every_reset=False),
            steps // 4,
        ),
        "slow envs sync": (lambda: slow_env_window("sync"), max(500, steps // 20)),
        "slow envs async": (lambda: slow_env_window("async"), max(500, steps // 20)),
        "raw vector entry 64": (lambda: raw_vector_entry_loop(64), steps * 8),
        "vector entry 64": (lambda: vector_entry_collector(64), steps * 8),
        "raw envpool": (lambda: raw_envpool_loop(n), steps),
        "envpool": (lambda: envpool_collector(n), steps),
        # policy rows: the random=True rows' set-ups with RandomPolicy as the policy object
        "dummy+RandomPolicy": (lambda: policy_collector(make_vector("CartPole-v1", n)), steps),
        "subproc (2 workers)+RandomPolicy": (
            lambda: policy_collector(make_vector("CartPole-v1", n, backend="subproc", num_workers=2)), steps
        ),
        "dummy+store+RandomPolicy": (lambda: store_window(n, steps, policy=True), steps),
        "dummy+RandomPolicy, first reset seeded": (
            lambda: policy_collector(make_vector("CartPole-v1", n), every_reset=False), steps
        ),
        "dummy+store+RandomPolicy, first reset seeded": (
            lambda: store_window(n, steps, every_reset=False, policy=True), steps
        ),
        "vector entry 64+RandomPolicy": (lambda: vector_entry_collector(64, policy=True), steps * 8),
        "envpool+RandomPolicy": (lambda: envpool_collector(n, policy=True), steps),
        # entry points
        "CLI gymnasium 64+store": (lambda: entry_window(CLEANUP, "cli", "gymnasium", 64), steps * 100),
        "Python gymnasium 64+store": (lambda: entry_window(CLEANUP, "python", "gymnasium", 64), steps * 100),
        "CLI envpool+store": (lambda: entry_window(CLEANUP, "cli", "envpool", n), steps * 10),
        "Python envpool+store": (lambda: entry_window(CLEANUP, "python", "envpool", n), steps * 10),
        "CLI dummy+store": (lambda: entry_window(CLEANUP, "cli", "dummy", n), steps * 5),
        "CLI dummy+store, --no-progress": (lambda: entry_window(CLEANUP, "cli", "dummy", n, progress=False), steps * 5),
        "CLI subproc+store": (lambda: entry_window(CLEANUP, "cli", "subproc", n), steps * 5),
        "CLI subproc+store, --no-progress": (
            lambda: entry_window(CLEANUP, "cli", "subproc", n, progress=False), steps * 5
        ),
        # DistributedCollector, one worker, and the same collection in this process
        "distributed gymnasium 64+store": (lambda: distributed_window("gymnasium", 64, steps * 16), steps * 16),
        "Collector gymnasium 64+store": (lambda: store_window(64, steps * 16, backend="gymnasium"), steps * 16),
        "distributed envpool+store": (lambda: distributed_window("envpool", n, steps * 2), steps * 2),
        "Collector envpool+store": (lambda: store_window(n, steps * 2, backend="envpool"), steps * 2),
        # the vcollect side of the TorchRL rows, and HalfCheetah's raw loop
        "raw HalfCheetah-v5": (lambda: raw_sync_vector_loop(n, "HalfCheetah-v5"), pair_steps["HalfCheetah"][0]),
        **{p.vcollect_row: (partial(pair_window, p.env, p.backend, n), pair_steps[p.env][0]) for p in PAIRS},
    }
    peers: dict[str, Callable[[], float | None]] = {
        "tianshou dummy": lambda: tianshou_speed(n, steps // 2, "dummy"),
        "tianshou subproc": lambda: tianshou_speed(n, steps // 4, "subproc"),
        "tianshou dummy+dqn mlp": lambda: tianshou_speed(n, steps // 8, "dummy", "dqn"),
        **{p.torchrl_row: partial(torchrl_speed, p.env, p.peer, n, pair_steps[p.env][1]) for p in PAIRS},
    }
    sets = {name for name in args.rows.split(",") if name}
    only = {name for name in re.split(r",(?! )", args.only) if name}  # row names may hold ", " themselves
    ratios = [r for r in RATIOS if r.rows in sets and (not only or (r.row in only and r.base in only))]
    names = [name for name in [*setups, *peers] if any(name in (r.row, r.base) for r in ratios)]
    speeds: dict[str, list[float]] = {name: [] for name in names}
    unavailable: set[str] = set()  # rows whose set-up found their backend (or peer) not installed
    grouped = {name for group in GROUPS for name in group}
    groups = [[name for name in names if name not in grouped]]
    groups += [[name for name in names if name in group] for group in GROUPS]
    for group in groups:
        if not group:
            continue
        with CLEANUP:
            windows: dict[str, tuple[Window, int] | None] = {}
            for name in group:
                if name in setups:
                    setup, size = setups[name]
                    try:
                        made = setup()
                    except Exception:  # reported; the other rows go on (the row reads "failed")
                        print(f"compare.py: setting up row {name!r} failed:", file=sys.stderr)
                        traceback.print_exc()
                        windows[name] = None
                        continue
                    windows[name] = None if made is None else (made, size)
                    if made is None:
                        unavailable.add(name)
            for _ in range(args.rounds):
                for name in group:
                    if name in peers:
                        try:
                            got = peers[name]()
                        except Exception:  # reported; the row reads "failed" unless another round gave a speed
                            print(f"compare.py: peer row {name!r} failed:", file=sys.stderr)
                            traceback.print_exc()
                            continue
                        if got is None:
                            unavailable.add(name)
                    else:
                        entry = windows[name]
                        got = None if entry is None else entry[0](entry[1])
                    if got is not None:
                        speeds[name].append(got)

    title = f"CartPole-v1, {n} envs unless said: steps/s over {args.rounds} rounds of windows"
    speed_rows = [
        (name, f"{max(speeds[name]):,.0f}", f"{float(np.median(speeds[name])):,.0f}") if speeds[name]
        else (name, "not installed" if name in unavailable else "failed (see stderr)", "-")
        for name in names
    ]
    ratio_rows = [
        (
            r.label,
            f"{max(speeds[r.row]) / max(speeds[r.base]):.2f}" if speeds[r.row] and speeds[r.base] else "no result",
            paired_median(speeds[r.row], speeds[r.base]),
            "-" if r.bar is None else f">= {r.bar:g}",
        )
        for r in ratios
    ]
    if args.markdown:
        print_markdown(title, ("what", "best window", "median window"), speed_rows)
        print_markdown("ratios of the best windows", ("ratio", "best windows", "median of paired rounds", "bar"),
                       ratio_rows)
        return
    console = Console(width=130)
    for table_title, columns, rows in (
        (title, ("what", "best window", "median window"), speed_rows),
        ("ratios of the best windows", ("ratio", "best windows", "median of paired rounds", "bar"), ratio_rows),
    ):
        table = Table(title=table_title)
        for i, column in enumerate(columns):
            table.add_column(column, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)


def paired_median(row: Sequence[float], base: Sequence[float]) -> str:
    """The median over rounds of row's window / base's window of the same round (the rows take turns within
    a round, so a pair saw much the same machine); "-" when the rounds do not pair up."""
    if not row or len(row) != len(base):
        return "-"
    return f"{float(np.median(np.asarray(row) / np.asarray(base))):.2f}"


def pair_window(env: str, backend: str, num_envs: int) -> Window:
    """The vcollect side of a TorchRL row: random actions on ``num_envs`` envs, no store; subproc with one
    worker process per env, as TorchRL's ParallelEnv."""
    workers = {"num_workers": num_envs} if backend == "subproc" else {}
    return collector_window(make_vector(GYM_IDS[env], num_envs, backend=backend, **workers))


def policy_collector(envs: Any, every_reset: bool = True) -> Window:
    """collector_window with RandomPolicy (random_policy) as the policy object."""
    return collector_window(envs, random_policy(envs), every_reset=every_reset)


def print_markdown(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A markdown table (first column left-aligned, the others right), titled, as RESULTS.md has them;
    leading spaces of a label (indented rows) become non-breaking ones."""
    print(f"**{title}**\n")
    print("| " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * (len(columns) - 1))
    for row in rows:
        label = row[0]
        stripped = label.lstrip(" ")
        cells = ["&nbsp;" * (len(label) - len(stripped)) + stripped.replace("|", "\\|"), *row[1:]]
        print("| " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
