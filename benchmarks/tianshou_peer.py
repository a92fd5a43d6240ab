"""Tianshou 2.x's Collector on the same work as compare.py (CartPole-v1, N envs), for the ratio table.

Tianshou is not a vcollect dependency; this module imports it lazily. compare.py calls ``tianshou_speed``,
which runs this file in a fresh process: with compare.py's interpreter when tianshou is importable, else
with the interpreter named by $TIANSHOU_PYTHON (a venv with ``pip install torch==2.13.0
tianshou==2.0.1``), else reports None ("not installed").
Run alone: ``python benchmarks/tianshou_peer.py``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym


def tianshou_speed(
    num_envs: int, steps: int, backend: str, policy: str = "random", windows: int = 3
) -> float | None:
    """Tianshou's Collector on the same work (random actions or a DQN MLP), best of ``windows`` windows
    in a fresh process, or None if not installed; CalledProcessError when that process fails."""
    args = [str(Path(__file__).resolve()), str(num_envs), str(steps), backend, policy, str(windows)]
    if importlib.util.find_spec("tianshou") is not None:
        return float(subprocess.check_output([sys.executable, *args]).decode().split()[-1])
    other = os.environ.get("TIANSHOU_PYTHON")
    if not other:
        return None
    output = subprocess.check_output([other, *args], stderr=subprocess.DEVNULL)
    return float(output.decode().split()[-1])


def tianshou_collect_speed(
    num_envs: int, steps: int, backend: str, policy: str = "random", windows: int = 1
) -> float:
    """Steps/s of Tianshou's Collector, random actions (``collect(random=True)``) or a DQN MLP policy: the
    best of ``windows`` timed ``collect(n_step=steps)`` calls on one collector (as compare.py times ours)."""
    import torch
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv, SubprocVectorEnv
    from tianshou.utils.net.common import Net

    vector_cls = DummyVectorEnv if backend == "dummy" else SubprocVectorEnv
    envs = vector_cls([lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
    torch.manual_seed(0)
    torch.set_num_threads(1)  # as compare.py's mlp_policy does: a tiny net on CPU is fastest single-threaded
    net = Net(state_shape=4, action_shape=2, hidden_sizes=[64, 64])
    dqn = DiscreteQLearningPolicy(model=net, action_space=envs.action_space[0])
    collector = Collector(dqn, envs, VectorReplayBuffer(20_000, num_envs))
    collector.reset()
    random = policy == "random"
    collector.collect(n_step=1_000, random=random)
    best = 0.0
    for _ in range(windows):
        start = time.perf_counter()
        collector.collect(n_step=steps, random=random)
        best = max(best, steps / (time.perf_counter() - start))
    envs.close()
    return best


if __name__ == "__main__":
    if len(sys.argv) in (5, 6):  # num_envs steps backend policy [windows]: one number, for compare.py
        n, steps, backend, policy = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
        print(tianshou_collect_speed(n, steps, backend, policy, int(sys.argv[5]) if len(sys.argv) == 6 else 1))
    else:
        for backend in ("dummy", "subproc"):
            for policy in ("random", "dqn"):
                print(backend, policy, f"{tianshou_collect_speed(8, 20_000, backend, policy):,.0f} steps/s")
