"""TorchRL's Collector as a peer of compare.py and bench_workloads.py: N gymnasium envs, random actions.

TorchRL is not a vcollect dependency (compare.py's docstring says why). The benchmarks call
``torchrl_speed``, which runs this file in a fresh process: with their own interpreter when it imports
``torchrl``, else with $TORCHRL_PYTHON (e.g. a venv with ``pip install torch==2.13.0 torchrl==0.14.1
gymnasium[mujoco]==1.4.0``), else reports None (not installed). This file imports only the standard
library at the top, so the TorchRL interpreter needs no vcollect. Run alone:
``python benchmarks/torchrl_peer.py CartPole|HalfCheetah SerialEnv|ParallelEnv NUM_ENVS STEPS [WINDOWS]``
prints steps/s, the best of WINDOWS (3) windows of ``STEPS`` frames each on one collector.

Slices (``bench_slices.py --torchrl``): ``python benchmarks/torchrl_peer.py slices cartpole TRANSITIONS
NUM_SLICES LENGTH CALLS [cache]`` fills TorchRL's ``ReplayBuffer(LazyMemmapStorage, SliceSampler)`` and prints one
JSON line of per-batch times (``slice_speed``). Pong slices (``bench_slices_torchrl_pong.py``): ``python
benchmarks/torchrl_peer.py pong-slices stacks|catframes FRAMES.npy LENGTHS.npy NUM_SLICES LENGTH`` serves timed rounds
(``pong_slice_server``).
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


def episode_lengths(transitions: int, seed: int = 0, low: int = 10, high: int = 500) -> list[int]:
    """Episode lengths of ``low`` to ``high`` steps (a mixed-quality CartPole policy's) summing to
    ``transitions``; both sides of the slice comparison store episodes of these lengths."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high + 1, transitions // low + 1)
    cut = int(np.searchsorted(np.cumsum(lengths), transitions))
    out = [int(x) for x in lengths[:cut]]
    out.append(transitions - sum(out))
    return [x for x in out if x > 0]


def slice_speed(source: str, transitions: int, num_slices: int, length: int, calls: int,
                cache_values: bool = False) -> dict[str, float]:
    """Per-batch times of TorchRL's ``ReplayBuffer(LazyMemmapStorage, SliceSampler)``: ``num_slices`` slices of
    ``length`` steps, ``calls`` batches after 2 of warm-up. ``source``: "cartpole" (float32 observations of 4,
    episodes of ``episode_lengths``; Pong's rows are ``pong_slice_server``'s). The storage is filled in blocks of 1M transitions under a temporary folder; ``cache_values``: the sampler's
    cache of the trajectories (valid while nothing is written). Runs under TorchRL."""
    import tempfile

    import numpy as np
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyMemmapStorage, ReplayBuffer, SliceSampler

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="torchrl-slices-") as scratch:
        rb = ReplayBuffer(storage=LazyMemmapStorage(transitions, scratch_dir=scratch),
                          sampler=SliceSampler(num_slices=num_slices, traj_key="episode", strict_length=True,
                                               cache_values=cache_values),
                          batch_size=num_slices * length)
        if source != "cartpole":
            raise ValueError(f"slices of {source!r}: only 'cartpole' here (Pong: the pong-slices mode)")
        lengths = episode_lengths(transitions)
        episode = np.repeat(np.arange(len(lengths)), lengths)
        block = 1_000_000
        rng = np.random.default_rng(1)
        fill0 = time.perf_counter()
        for lo in range(0, transitions, block):
            hi = min(lo + block, transitions)
            n = hi - lo
            obs = torch.from_numpy(rng.standard_normal((n, 4), dtype=np.float32))
            nxt = torch.from_numpy(rng.standard_normal((n, 4), dtype=np.float32))
            last = hi == transitions or bool(episode[hi] != episode[hi - 1])  # the block's last row ends one
            done = torch.from_numpy(np.append(episode[lo + 1 : hi] != episode[lo : hi - 1], last)).reshape(n, 1)
            rb.extend(TensorDict({
                "observation": obs, "action": torch.from_numpy(rng.integers(0, 2, n)),
                "episode": torch.from_numpy(episode[lo:hi]),
                "next": {"observation": nxt, "reward": torch.ones(n, 1), "done": done, "terminated": done,
                         "truncated": torch.zeros(n, 1, dtype=torch.bool)},
            }, batch_size=[n]))
        fill = time.perf_counter() - fill0
        for _ in range(2):
            rb.sample()
        cpu, wall = [], []
        for _ in range(calls):
            c0, w0 = time.process_time(), time.perf_counter()
            batch = rb.sample()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        assert batch.shape[0] == num_slices * length
        return {"transitions": transitions, "fill_s": fill, "cpu50": float(np.percentile(cpu, 50)) * 1e3,
                "cpu99": float(np.percentile(cpu, 99)) * 1e3, "wall50": float(np.percentile(wall, 50)) * 1e3,
                "wall99": float(np.percentile(wall, 99)) * 1e3}


def torchrl_slice_speed(source: str, transitions: int, num_slices: int, length: int, calls: int,
                        cache_values: bool = False) -> dict[str, float] | None:
    """``slice_speed`` in a fresh process under TorchRL's interpreter (as ``torchrl_speed``); None without one."""
    import json

    python = sys.executable if importlib.util.find_spec("torchrl") else os.environ.get("TORCHRL_PYTHON")
    if not python:
        return None
    command = [python, str(Path(__file__).resolve()), "slices", source, str(transitions), str(num_slices),
               str(length), str(calls), *(["cache"] if cache_values else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def pong_slice_server(layout: str, frames_file: str, lengths_file: str, num_slices: int, length: int) -> None:
    """Serve timed rounds of Pong slices from TorchRL's ``ReplayBuffer(LazyMemmapStorage, SliceSampler)`` over
    stdin / stdout, so that a parent can alternate them with its own rounds. Runs under TorchRL.

    The transitions come from ``frames_file`` (each episode's T + 1 frames in turn, (sum(T + 1), 84, 84)
    uint8) and ``lengths_file`` (the T of each episode), one storage row per transition with ``pixels`` and
    ``("next", "pixels")``. ``layout="stacks"``: each row holds its (4, 84, 84) stack and next stack whole
    (an episode's first stacks repeat its first frame), as a collector over an env with ``CatFrames`` writes
    them (TorchRL's Atari examples); the sample is reshaped to (num_slices, length). ``layout="catframes"``:
    each row holds single (1, 84, 84) frames, as the note in ``CatFrames``' docs advises to save memory, and
    the buffer's transform shapes the sample (num_slices, length) and applies ``CatFrames(N=4, dim=-3,
    in_keys=["pixels", ("next", "pixels")])`` (a window's first 3 stacks padded inside the window,
    ``padding="same"``). Both sample with ``SliceSampler(num_slices, traj_key="episode", strict_length=True)``
    and ``batch_size=num_slices * length``, giving (num_slices, length, 4, 84, 84) stacks of both. Prints one
    JSON line (``transitions``, ``fill_s``, ``storage_bytes``), then answers each stdin line ``N`` with one JSON
    line of ``cpu`` and ``wall`` lists (seconds) of N ``sample`` calls; an empty line ends it."""
    import json
    import tempfile

    import numpy as np
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyMemmapStorage, ReplayBuffer, SliceSampler
    from torchrl.envs import CatFrames, Compose

    torch.set_num_threads(1)
    frames = np.load(frames_file, mmap_mode="r")
    lengths = np.load(lengths_file)
    transitions = int(lengths.sum())
    shaped = Compose(lambda td: td.reshape(num_slices, length).refine_names(None, "time"))
    if layout == "catframes":
        shaped.append(CatFrames(N=4, dim=-3, in_keys=["pixels", ("next", "pixels")]))
    first = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])  # each episode's first frame

    def pixels(rows: np.ndarray, starts: np.ndarray) -> torch.Tensor:
        """The frames at ``rows`` (1, 84, 84), or their stacks (4, 84, 84) over the episodes from ``starts``."""
        if layout == "catframes":
            return torch.from_numpy(frames[rows][:, None])
        return torch.from_numpy(frames[np.maximum(rows[:, None] + np.arange(-3, 1), starts[:, None])])

    with tempfile.TemporaryDirectory(prefix="torchrl-pong-slices-") as scratch:
        rb = ReplayBuffer(storage=LazyMemmapStorage(transitions, scratch_dir=scratch),
                          sampler=SliceSampler(num_slices=num_slices, traj_key="episode", strict_length=True),
                          batch_size=num_slices * length, transform=shaped)
        rng = np.random.default_rng(1)
        fill0 = time.perf_counter()
        block = max(1, 20_000 // int(lengths.max()))
        for lo in range(0, len(lengths), block):
            eps = range(lo, min(lo + block, len(lengths)))
            rows = np.concatenate([first[e] + np.arange(lengths[e]) for e in eps])
            starts = np.repeat(first[lo : lo + len(eps)], lengths[lo : lo + len(eps)])
            n = rows.size
            done = np.concatenate([np.arange(lengths[e]) == lengths[e] - 1 for e in eps]).reshape(n, 1)
            done_t = torch.from_numpy(done)
            rb.extend(TensorDict({
                "pixels": pixels(rows, starts), "action": torch.from_numpy(rng.integers(0, 6, n)),
                "episode": torch.from_numpy(np.repeat(np.asarray(eps), lengths[lo : lo + len(eps)])),
                "done": torch.zeros(n, 1, dtype=torch.bool),
                "next": {"pixels": pixels(rows + 1, starts), "reward": torch.ones(n, 1),
                         "done": done_t, "terminated": done_t, "truncated": torch.zeros(n, 1, dtype=torch.bool)},
            }, batch_size=[n]))
        fill = time.perf_counter() - fill0
        storage_bytes = sum(f.stat().st_size for f in Path(scratch).rglob("*") if f.is_file())
        for _ in range(2):
            batch = rb.sample()
        assert tuple(batch["pixels"].shape) == (num_slices, length, 4, 84, 84), batch["pixels"].shape
        print(json.dumps({"transitions": transitions, "fill_s": fill, "storage_bytes": storage_bytes}), flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            cpu, wall = [], []
            for _ in range(int(line)):
                c0, w0 = time.process_time(), time.perf_counter()
                batch = rb.sample()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
            del batch
            print(json.dumps({"cpu": cpu, "wall": wall}), flush=True)


def torchrl_pong_server(layout: str, frames_file: str, lengths_file: str, num_slices: int, length: int,
                        ) -> subprocess.Popen[str] | None:
    """``pong_slice_server`` started in a fresh process under TorchRL's interpreter (as ``torchrl_speed``), its
    stdin and stdout pipes open; None without one. The caller reads its first line (the fill) and ends it."""
    python = sys.executable if importlib.util.find_spec("torchrl") else os.environ.get("TORCHRL_PYTHON")
    if not python:
        return None
    command = [python, str(Path(__file__).resolve()), "pong-slices", layout, frames_file, lengths_file,
               str(num_slices), str(length)]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


if __name__ == "__main__" and sys.argv[1] == "pong-slices":
    pong_slice_server(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
elif __name__ == "__main__" and sys.argv[1] == "slices":
    import json

    print(json.dumps(slice_speed(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
                                 len(sys.argv) > 7 and sys.argv[7] == "cache")))
elif __name__ == "__main__":
    name, kind, n, frames = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(collect_speed(name, kind, n, frames, int(sys.argv[5]) if len(sys.argv) > 5 else 3))
