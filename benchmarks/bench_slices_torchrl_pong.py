"""Pong slices against TorchRL: 256 windows of 64 steps with 4-frame stacks, the same transitions on every side.

The data is one Pong dataset of ``--gb`` GB of raw frame stacks, built as ``bench_slices_scale.py`` builds it
(real ALE Pong frames, episodes of 1,000 steps, ``frame_stack=4``, Zstandard), or reused from ``--keep DIR``.
Its frames (each episode's T + 1 newest frames, which determine its stacks) are written once to an .npy file
beside it; from them:

- vcollect ``Dataset.sample_slices(256, 64)`` on the dataset itself, ``stacks="view"`` and ``stacks="copy"``,
  with next observations;
- vcollect ``VectorRingBuffer.sample_slices(256, 64, stack_num=4)``: a ring of single 84x84 frames holding
  every transition (one env, one row per frame), stacks and next stacks materialised;
- TorchRL 0.14.1's ``ReplayBuffer(LazyMemmapStorage, SliceSampler)`` in its own process under
  ``$TORCHRL_PYTHON`` (``torchrl_peer.pong_slice_server``), in each layout of ``--peers``: ``stacks`` (each
  transition's stack and next stack stored whole, as a collector over an env with ``CatFrames`` writes them)
  and ``catframes`` (single frames stored, ``CatFrames`` stacking them on sample, as its docs advise to save
  memory).

Rounds alternate between the sides (``--rounds`` rounds of ``--calls`` calls each, ``--peer-calls`` for
TorchRL, the order rotated every round), after warm-up calls on each; CPU time (``time.process_time``, each
in its own process) and wall clock per call, p50 / p99 over every round's calls. Usage:

    TORCHRL_PYTHON=... python benchmarks/bench_slices_torchrl_pong.py [--gb 10] [--rounds 6] [--calls 5]
        [--peer-calls 5] [--peers stacks catframes] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import gymnasium as gym
import numpy as np
from bench_read_scale import build, pong_frames
from torchrl_peer import torchrl_pong_server

from vcollect import load_dataset
from vcollect.buffers import VectorRingBuffer

PEER_ROWS = {"stacks": "stacks stored whole", "catframes": "single frames + CatFrames"}
"""Each TorchRL layout's row name."""


def export_frames(data: Any, frames_file: Path, lengths_file: Path) -> None:
    """Write each episode's T + 1 newest frames (``observations[:, -1]``), in turn, and the episodes' T (the
    frames under a temporary name first, so that an interrupted export is not taken for a finished one)."""
    lengths = np.asarray(data.episode_lengths, dtype=np.int64)
    partial = frames_file.with_name(frames_file.name + ".partial")
    out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8,
                                    shape=(int((lengths + 1).sum()), *data.observation_space.shape[1:]))
    at = 0
    for episode in data.iterate_episodes():
        frames = episode.observations[:, -1]
        out[at : at + len(frames)] = frames
        at += len(frames)
    out.flush()
    del out
    partial.replace(frames_file)
    np.save(lengths_file, lengths)


def frame_ring(frames: np.ndarray, lengths: np.ndarray) -> VectorRingBuffer:
    """A one-env ring of single frames holding every episode whole (one row per frame)."""
    ring = VectorRingBuffer(1, int((lengths + 1).sum()) + 1, gym.spaces.Box(0, 255, frames.shape[1:], np.uint8),
                            gym.spaces.Discrete(6), seed=0)
    ids, no, one = np.zeros(1, np.int64), np.zeros(1, bool), np.ones(1)
    rng = np.random.default_rng(1)
    at = 0
    for t in lengths.tolist():
        ring.start_episodes(ids, frames[at : at + 1])
        actions = rng.integers(0, 6, t)
        for step in range(t):
            end = np.array([step == t - 1])
            ring.add(ids, actions[step : step + 1], one, end, no, frames[at + step + 1 : at + step + 2])
        at += t + 1
    return ring


def read_json(pipe: IO[str]) -> dict[str, Any]:
    """The next JSON line of the peer's output (TorchRL logs other lines to it); RuntimeError if it ended."""
    for line in pipe:
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    raise RuntimeError("the TorchRL process ended before answering (its stderr says why)")


def percentiles(seconds: list[float]) -> tuple[float, float]:
    return float(np.percentile(seconds, 50)) * 1e3, float(np.percentile(seconds, 99)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=10.0, help="raw GB of stacks in the dataset")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=5, help="calls per side per round")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--peer-calls", type=int, default=None, help="calls per TorchRL side per round")
    parser.add_argument("--peers", nargs="*", default=["stacks", "catframes"], choices=["stacks", "catframes"])
    parser.add_argument("--keep", type=Path, default=None, help="build under DIR and keep it (default: a temp dir)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="vcollect-pong-torchrl-"))
    dataset_id = f"bench/pong-slices-{round(args.gb * 1000)}mb-v0"
    print(f"load before: {os.getloadavg()}; root {root}", flush=True)
    servers: dict[str, subprocess.Popen[str]] = {}
    try:
        if not (root / dataset_id).exists():
            print(f"built {dataset_id} in {build(root, dataset_id, args.gb, 'auto', pong_frames(5_000), True):.1f} s")
        data = load_dataset(dataset_id, root=root)
        frames_file = root / f"{dataset_id.replace('/', '-')}-frames.npy"
        lengths_file = root / f"{dataset_id.replace('/', '-')}-lengths.npy"
        if not frames_file.exists() or not lengths_file.exists():
            export_frames(data, frames_file, lengths_file)
        frames, lengths = np.load(frames_file, mmap_mode="r"), np.load(lengths_file)
        for layout in args.peers:
            server = torchrl_pong_server(layout, str(frames_file), str(lengths_file), args.batch, args.length)
            if server is None:
                print("TorchRL is not installed: set TORCHRL_PYTHON (benchmarks/torchrl_peer.py)")
                return
            servers[layout] = server
        start = time.perf_counter()
        ring = frame_ring(frames, lengths)
        print(f"ring of {len(ring):,} transitions ({ring.capacity:,} rows of 84x84) filled in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
        for layout, server in servers.items():
            assert server.stdout is not None
            fill = read_json(server.stdout)
            print(f"TorchRL {layout!r} storage: {fill['transitions']:,} transitions, "
                  f"{fill['storage_bytes'] / 1e9:.2f} GB of memmap, filled in {fill['fill_s']:.1f} s", flush=True)
        print(f"{dataset_id}: {data.total_episodes:,} episodes, {data.total_steps:,} steps (transitions)")

        def peer(server: subprocess.Popen[str]) -> Callable[[int], tuple[list[float], list[float]]]:
            def run(calls: int) -> tuple[list[float], list[float]]:
                assert server.stdin is not None and server.stdout is not None
                server.stdin.write(f"{calls}\n")
                server.stdin.flush()
                got = read_json(server.stdout)
                return got["cpu"], got["wall"]
            return run

        def local(call: Callable[[], Any]) -> Callable[[int], tuple[list[float], list[float]]]:
            def run(calls: int) -> tuple[list[float], list[float]]:
                cpu, wall = [], []
                for _ in range(calls):
                    c0, w0 = time.process_time(), time.perf_counter()
                    call()
                    cpu.append(time.process_time() - c0)
                    wall.append(time.perf_counter() - w0)
                return cpu, wall
            return run

        b, n = args.batch, args.length
        data.set_seed(0)
        sides: dict[str, Callable[[int], tuple[list[float], list[float]]]] = {
            'vcollect Dataset.sample_slices, stacks="view"': local(lambda: data.sample_slices(b, n, stacks="view")),
            'vcollect Dataset.sample_slices, stacks="copy"': local(lambda: data.sample_slices(b, n, stacks="copy")),
            "vcollect ring sample_slices, stack_num=4": local(lambda: ring.sample_slices(b, n, stack_num=4)),
            **{f"TorchRL SliceSampler, {PEER_ROWS[layout]}": peer(server) for layout, server in servers.items()},
        }
        peer_names = [f"TorchRL SliceSampler, {PEER_ROWS[layout]}" for layout in servers]
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in sides}
        for name, run in sides.items():
            run(1 if name in peer_names else 3)  # warm-up (the TorchRL process has drawn 2 batches already)
        names = list(sides)
        peer_calls = args.calls if args.peer_calls is None else args.peer_calls
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                cpu, wall = sides[name](peer_calls if name in peer_names else args.calls)
                times[name][0].extend(cpu)
                times[name][1].extend(wall)
        print(f"\n{args.rounds} rounds of {args.calls} calls ({peer_calls} for TorchRL) of {b} x {n}, alternated")
        print("| side | calls | CPU ms p50 | CPU ms p99 | wall ms p50 | wall ms p99 | "
              + " | ".join(f"{p} CPU p50 / this" for p in peer_names) + " |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(peer_names))
        for name in names:
            (c50, c99), (w50, w99) = percentiles(times[name][0]), percentiles(times[name][1])
            ratios = " | ".join(f"{percentiles(times[p][0])[0] / c50:.1f}x" for p in peer_names)
            print(f"| {name} | {len(times[name][0])} | {c50:.1f} | {c99:.1f} | {w50:.1f} | {w99:.1f} | {ratios} |")
        print(f"load after: {os.getloadavg()}")
        data.close()
    finally:
        for server in servers.values():
            if server.stdin is not None:
                server.stdin.close()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
