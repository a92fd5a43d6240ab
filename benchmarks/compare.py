"""Print a table of steps/s: the raw gymnasium loop, vcollect's Collector on each backend, and peers.

The machines are shared and noisy, so every ratio is measured in pairs: in each round the baseline
runs and then the row right after it, and the table reports the median of the rounds' ratios (with
their range). Usage:

    python benchmarks/compare.py [--steps 200000] [--num-envs 8] [--rounds 5] [--only raw,dummy,...]

Tianshou's Collector is measured when `tianshou` is importable or $TIANSHOU_PYTHON names an
interpreter that has it (it is not a vcollect dependency).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
from rich.console import Console
from rich.table import Table

import vcollect


def raw_sync_vector_loop(num_envs: int, steps: int) -> float:
    """gymnasium SyncVectorEnv, SAME_STEP autoreset (every slot a transition), batched random actions."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1")] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    rng = np.random.default_rng(0)
    envs.reset(seed=0)
    n_batches = steps // num_envs
    start = time.perf_counter()
    for _ in range(n_batches):
        envs.step(rng.integers(0, 2, size=num_envs))
    elapsed = time.perf_counter() - start
    envs.close()
    return n_batches * num_envs / elapsed


def collector_speed(envs: vcollect.VectorEnv, steps: int, policy: object = None, store: object = None) -> float:
    """Steps/s of one ``collect(n_step=steps)`` call after a short warm-up."""
    with vcollect.Collector(policy, envs, store=store, seed=0) as collector:  # type: ignore[arg-type]
        collector.collect(n_step=1_000, reset_before_collect=True, random=policy is None)
        start = time.perf_counter()
        collector.collect(n_step=steps, random=policy is None)
        elapsed = time.perf_counter() - start
    if store is not None:
        store.close()  # type: ignore[attr-defined]
    return steps / elapsed


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


def store_speed(num_envs: int, steps: int) -> float:
    """Collector (dummy backend) writing every episode into an EpisodeStore in a temporary folder."""
    from vcollect.store import EpisodeStore

    envs = vcollect.make_vector("CartPole-v1", num_envs)
    with tempfile.TemporaryDirectory() as root:
        store = EpisodeStore.create(
            "bench/cartpole-v0", envs.single_observation_space, envs.single_action_space, root=root
        )
        return collector_speed(envs, steps, store=store)


def tianshou_speed(num_envs: int, steps: int, backend: str, policy: str = "random") -> float | None:
    """Tianshou's Collector on the same work (random actions or a DQN MLP), or None if not installed."""
    peer = Path(__file__).with_name("tianshou_peer.py")
    if importlib.util.find_spec("tianshou") is not None:
        return float(subprocess.check_output([sys.executable, str(peer), str(num_envs), str(steps), backend, policy]))
    other = os.environ.get("TIANSHOU_PYTHON")
    if not other:
        return None
    output = subprocess.check_output([other, str(peer), str(num_envs), str(steps), backend, policy],
                                     stderr=subprocess.DEVNULL)
    return float(output.decode().split()[-1])


# ---------------------------------------------------------------------------------------------------
# issue 4: async collection on uneven envs, gymnasium vector envs, EnvPool, each against its own baseline.


def slow_env_speed(collector_cls: str, steps: int, num_envs: int = 8) -> float:
    """Collector or AsyncCollector on envs whose steps take 0.2 ms, or 5 ms with probability 0.1, one
    worker process per env (SlowEnv: tests/envs.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.envs import SlowEnv
    from vcollect.async_collector import AsyncCollector

    cls = AsyncCollector if collector_cls == "async" else vcollect.Collector
    envs = vcollect.SubprocVectorEnv([SlowEnv] * num_envs, num_workers=num_envs)
    with cls(None, envs, seed=0) as collector:
        collector.collect(n_step=200, reset_before_collect=True, random=True)
        return collector.collect(n_step=steps, random=True).collect_speed


def real_transitions_per_second(envs: object, num_envs: int, steps: int) -> float:
    """Step an autoresetting (NEXT_STEP) vector env with random actions; count only real transitions.

    A slot whose env finished on the previous step holds its restart, not a transition. Closes envs.
    """
    rng = np.random.default_rng(0)
    restarting = np.zeros(num_envs, dtype=bool)
    real = 0
    start = time.perf_counter()
    for _ in range(steps // num_envs):
        _, _, terminations, truncations, _ = envs.step(rng.integers(0, 2, size=num_envs))  # type: ignore[attr-defined]
        real += num_envs - int(np.count_nonzero(restarting))
        restarting = terminations | truncations
    elapsed = time.perf_counter() - start
    envs.close()  # type: ignore[attr-defined]
    return real / elapsed


def raw_vector_entry_loop(num_envs: int, steps: int) -> float:
    """gym.make_vec's CartPole vector entry point (NEXT_STEP autoreset): real transitions per second, not
    counting the restart rows."""
    envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    return real_transitions_per_second(envs, num_envs, steps)


def vector_entry_collector_speed(num_envs: int, steps: int) -> float:
    """The Collector on the same vector env (wrapped in GymnasiumVectorEnv), real transitions per second."""
    return collector_speed(gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="vector_entry_point"), steps)


def raw_envpool_loop(num_envs: int, steps: int) -> float | None:
    """EnvPool's own sync loop (its autoreset restarts finished envs): real transitions per second."""
    try:
        import envpool
    except ImportError:
        return None
    envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, seed=0)
    envs.reset()
    return real_transitions_per_second(envs, num_envs, steps)


def envpool_collector_speed(num_envs: int, steps: int) -> float | None:
    """The Collector on an EnvPoolVectorEnv with the same pool settings."""
    if importlib.util.find_spec("envpool") is None:
        return None
    return collector_speed(vcollect.make_vector("CartPole-v1", num_envs, backend="envpool", seed=0), steps)


RATIOS: list[tuple[str, str, str, float]] = [
    ("Collector dummy / raw SyncVectorEnv (issue 2)", "dummy", "raw", 0.85),
    ("Collector subproc, 2 workers / raw (issue 2)", "subproc (2 workers)", "raw", 0.6),
    ("Collector dummy / Tianshou dummy, random (issue 2)", "dummy", "tianshou dummy", 4.0),
    ("Collector subproc / Tianshou subproc, random (issue 2)", "subproc (2 workers)", "tianshou subproc", 4.0),
    ("TorchPolicy MLP / Tianshou DQN, same MLP (issue 2)", "dummy+torch mlp", "tianshou dummy+dqn mlp", 4.0),
    ("Collector dummy + store / raw (issue 3)", "dummy+store", "raw", 0.75),
    ("AsyncCollector / Collector, 8 slow envs on 8 workers (issue 4)", "slow envs async", "slow envs sync", 2.0),
    ("Collector / raw, CartPole vector entry point, 64 envs (issue 4)", "vector entry 64", "raw vector entry 64", 0.8),
    ("Collector / raw, EnvPool CartPole, 8 envs (issue 4)", "envpool", "raw envpool", 0.7),
]
"""The issues' ratios: (label, row, baseline row, bar). Each round measures the baseline and then the row
right after it, so that both see the same load; the ratio reported is the median of the rounds'."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--only", default="", help="comma-separated row names: only the ratios between them")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of paired measurements")
    args = parser.parse_args()
    n, steps = args.num_envs, args.steps
    space = gym.make("CartPole-v1").action_space

    rows: dict[str, Callable[[], float | None]] = {
        "raw": lambda: raw_sync_vector_loop(n, steps),
        "dummy": lambda: collector_speed(vcollect.make_vector("CartPole-v1", n), steps),
        "dummy+store": lambda: store_speed(n, steps),
        "subproc (2 workers)": lambda: collector_speed(
            vcollect.make_vector("CartPole-v1", n, backend="subproc", num_workers=2), steps
        ),
        "dummy+torch mlp": lambda: collector_speed(vcollect.make_vector("CartPole-v1", n), steps // 4, mlp_policy(space)),
        "tianshou dummy": lambda: tianshou_speed(n, steps // 4, "dummy"),
        "tianshou subproc": lambda: tianshou_speed(n, steps // 4, "subproc"),
        "tianshou dummy+dqn mlp": lambda: tianshou_speed(n, steps // 8, "dummy", "dqn"),
        "slow envs sync": lambda: slow_env_speed("sync", max(1_000, steps // 40)),
        "slow envs async": lambda: slow_env_speed("async", max(1_000, steps // 40)),
        # a 64-env vector step is ~20x cheaper per transition than 8 CartPole envs: more steps, same duration
        "raw vector entry 64": lambda: raw_vector_entry_loop(64, steps * 4),
        "vector entry 64": lambda: vector_entry_collector_speed(64, steps * 4),
        "raw envpool": lambda: raw_envpool_loop(n, steps),
        "envpool": lambda: envpool_collector_speed(n, steps),
    }
    only = {name for name in args.only.split(",") if name}
    ratios = [r for r in RATIOS if not only or (r[1] in only and r[2] in only)]
    speeds: dict[str, list[float]] = {}
    paired: dict[str, list[float]] = {label: [] for label, *_ in ratios}
    for _ in range(args.rounds):
        for label, row, base, _bar in ratios:
            base_speed = rows[base]()
            row_speed = rows[row]() if base_speed is not None else None
            for name, speed in ((base, base_speed), (row, row_speed)):
                if speed is not None:
                    speeds.setdefault(name, []).append(speed)
            if base_speed and row_speed:
                paired[label].append(row_speed / base_speed)

    table = Table(title=f"CartPole-v1, {n} envs unless said (steps/s over {args.rounds} rounds)")
    table.add_column("what")
    table.add_column("best steps/s", justify="right")
    table.add_column("median steps/s", justify="right")
    for name in rows:
        got = speeds.get(name)
        if got:
            table.add_row(name, f"{max(got):,.0f}", f"{float(np.median(got)):,.0f}")
        elif any(name in (r[1], r[2]) for r in ratios):
            table.add_row(name, "not installed", "-")
    console = Console(width=130)
    console.print(table)
    summary = Table(title="ratios: each round's row over the baseline measured just before it")
    for column in ("ratio", "median", "min", "max", "bar"):
        summary.add_column(column, justify="left" if column == "ratio" else "right")
    for label, _row, _base, bar in ratios:
        got = paired[label]
        if got:
            summary.add_row(label, f"{float(np.median(got)):.2f}", f"{min(got):.2f}", f"{max(got):.2f}", f">= {bar:g}")
        else:
            summary.add_row(label, "not installed", "-", "-", f">= {bar:g}")
    console.print(summary)


if __name__ == "__main__":
    main()
