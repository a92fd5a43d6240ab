"""``vcollect bench``: steps/s of the raw gymnasium loop against the Collector on each backend."""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import gymnasium as gym
from rich.console import Console
from rich.table import Table

from vcollect.cli.checks import check_count, check_seed
from vcollect.cli.exits import EXIT_OK, CommandParser, UsageError
from vcollect.cli.output import cell
from vcollect.cli.sources import available_backends, make_envs, qualified_env_id, resolve_env


def add_bench_parser(commands: argparse._SubParsersAction[CommandParser], *, backends: list[str]) -> None:
    """Add the ``bench`` command to ``commands``."""
    bench = commands.add_parser(
        "bench", help="steps/s of the raw gymnasium loop and of the Collector on each backend",
        description="Steps/s with random actions: the raw gymnasium SyncVectorEnv loop (row 'raw') and the "
        "Collector on each backend, with the ratio to the raw loop.",
    )
    bench.add_argument("env_id", metavar="ENV_ID", help="a registered gymnasium env id, or module:EnvId")
    bench.add_argument("--num-envs", type=int, default=8, metavar="N", help="number of env copies (default: 8)")
    bench.add_argument(
        "--backends", default="dummy,subproc",
        help=f"comma-separated backends to measure, from: {', '.join(backends)} (default: dummy,subproc)",
    )
    bench.add_argument("--steps", type=int, default=20_000, metavar="N", help="steps per measurement (default: 20000)")
    bench.add_argument("--rounds", type=int, default=1, metavar="R", help="interleaved rounds; each row keeps its best")
    bench.add_argument("--seed", type=int, default=0)
    bench.set_defaults(handler=run_bench)


def raw_loop_speed(env_factory: Callable[[], gym.Env], num_envs: int, steps: int, seed: int) -> float:
    """Steps/s of a plain gymnasium SyncVectorEnv loop (same-step autoreset, batched random actions)."""
    envs = gym.vector.SyncVectorEnv([env_factory] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    try:
        envs.action_space.seed(seed)
        envs.reset(seed=seed)
        batches = max(1, steps // num_envs)
        for _ in range(min(batches, 10)):  # warm-up
            envs.step(envs.action_space.sample())
        start = time.perf_counter()
        for _ in range(batches):
            envs.step(envs.action_space.sample())
        elapsed = time.perf_counter() - start
    finally:
        envs.close()
    return batches * num_envs / elapsed


def collector_speed(env_id: str, num_envs: int, backend: str, steps: int, seed: int) -> float:
    """Steps/s of ``Collector.collect(n_step=steps, random=True)`` on ``backend``, after a warm-up call."""
    from vcollect.collector import Collector

    envs = make_envs(env_id, num_envs, backend)
    with Collector(None, envs, seed=seed) as collector:
        collector.collect(n_step=min(steps, 1_000), reset_before_collect=True, random=True)
        stats = collector.collect(n_step=steps, random=True)
    return stats.collect_speed


def run_bench(args: argparse.Namespace, console: Console) -> int:
    """``vcollect bench ENV_ID``: the raw gymnasium loop against the Collector on each backend."""
    available = available_backends()
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    unknown = [name for name in backends if name not in available]
    if unknown or not backends:
        raise UsageError(f"--backends: unknown {unknown or args.backends!r}; available: {', '.join(available)}")
    for name, value in (("--num-envs", args.num_envs), ("--steps", args.steps), ("--rounds", args.rounds)):
        check_count(name, value)
    check_seed("--seed", args.seed)
    args.env_id = qualified_env_id(args.env_id)  # ALE/Pong-v5 -> ale_py:ALE/Pong-v5
    env_factory, _ = resolve_env(args.env_id)
    assert env_factory is not None  # None only for an EnvPool task id with backend="envpool"
    measures: dict[str, Callable[[], float]] = {
        "raw": lambda: raw_loop_speed(env_factory, args.num_envs, args.steps, args.seed)
    }
    for name in backends:
        measures[name] = functools.partial(collector_speed, args.env_id, args.num_envs, name, args.steps, args.seed)
    best: dict[str, float] = {}
    for _ in range(args.rounds):  # interleaved, so a noisy neighbour slows every row alike
        for name, measure in measures.items():
            try:
                speed = measure()
            except (ImportError, gym.error.Error) as exc:  # a missing extra or env dependency
                raise UsageError(f"cannot run {args.env_id} for the {name!r} row: {exc}") from None
            best[name] = max(best.get(name, 0.0), speed)
    table = Table(
        title=f"{args.env_id}, {args.num_envs} envs, random actions, {args.steps:,} steps (best of {args.rounds})"
    )
    table.add_column("loop")
    table.add_column("steps/s", justify="right")
    table.add_column("x raw", justify="right")
    raw = best["raw"]
    for name, speed in best.items():
        label = name if name == "raw" else f"Collector ({name})"
        table.add_row(cell(label), f"{speed:,.0f}", f"{speed / raw:.2f}")
    console.print(table)
    return EXIT_OK
