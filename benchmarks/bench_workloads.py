"""Steps/s on real workloads: MuJoCo HalfCheetah-v5 and Atari Pong (84x84, 4-frame stacks), 8 envs, store on.

Each vcollect row is timed against the raw vector-env loop it runs on (the in-process rows against
gymnasium's SyncVectorEnv, the subprocess rows against gymnasium's AsyncVectorEnv with shared memory and
the same number of processes (one per env), EnvPool against its own loop), with the same method as compare.py: every
row is set up once, then timed in short windows, the rows taking turns, and each keeps its fastest window.
Ratios are only meaningful within one run (the machines are shared). TorchRL's Collector is the peer when
``torchrl`` is importable or $TORCHRL_PYTHON names an interpreter that has it (benchmarks/torchrl_peer.py,
in its own process). Usage:

    python benchmarks/bench_workloads.py [--rows cheetah,pong,torchrl] [--rounds 5] [--markdown]

(``--rows envpool``: only the EnvPool Pong rows, which ``pong`` includes. ``--cpu`` also prints steps per
second of this process's CPU time, EnvPool's threads included: steadier than wall time on a loaded machine,
and meaningful for the in-process rows only, since worker processes' time is not counted.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torchrl_peer import GYM_IDS, PAIRS, Pair, torchrl_speed

import vcollect
from vcollect.collecting.parts import DEFAULT_BUFFER_ROWS
from vcollect.envs import SubprocVectorEnv, make_vector
from vcollect.policies import TorchPolicy
from vcollect.store import EpisodeStore

Window = Callable[[int], float]
NUM_ENVS = 8
CLEANUP = contextlib.ExitStack()


def make_pong() -> gym.Env:
    """ALE Pong as agents see it: 84x84 grayscale, frame skip 4, the last 4 frames stacked."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env), 4)


def make_cheetah() -> gym.Env:
    return gym.make("HalfCheetah-v5")


def raw_window(envs: gym.vector.VectorEnv) -> Window:
    """The raw loop: batched random actions into a gymnasium vector env (SAME_STEP autoreset, so every
    slot of every step is a transition, as in the Collector)."""
    CLEANUP.callback(envs.close)
    envs.reset(seed=0)
    envs.action_space.seed(0)

    def window(steps: int) -> float:
        n = max(1, steps // envs.num_envs)
        start = time.perf_counter()
        for _ in range(n):
            envs.step(envs.action_space.sample())
        return n * envs.num_envs / (time.perf_counter() - start)

    window(NUM_ENVS * 8)
    return window


def raw_envpool_window(task: str, *, keep_frames: bool = False) -> Window:
    """EnvPool's own loop: batched random actions, results dropped; ``keep_frames``: each step's frames
    also copied into an array of as many rows as the Collector's ring, touched beforehand (a user keeping
    the frames in memory they have written before)."""
    import envpool

    envs = envpool.make_gymnasium(task, num_envs=NUM_ENVS, seed=0)
    CLEANUP.callback(envs.close)
    obs, _ = envs.reset()
    n_actions = envs.action_space.n
    rng = np.random.default_rng(0)
    kept = np.ones((DEFAULT_BUFFER_ROWS // NUM_ENVS, *obs.shape), obs.dtype) if keep_frames else None
    at = [0]

    def window(steps: int) -> float:
        n = max(1, steps // NUM_ENVS)
        i = at[0]
        start = time.perf_counter()
        for _ in range(n):
            frames = envs.step(rng.integers(0, n_actions, NUM_ENVS))[0]
            if kept is not None:
                kept[i] = frames
                i = (i + 1) % len(kept)
        at[0] = i
        return n * NUM_ENVS / (time.perf_counter() - start)

    window(NUM_ENVS * 8)
    return window


def collector_window(envs: Any, policy: Any, *, compression: str = "auto", shard_steps: int = 4_000,
                     background: bool = False, warm_ring: bool = False) -> Window:
    """``collect(n_step=n)`` into an EpisodeStore (a shard commit every ``shard_steps`` steps; the default
    compression: Zstandard for the frames, the rest raw). ``warm_ring``: timed once every ring row has
    been written (see timed_collector)."""
    root = tempfile.mkdtemp(prefix="vcollect-workloads-")
    CLEANUP.callback(shutil.rmtree, root, ignore_errors=True)
    store = EpisodeStore.create("bench/workload-v0", envs.single_observation_space, envs.single_action_space,
                                root=root, compression=compression, shard_steps=shard_steps,
                                background_commits=background)
    CLEANUP.callback(store.close)
    return timed_collector(vcollect.Collector(policy, envs, store=store, seed=0), random=policy is None,
                           warm_ring=warm_ring)


def timed_collector(collector: vcollect.Collector, random: bool, *, warm_ring: bool = False) -> Window:
    """A window function timing ``collect(n_step=n)`` on ``collector`` (warmed up, closed at the end).

    ``warm_ring``: first collect as many steps as the rings have rows, so that the windows write into
    memory written before, as a long collection does after its first ring's worth of steps. Otherwise the
    windows are the first pass over a new ring (20,000 rows: 564 MB of Pong frames), whose every page the
    kernel faults in (zeroes) on its first write, inside the timed loop."""
    CLEANUP.callback(collector.close)
    collector.collect(n_step=NUM_ENVS * 8, reset_before_collect=True, random=random)
    if warm_ring:
        collector.collect(n_step=collector.buffer.capacity * NUM_ENVS, random=random)

    def window(steps: int) -> float:
        start = time.perf_counter()
        collector.collect(n_step=steps, random=random)
        return steps / (time.perf_counter() - start)

    return window


def gaussian_policy(envs: Any) -> TorchPolicy:
    """A 17-64-64-6 Gaussian MLP (mean and a learnt log std), sampled."""

    class Gaussian(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(17, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                            torch.nn.Tanh(), torch.nn.Linear(64, 6))
            self.log_std = torch.nn.Parameter(torch.full((6,), -0.5))

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            mean = self.body(obs)
            return mean, self.log_std.expand_as(mean)

    torch.manual_seed(0)
    return TorchPolicy(Gaussian(), envs.single_action_space, deterministic=False)


def cnn_policy(envs: Any) -> TorchPolicy:
    """A small Nature-style CNN on (4, 84, 84) uint8 frames, sampled from its logits."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(4, 16, 8, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 4, stride=2), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(32 * 9 * 9, int(envs.single_action_space.n)),
    )
    return TorchPolicy(net, envs.single_action_space, deterministic=False)


def rows(which: set[str]) -> dict[str, tuple[Callable[[], Window], int]]:
    """name -> (set-up, steps per window)."""
    found: dict[str, tuple[Callable[[], Window], int]] = {}
    if "cheetah" in which:
        sync = lambda: gym.vector.SyncVectorEnv([make_cheetah] * NUM_ENVS,  # noqa: E731
                                                autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        found |= {
            "raw HalfCheetah SyncVectorEnv": (lambda: raw_window(sync()), 4_000),
            "HalfCheetah dummy+store random": (
                lambda: collector_window(make_vector("HalfCheetah-v5", NUM_ENVS), None), 4_000),
            "HalfCheetah dummy+store gaussian": (
                lambda: (lambda e: collector_window(e, gaussian_policy(e)))(make_vector("HalfCheetah-v5", NUM_ENVS)),
                4_000),
            "raw HalfCheetah AsyncVectorEnv": (lambda: raw_window(gym.vector.AsyncVectorEnv(
                [make_cheetah] * NUM_ENVS, shared_memory=True, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)),
                4_000),
            "HalfCheetah subproc+store random": (
                lambda: collector_window(make_vector("HalfCheetah-v5", NUM_ENVS, backend="subproc", num_workers=NUM_ENVS), None), 4_000),
        }
    if "pong" in which:
        found |= {
            "raw Pong AsyncVectorEnv": (lambda: raw_window(gym.vector.AsyncVectorEnv(
                [make_pong] * NUM_ENVS, shared_memory=True, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)),
                800),
            "Pong subproc+zstd store random": (
                lambda: collector_window(SubprocVectorEnv([make_pong] * NUM_ENVS, num_workers=NUM_ENVS), None), 800),
            "Pong subproc+zstd store, background commits": (
                lambda: collector_window(SubprocVectorEnv([make_pong] * NUM_ENVS, num_workers=NUM_ENVS), None,
                                         background=True), 800),
            "Pong subproc, no store": (
                lambda: collector_nostore(SubprocVectorEnv([make_pong] * NUM_ENVS, num_workers=NUM_ENVS)), 800),
            "Pong subproc+zstd store cnn": (
                lambda: (lambda e: collector_window(e, cnn_policy(e)))(
                    SubprocVectorEnv([make_pong] * NUM_ENVS, num_workers=NUM_ENVS)), 800),
        }
    if ("pong" in which or "envpool" in which) and importlib.util.find_spec("envpool"):
        envpool_pong = lambda: make_vector("Pong-v5", NUM_ENVS, "envpool")  # noqa: E731
        found |= {
            "raw Pong EnvPool": (lambda: raw_envpool_window("Pong-v5"), 1_600),
            "raw Pong EnvPool, frames kept": (lambda: raw_envpool_window("Pong-v5", keep_frames=True), 1_600),
            "Pong envpool+zstd store random": (lambda: collector_window(envpool_pong(), None), 1_600),
            "Pong envpool+zstd store random, ring warm": (
                lambda: collector_window(envpool_pong(), None, warm_ring=True), 1_600),
        }
    return found


RATIOS = [
    ("HalfCheetah dummy+store random", "raw HalfCheetah SyncVectorEnv", 0.9),
    ("HalfCheetah dummy+store gaussian", "raw HalfCheetah SyncVectorEnv", None),
    ("HalfCheetah subproc+store random", "raw HalfCheetah AsyncVectorEnv", 0.9),
    ("Pong subproc+zstd store random", "raw Pong AsyncVectorEnv", 0.85),
    ("Pong subproc+zstd store random", "Pong subproc, no store", 0.95),
    ("Pong subproc+zstd store, background commits", "Pong subproc, no store", 0.95),
    ("Pong subproc+zstd store cnn", "raw Pong AsyncVectorEnv", None),
    ("Pong envpool+zstd store random", "raw Pong EnvPool", 0.85),
    ("Pong envpool+zstd store random, ring warm", "raw Pong EnvPool", 0.85),
    ("raw Pong EnvPool, frames kept", "raw Pong EnvPool", None),
    *((pair.vcollect_row, pair.torchrl_row, pair.bar) for pair in PAIRS),
]


def peer_rows() -> dict[str, tuple[Callable[[], Window], int]]:
    """vcollect without a store on the work TorchRL's rows do (random actions, 8 envs; subproc: one
    worker process per env, as TorchRL's ParallelEnv)."""

    def setup(pair: Pair) -> Window:
        workers = {"num_workers": NUM_ENVS} if pair.backend == "subproc" else {}
        return collector_nostore(make_vector(GYM_IDS[pair.env], NUM_ENVS, backend=pair.backend, **workers))

    return {pair.vcollect_row: (partial(setup, pair), 20_000 if pair.env == "CartPole" else 4_000)
            for pair in PAIRS}


def collector_nostore(envs: Any) -> Window:
    return timed_collector(vcollect.Collector(None, envs, seed=0), random=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="cheetah,pong,torchrl")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="also steps per CPU-second of this process")
    args = parser.parse_args()
    which = set(args.rows.split(","))
    torch.set_num_threads(1)  # the policies' forward passes; TorchPolicy(num_threads=1) does this per call too
    setups = rows(which) | (peer_rows() if "torchrl" in which else {})
    windows = {}
    for name, (setup, steps) in setups.items():
        windows[name] = (setup(), steps)
    best = dict.fromkeys(windows, 0.0)
    best_cpu = dict.fromkeys(windows, 0.0)
    for _ in range(args.rounds):
        for name, (window, steps) in windows.items():
            cpu = time.process_time()
            best[name] = max(best[name], window(steps))
            best_cpu[name] = max(best_cpu[name], steps / max(time.process_time() - cpu, 1e-9))
    CLEANUP.close()
    if "torchrl" in which:
        for pair in PAIRS:
            try:
                speed = torchrl_speed(pair.env, pair.peer, NUM_ENVS, 4_000 if pair.env == "HalfCheetah" else 8_000)
            except (RuntimeError, subprocess.TimeoutExpired) as failed:
                print(f"torchrl peer failed: {failed}", file=sys.stderr)
                continue
            if speed is not None:
                best[pair.torchrl_row] = speed
    print_table(best, args.markdown)
    if args.cpu:
        print("\nper CPU-second of this process (in-process rows only):")
        print_table(best_cpu, args.markdown)


def print_table(best: dict[str, float], markdown: bool) -> None:
    sep = "|" if markdown else " "
    print(f"{sep} row {sep} steps/s {sep}")
    if markdown:
        print("|---|---:|")
    for name, speed in best.items():
        print(f"{sep} {name} {sep} {speed:,.0f} {sep}")
    print()
    print(f"{sep} ratio {sep} value {sep} goal {sep}")
    if markdown:
        print("|---|---:|---:|")
    for row, base, goal in RATIOS:
        if row in best and base in best and best[base] > 0:
            goal_text = "-" if goal is None else f">= {goal:g}"
            print(f"{sep} {row} / {base} {sep} {best[row] / best[base]:.2f} {sep} {goal_text} {sep}")


if __name__ == "__main__":
    main()
