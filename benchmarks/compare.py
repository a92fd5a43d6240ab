"""Print a table of steps/s: the raw gymnasium loop, vcollect's Collector on each backend, and peers.

The machines are shared and noisy: a neighbour's burst slows whatever runs at that moment, never speeds it
up. So every row is set up once (envs, collector, warm-up), then timed in many short windows, the rows
taking turns window by window, and each row keeps its fastest window: the speed it reaches when the
machine leaves it alone. Ratios are taken between those, all within one run. Usage:

    python benchmarks/compare.py [--window-steps 20000] [--rounds 10] [--num-envs 8] [--only raw,dummy,...]

Tianshou's Collector is measured when `tianshou` is importable or $TIANSHOU_PYTHON names an
interpreter that has it (it is not a vcollect dependency); benchmarks/tianshou_peer.py times it the same
way, in its own process, once per round.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from rich.console import Console
from rich.table import Table

import vcollect

Window = Callable[[int], float]
"""Run one timed window of about n transitions on an already warmed-up setup; return transitions/s."""

CLEANUP = contextlib.ExitStack()
"""Closes the envs, collectors and stores of the rows set up so far (see measure: one group at a time)."""


def raw_sync_vector_loop(num_envs: int) -> Window:
    """gymnasium SyncVectorEnv, SAME_STEP autoreset (every slot a transition), batched random actions."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1")] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    rng = np.random.default_rng(0)
    envs.reset(seed=0)
    CLEANUP.callback(envs.close)

    def window(steps: int) -> float:
        n_batches = max(1, steps // num_envs)
        start = time.perf_counter()
        for _ in range(n_batches):
            envs.step(rng.integers(0, 2, size=num_envs))
        return n_batches * num_envs / (time.perf_counter() - start)

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
        start = time.perf_counter()
        collector.collect(n_step=steps, random=random)
        return steps / (time.perf_counter() - start)

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


def store_window(num_envs: int, shard_steps: int, every_reset: bool = True) -> Window:
    """Collector (dummy backend) writing every episode into an EpisodeStore in a temporary folder; shards
    of ``shard_steps`` (the window size: each window pays for one shard commit, more often than the
    100k-step default)."""
    from vcollect.store import EpisodeStore

    envs = vcollect.make_vector("CartPole-v1", num_envs)
    root = tempfile.mkdtemp(prefix="vcollect-compare-")
    CLEANUP.callback(shutil.rmtree, root, ignore_errors=True)
    store = EpisodeStore.create(
        "bench/cartpole-v0", envs.single_observation_space, envs.single_action_space, root=root,
        shard_steps=shard_steps,
    )
    CLEANUP.callback(store.close)
    return collector_window(envs, store=store, every_reset=every_reset)


def tianshou_speed(num_envs: int, steps: int, backend: str, policy: str = "random", windows: int = 3) -> float | None:
    """Tianshou's Collector on the same work (random actions or a DQN MLP), best of ``windows`` windows
    in a fresh process, or None if not installed."""
    peer = Path(__file__).with_name("tianshou_peer.py")
    args = [str(peer), str(num_envs), str(steps), backend, policy, str(windows)]
    if importlib.util.find_spec("tianshou") is not None:
        return float(subprocess.check_output([sys.executable, *args]).decode().split()[-1])
    other = os.environ.get("TIANSHOU_PYTHON")
    if not other:
        return None
    output = subprocess.check_output([other, *args], stderr=subprocess.DEVNULL)
    return float(output.decode().split()[-1])


# ---------------------------------------------------------------------------------------------------
# issue 4: async collection on uneven envs, gymnasium vector envs, EnvPool, each against its own baseline.


def slow_env_window(collector_cls: str, num_envs: int = 8) -> Window:
    """Collector or AsyncCollector on envs whose steps take 0.2 ms, or 5 ms with probability 0.1, one
    worker process per env (SlowEnv: tests/envs.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.envs import SlowEnv
    from vcollect.async_collector import AsyncCollector

    cls = AsyncCollector if collector_cls == "async" else vcollect.Collector
    envs = vcollect.SubprocVectorEnv([SlowEnv] * num_envs, num_workers=num_envs)
    return collector_window(envs, collector_cls=cls, warm_up=200)


def real_transitions_window(envs: Any, num_envs: int) -> Window:
    """Step an autoresetting (NEXT_STEP) vector env with random actions; count only real transitions.

    A slot whose env finished on the previous step holds its restart, not a transition."""
    rng = np.random.default_rng(0)
    restarting = np.zeros(num_envs, dtype=bool)

    def window(steps: int) -> float:
        nonlocal restarting
        real = 0
        start = time.perf_counter()
        for _ in range(max(1, steps // num_envs)):
            _, _, terminations, truncations, _ = envs.step(rng.integers(0, 2, size=num_envs))
            real += num_envs - int(np.count_nonzero(restarting))
            restarting = terminations | truncations
        return real / (time.perf_counter() - start)

    window(1_000)
    return window


def raw_vector_entry_loop(num_envs: int) -> Window:
    """gym.make_vec's CartPole vector entry point (NEXT_STEP autoreset): real transitions per second, not
    counting the restart rows."""
    envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    CLEANUP.callback(envs.close)
    return real_transitions_window(envs, num_envs)


def vector_entry_collector(num_envs: int) -> Window:
    """The Collector on the same vector env (wrapped in GymnasiumVectorEnv), real transitions per second."""
    return collector_window(gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point"))


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


def envpool_collector(num_envs: int) -> Window | None:
    """The Collector on an EnvPoolVectorEnv with the same pool settings."""
    if importlib.util.find_spec("envpool") is None:
        return None
    return collector_window(vcollect.make_vector("CartPole-v1", num_envs, backend="envpool", seed=0))


RATIOS: list[tuple[str, str, str, float]] = [
    ("Collector dummy / raw SyncVectorEnv (issue 2)", "dummy", "raw", 0.85),
    ("  the same, resets seeded as raw's (first only)", "dummy, first reset seeded", "raw", 0.85),
    ("Collector subproc, 2 workers / raw (issue 2)", "subproc (2 workers)", "raw", 0.6),
    ("Collector dummy / Tianshou dummy, random (issue 2)", "dummy", "tianshou dummy", 4.0),
    ("Collector subproc / Tianshou subproc, random (issue 2)", "subproc (2 workers)", "tianshou subproc", 4.0),
    ("TorchPolicy MLP / Tianshou DQN, same MLP (issue 2)", "dummy+torch mlp", "tianshou dummy+dqn mlp", 4.0),
    ("  the same, resets seeded as Tianshou's (first only)", "dummy+torch mlp, first reset seeded",
     "tianshou dummy+dqn mlp", 4.0),
    ("Collector dummy + store / raw (issue 3)", "dummy+store", "raw", 0.75),
    ("  the same, resets seeded as raw's (first only)", "dummy+store, first reset seeded", "raw", 0.75),
    ("AsyncCollector / Collector, 8 slow envs on 8 workers (issue 4)", "slow envs async", "slow envs sync", 2.0),
    ("Collector / raw, CartPole vector entry point, 64 envs (issue 4)", "vector entry 64", "raw vector entry 64", 0.8),
    ("Collector / raw, EnvPool CartPole, 8 envs (issue 4)", "envpool", "raw envpool", 0.7),
]
"""The issues' ratios: (label, row, baseline row, bar), each taken between the two rows' best windows.

The Collector seeds every reset by default (each stored episode replays alone from its seed); the raw
gymnasium loop and Tianshou seed only once, and gymnasium's reset with a seed makes a new generator
(about 10 us). The indented rows measure the Collector doing the same as the baseline
(``seed_every_reset=False``)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window-steps", type=int, default=20_000, help="transitions per window (8-env rows)")
    parser.add_argument("--rounds", type=int, default=10, help="windows per row, rows taking turns")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--only", default="", help="comma-separated row names: only the ratios between them")
    args = parser.parse_args()
    measure(args)


SEPARATE = ("raw envpool", "envpool")
"""Rows timed in a group of their own: an EnvPool pool's threads keep polling while it is idle, which
slowed a plain SyncVectorEnv loop beside it to half its speed here."""


def measure(args: argparse.Namespace) -> None:
    """Set the wanted rows up group by group, time rounds of windows, close the group; print the tables."""
    n, steps = args.num_envs, args.window_steps
    space = gym.make("CartPole-v1").action_space

    # Each row: (set-up returning its window function or None when not installed, steps per window).
    # A 64-env vector step costs ~20x less per transition than 8 CartPole envs: more steps, similar time.
    setups: dict[str, tuple[Callable[[], Window | None], int]] = {
        "raw": (lambda: raw_sync_vector_loop(n), steps),
        "dummy": (lambda: collector_window(vcollect.make_vector("CartPole-v1", n)), steps),
        "dummy, first reset seeded": (
            lambda: collector_window(vcollect.make_vector("CartPole-v1", n), every_reset=False), steps
        ),
        "dummy+store": (lambda: store_window(n, steps), steps),
        "dummy+store, first reset seeded": (lambda: store_window(n, steps, every_reset=False), steps),
        "subproc (2 workers)": (
            lambda: collector_window(vcollect.make_vector("CartPole-v1", n, backend="subproc", num_workers=2)), steps
        ),
        "dummy+torch mlp": (lambda: collector_window(vcollect.make_vector("CartPole-v1", n), mlp_policy(space)), steps // 4),
        "dummy+torch mlp, first reset seeded": (
            lambda: collector_window(vcollect.make_vector("CartPole-v1", n), mlp_policy(space), every_reset=False),
            steps // 4,
        ),
        "slow envs sync": (lambda: slow_env_window("sync"), max(500, steps // 20)),
        "slow envs async": (lambda: slow_env_window("async"), max(500, steps // 20)),
        "raw vector entry 64": (lambda: raw_vector_entry_loop(64), steps * 8),
        "vector entry 64": (lambda: vector_entry_collector(64), steps * 8),
        "raw envpool": (lambda: raw_envpool_loop(n), steps),
        "envpool": (lambda: envpool_collector(n), steps),
    }
    peers: dict[str, Callable[[], float | None]] = {
        "tianshou dummy": lambda: tianshou_speed(n, steps // 2, "dummy"),
        "tianshou subproc": lambda: tianshou_speed(n, steps // 4, "subproc"),
        "tianshou dummy+dqn mlp": lambda: tianshou_speed(n, steps // 8, "dummy", "dqn"),
    }
    only = {name for name in args.only.split(",") if name}
    ratios = [r for r in RATIOS if not only or (r[1] in only and r[2] in only)]
    names = [name for name in [*setups, *peers] if any(name in (r[1], r[2]) for r in ratios)]
    speeds: dict[str, list[float]] = {name: [] for name in names}
    for group in ([n for n in names if n not in SEPARATE], [n for n in names if n in SEPARATE]):
        with CLEANUP:
            windows: dict[str, tuple[Window, int] | None] = {}
            for name in group:
                if name in setups:
                    setup, size = setups[name]
                    made = setup()
                    windows[name] = None if made is None else (made, size)
            for _ in range(args.rounds):
                for name in group:
                    if name in peers:
                        got = peers[name]()
                    else:
                        entry = windows[name]
                        got = None if entry is None else entry[0](entry[1])
                    if got is not None:
                        speeds[name].append(got)

    console = Console(width=130)
    table = Table(title=f"CartPole-v1, {n} envs unless said: steps/s over {args.rounds} rounds of windows")
    for column in ("what", "best window", "median window"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for name in names:
        got = speeds[name]
        if got:
            table.add_row(name, f"{max(got):,.0f}", f"{float(np.median(got)):,.0f}")
        else:
            table.add_row(name, "not installed", "-")
    console.print(table)
    summary = Table(title="ratios of the best windows")
    for column in ("ratio", "measured", "bar"):
        summary.add_column(column, justify="left" if column == "ratio" else "right")
    for label, row, base, bar in ratios:
        if speeds[row] and speeds[base]:
            summary.add_row(label, f"{max(speeds[row]) / max(speeds[base]):.2f}", f">= {bar:g}")
        else:
            summary.add_row(label, "not installed", f">= {bar:g}")
    console.print(summary)


if __name__ == "__main__":
    main()
