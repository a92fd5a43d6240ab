"""TorchPolicy at torch's default thread count against one thread: ``python benchmarks/torch_threads.py``.

Collects with a TorchPolicy on 8 envs, dummy and subprocess backends, for two networks:
a 4-64-64-2 MLP on CartPole-v1 and a small CNN (Nature-DQN-like, 84x84 frames) on a fake image env.
Three settings, interleaved within each repeat (best of ``--repeats`` is printed):

- ``default``: ``TorchPolicy(num_threads=None)`` with torch at its default (one thread per core);
  what TorchPolicy did before ``num_threads`` existed.
- ``scoped 1``: ``TorchPolicy()`` (``num_threads=1``): one thread set around each call, then set back.
- ``global 1``: ``torch.set_num_threads(1)`` for the whole program, ``num_threads=None``; the ideal
  the scoped setting should match (the difference is the set/restore cost).

``--calls`` also times the policy call alone (batch of 8) in the three settings.

``--worker-start N``: instead, time ``SubprocVectorEnv`` start-up (8 CartPole-v1 envs from
``functools.partial(gym.make, ...)``, 2 workers; constructor call, in a fresh process each time, this
script, which imports torch, as the main module) with ``import_main=True`` (what multiprocessing does:
every worker runs this script again) and the default (workers skip it: the factories do not need it),
alternating, N times each.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

import vcollect
from vcollect.policies import TorchPolicy

NUM_ENVS = 8


class FakeFrames(gym.Env[np.ndarray, np.int64]):
    """84x84 uint8 frames (one channel) from a small precomputed pool; 4 actions; 200-step episodes."""

    observation_space = spaces.Box(0, 255, (1, 84, 84), np.uint8)
    action_space = spaces.Discrete(4)

    def __init__(self) -> None:
        self._frames = np.random.default_rng(0).integers(0, 256, (16, 1, 84, 84), dtype=np.uint8)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._frames[0], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._frames[self._t % 16], 1.0, False, self._t >= 200, {}


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 2),
    )


def cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 8, stride=4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 4, stride=2),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 9 * 9, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 4),
    )


SETTINGS = ("default", "scoped 1", "global 1")


def apply(setting: str, policy: TorchPolicy, default_threads: int) -> None:
    """Set torch's global thread count and the policy's ``num_threads`` for ``setting``."""
    torch.set_num_threads(1 if setting == "global 1" else default_threads)
    policy.num_threads = 1 if setting == "scoped 1" else None


def time_collect(collector: vcollect.Collector, steps: int) -> float:
    start = time.perf_counter()
    collector.collect(n_step=steps)
    return steps / (time.perf_counter() - start)


def bench_collect(
    network: str, backend: str, steps: int, repeats: int, default_threads: int
) -> dict[str, float]:
    env: Any = "CartPole-v1" if network == "mlp" else FakeFrames
    kwargs = {"num_workers": 2} if backend == "subproc" else {}
    envs = vcollect.make_vector(env, NUM_ENVS, backend=backend, **kwargs)
    module = mlp() if network == "mlp" else cnn()
    policy = TorchPolicy(module, envs.single_action_space)
    best = dict.fromkeys(SETTINGS, 0.0)
    with vcollect.Collector(policy, envs, seed=0) as collector:
        collector.reset()
        for _ in range(repeats):
            for setting in SETTINGS:
                apply(setting, policy, default_threads)
                collector.collect(n_step=NUM_ENVS * 10)  # warm-up: first calls, thread pool start
                best[setting] = max(best[setting], time_collect(collector, steps))
    torch.set_num_threads(default_threads)
    return best


def bench_calls(network: str, calls: int, repeats: int, default_threads: int) -> dict[str, float]:
    """Microseconds per policy call (batch of NUM_ENVS), best of repeats."""
    module = mlp() if network == "mlp" else cnn()
    if network == "mlp":
        obs, action_space = np.zeros((NUM_ENVS, 4), np.float32), spaces.Discrete(2)
    else:
        obs, action_space = np.zeros((NUM_ENVS, 1, 84, 84), np.uint8), spaces.Discrete(4)
    policy = TorchPolicy(module, action_space)
    best = dict.fromkeys(SETTINGS, float("inf"))
    for _ in range(repeats):
        for setting in SETTINGS:
            apply(setting, policy, default_threads)
            for _ in range(20):
                policy(obs)
            start = time.perf_counter()
            for _ in range(calls):
                policy(obs)
            best[setting] = min(best[setting], (time.perf_counter() - start) / calls * 1e6)
    torch.set_num_threads(default_threads)
    return best


def set_restore_cost(calls: int, repeats: int, default_threads: int) -> float:
    """Microseconds for what TorchPolicy adds to a call: get, set to 1, set back (best of repeats)."""
    torch.set_num_threads(default_threads)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            previous = torch.get_num_threads()
            torch.set_num_threads(1)
            torch.set_num_threads(previous)
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def start_once(import_main: bool | None) -> float:
    """Seconds to construct a SubprocVectorEnv (forkserver start included: a fresh process)."""
    from vcollect.envs import SubprocVectorEnv

    factory = functools.partial(gym.make, "CartPole-v1")
    start = time.perf_counter()
    envs = SubprocVectorEnv([factory] * NUM_ENVS, num_workers=2, import_main=import_main)
    elapsed = time.perf_counter() - start
    envs.close()
    return elapsed


def bench_worker_start(times: int) -> None:
    results: dict[str, list[float]] = {"True": [], "None": []}
    for _ in range(times):
        for mode in results:
            out = subprocess.run(
                [sys.executable, __file__, "--start-once", mode], capture_output=True, text=True, check=True
            )
            results[mode].append(float(out.stdout.split()[-1]))
    print("| workers import the main script | SubprocVectorEnv start-up, best (s) | median (s) |")
    print("|---|---:|---:|")
    for mode, label in (("True", "yes (import_main=True)"), ("None", "no (default: not needed)")):
        values = sorted(results[mode])
        print(f"| {label} | {values[0]:.2f} | {values[len(values) // 2]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mlp-steps", type=int, default=40_000)
    parser.add_argument("--cnn-steps", type=int, default=4_000)
    parser.add_argument("--calls", type=int, default=5_000, help="policy calls per timing (0: skip)")
    parser.add_argument(
        "--worker-start", type=int, default=0, metavar="N", help="time worker start-up instead"
    )
    parser.add_argument("--start-once", choices=["True", "None"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.start_once:
        print(start_once(True if args.start_once == "True" else None))
        return
    if args.worker_start:
        bench_worker_start(args.worker_start)
        return
    default_threads = torch.get_num_threads()
    print(
        f"torch {torch.__version__}, default intra-op threads {default_threads}, {NUM_ENVS} envs, "
        f"best of {args.repeats} (settings interleaved)\n"
    )
    print(
        "| network | backend | default (steps/s) | scoped 1 (steps/s) | global 1 (steps/s) | scoped 1 / default |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for network, steps in (("mlp", args.mlp_steps), ("cnn", args.cnn_steps)):
        for backend in ("dummy", "subproc"):
            r = bench_collect(network, backend, steps, args.repeats, default_threads)
            print(
                f"| {network} | {backend} | {r['default']:,.0f} | {r['scoped 1']:,.0f} | {r['global 1']:,.0f} "
                f"| {r['scoped 1'] / r['default']:.2f}x |",
                flush=True,
            )
    if args.calls:
        print("\n| network | policy call, default (µs) | scoped 1 (µs) | global 1 (µs) |")
        print("|---|---:|---:|---:|")
        for network in ("mlp", "cnn"):
            calls = args.calls if network == "mlp" else max(1, args.calls // 20)
            r = bench_calls(network, calls, args.repeats, default_threads)
            print(
                f"| {network} | {r['default']:.1f} | {r['scoped 1']:.1f} | {r['global 1']:.1f} |", flush=True
            )
        cost = set_restore_cost(args.calls * 10, args.repeats, default_threads)
        print(f"\nget + set(1) + set back, alone: {cost:.2f} µs")


if __name__ == "__main__":
    main()
