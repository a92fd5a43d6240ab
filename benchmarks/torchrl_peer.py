"""TorchRL's Collector on the work of bench_workloads.py's peer rows: N gymnasium envs, random actions.

TorchRL is not a vcollect dependency: bench_workloads.py runs this file with an interpreter that has it
($TORCHRL_PYTHON, e.g. a venv with ``pip install torch==2.13.0 torchrl==0.14.1 gymnasium[mujoco]``).
Usage: ``python benchmarks/torchrl_peer.py ENV SerialEnv|ParallelEnv NUM_ENVS STEPS`` prints steps/s,
the best of 3 windows of ``STEPS`` frames each on one collector.
"""

from __future__ import annotations

import sys
import time


def torchrl_speed(env_name: str, backend: str, num_envs: int, steps: int, windows: int = 3) -> float:
    """Frames/s of ``torchrl.collectors.Collector`` (TorchRL 0.14's single-process collector) over a
    SerialEnv or ParallelEnv of GymEnv, with its random policy (policy=None), as its docs set it up."""
    import torch
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv, ParallelEnv, SerialEnv

    torch.set_num_threads(1)
    gym_id = {"CartPole": "CartPole-v1", "HalfCheetah": "HalfCheetah-v5"}[env_name]
    vector_cls = {"SerialEnv": SerialEnv, "ParallelEnv": ParallelEnv}[backend]
    env = vector_cls(num_envs, lambda: GymEnv(gym_id))
    collector = Collector(env, policy=None, frames_per_batch=steps, total_frames=-1)
    batches = iter(collector)
    next(batches)  # warm-up: starts the workers, first resets
    best = 0.0
    for _ in range(windows):
        start = time.perf_counter()
        next(batches)
        best = max(best, steps / (time.perf_counter() - start))
    collector.shutdown()
    if not env.is_closed:
        env.close()
    return best


if __name__ == "__main__":
    name, kind, n, frames = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(torchrl_speed(name, kind, n, frames))
