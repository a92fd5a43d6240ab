"""TorchRL's Collector as a peer of compare.py and bench_workloads.py: N gymnasium envs, random actions.

TorchRL is not a vcollect dependency (compare.py's docstring says why). The benchmarks call
``torchrl_speed``, which runs this file in a fresh process: with their own interpreter when it imports
``torchrl``, else with $TORCHRL_PYTHON (e.g. a venv with ``pip install torch==2.13.0 torchrl==0.14.1
gymnasium[mujoco]==1.4.0``), else reports None (not installed). This file imports only the standard
library at the top, so the TorchRL interpreter needs no vcollect. Run alone:
``python benchmarks/torchrl_peer.py CartPole|HalfCheetah SerialEnv|ParallelEnv NUM_ENVS STEPS [WINDOWS]``
prints steps/s, the best of WINDOWS (3) windows of ``STEPS`` frames each on one collector.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

GYM_IDS = {"CartPole": "CartPole-v1", "HalfCheetah": "HalfCheetah-v5"}
"""The envs both sides step, by the short names the rows use."""


class Pair(NamedTuple):
    """One comparison: vcollect's Collector on ``backend`` against TorchRL's Collector over ``peer``
    (SerialEnv: in one process, like the dummy backend; ParallelEnv: one process per env), on ``env``;
    ``bar``: the issue's goal for vcollect / TorchRL (None: shown, no goal)."""

    env: str
    backend: str
    peer: str
    bar: float | None

    @property
    def vcollect_row(self) -> str:
        return f"{self.env} {self.backend} (vcollect)"

    @property
    def torchrl_row(self) -> str:
        return f"{self.env} torchrl {self.peer}"


PAIRS = (
    Pair("CartPole", "dummy", "SerialEnv", 10.0),
    Pair("HalfCheetah", "dummy", "SerialEnv", 5.0),
    Pair("CartPole", "subproc", "ParallelEnv", None),
    Pair("HalfCheetah", "subproc", "ParallelEnv", 5.0),
)
"""Issue 18's goals: at least 10x on CartPole (dummy vs SerialEnv), at least 5x on HalfCheetah (the
issue names no backend there, so both HalfCheetah pairs carry it). The subproc side runs one worker
process per env, as ParallelEnv does."""


def torchrl_speed(env_name: str, peer: str, num_envs: int, steps: int, windows: int = 3) -> float | None:
    """Steps/s of TorchRL's Collector (``collect_speed``) in a fresh process; None when no interpreter
    has torchrl; RuntimeError, with the end of its stderr, when the peer process fails."""
    python = sys.executable if importlib.util.find_spec("torchrl") else os.environ.get("TORCHRL_PYTHON")
    if not python:
        return None
    command = [python, str(Path(__file__).resolve()), env_name, peer, str(num_envs), str(steps), str(windows)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


def collect_speed(env_name: str, peer: str, num_envs: int, steps: int, windows: int = 3) -> float:
    """Frames/s of ``torchrl.collectors.Collector`` (TorchRL 0.14's single-process collector) over a
    SerialEnv or ParallelEnv of GymEnv, with its random policy (policy=None), as its docs set it up: the
    best of ``windows`` batches of ``steps`` frames, after one batch of warm-up. Runs under TorchRL."""
    import torch
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv, ParallelEnv, SerialEnv

    torch.set_num_threads(1)
    gym_id = GYM_IDS[env_name]
    vector_cls = {"SerialEnv": SerialEnv, "ParallelEnv": ParallelEnv}[peer]
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
    print(collect_speed(name, kind, n, frames, int(sys.argv[5]) if len(sys.argv) > 5 else 3))
