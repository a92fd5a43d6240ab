"""Slices from large Pong datasets: ``Dataset.sample_slices(256, 64)`` p50 / p99, CPU time beside wall clock.

Builds (or reuses, with ``--keep DIR``) datasets of ``--gb`` GB of raw Pong frame stacks each (4x84x84 uint8
observations as gymnasium's ``FrameStackObservation`` gives them; 1 GB = 1e9 bytes of stacks, the measure
``bench_read_scale.py`` uses), stored with ``frame_stack=4`` and the default compression (Zstandard), in
episodes of 1,000 steps. The frames are real ALE Pong (``ale_py``, ``AtariPreprocessing``, random actions):
5,000 consecutive frames gathered once, each episode a random stretch of them, so the shards compress as
Pong does. The datasets are far larger than the sampling cache (64 MiB), so every call decodes its frames
from the shard files (in the page cache: the files are small once compressed).

For each dataset, ``--calls`` calls after 5 of warm-up (maps opened, chunk tables read), each with
``stacks="copy"`` (materialised stacks, the default) and ``stacks="view"`` (each window's frames once, stacks
as read-only strided views), with and without ``next_observations``. Times: CPU (``time.process_time``) and
wall per call, p50 / p99: on a shared machine wall clock says little. Usage:

    python benchmarks/bench_slices_scale.py [--gb 10 1] [--calls 100] [--keep DIR] [--delete]

Without ``--keep`` the datasets are built in a temporary folder and deleted at the end; ``--delete`` deletes
a kept folder's datasets at the end too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_read_scale import build, frames_nbytes, pong_frames, shard_files

from vcollect import load_dataset


def timed(call: Any, calls: int, warmup: int = 5) -> dict[str, float]:
    """CPU and wall p50 / p99 (ms) of ``calls`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    cpu, wall = [], []
    for _ in range(calls):
        c0, w0 = time.process_time(), time.perf_counter()
        call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu50": float(np.percentile(cpu, 50)) * 1e3, "cpu99": float(np.percentile(cpu, 99)) * 1e3,
            "wall50": float(np.percentile(wall, 50)) * 1e3, "wall99": float(np.percentile(wall, 99)) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, nargs="+", default=[10.0, 1.0], help="raw GB of stacks per dataset")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--keep", type=Path, default=None, help="build under DIR and keep it (default: a temp dir)")
    parser.add_argument("--delete", action="store_true", help="delete the datasets at the end, --keep or not")
    parser.add_argument("--modes", nargs="+", default=["copy", "view"], choices=["copy", "view"])
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="vcollect-slices-scale-"))
    print(f"load before: {os.getloadavg()}; root {root}")
    frames: np.ndarray | None = None
    ids = []
    try:
        for gb in args.gb:
            dataset_id = f"bench/pong-slices-{round(gb * 1000)}mb-v0"
            ids.append(dataset_id)
            write_s = "(kept)"
            if not (root / dataset_id).exists():
                frames = pong_frames(5_000) if frames is None else frames
                write_s = f"{build(root, dataset_id, gb, 'auto', frames, True):.1f} s"
            data = load_dataset(dataset_id, root=root)
            raw_gb = (data.total_steps + data.total_episodes) * frames_nbytes(data.observation_space) / 1e9
            disk_gb = sum(f.stat().st_size for f in shard_files(data.path)) / 1e9
            print(f"\n{dataset_id}: {data.total_episodes:,} episodes, {data.total_steps:,} steps, {raw_gb:.2f} GB raw "
                  f"stacks, {disk_gb:.3f} GB on disk in {len(shard_files(data.path))} shards, written in {write_s}")
            print(f"| call ({args.batch} x {args.length}) | CPU ms p50 | CPU ms p99 | wall ms p50 | wall ms p99 |")
            print("| --- | --- | --- | --- | --- |")
            for mode in args.modes:
                for nxt in (True, False):
                    data.set_seed(0)
                    t = timed(lambda d=data, m=mode, n=nxt: d.sample_slices(args.batch, args.length, stacks=m,
                                                                            next_observations=n), args.calls)
                    print(f"| stacks={mode!r}, next_observations={nxt} | {t['cpu50']:.2f} | {t['cpu99']:.2f} "
                          f"| {t['wall50']:.2f} | {t['wall99']:.2f} |", flush=True)
            data.close()
        print(f"load after: {os.getloadavg()}")
    finally:
        if args.keep is None or args.delete:
            for dataset_id in ids:
                shutil.rmtree(root / dataset_id, ignore_errors=True)
            if args.keep is None:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
