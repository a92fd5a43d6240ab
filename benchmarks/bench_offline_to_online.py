"""Offline-to-online speed: a ring checkpoint's save and load against ``dd`` on the same disk, and preloading a
ring from a CartPole dataset of 1M transitions.

    python benchmarks/bench_offline_to_online.py [--gb 1.0] [--dir DIR] [--steps 1000000] [--rounds 3]

Save: ``ring.save`` (fsync included) against ``dd if=/dev/zero bs=8M conv=fdatasync`` of the same size in
the same folder; load: ``VectorRingBuffer.load`` (checksums checked) against ``dd of=/dev/null`` of the same
checkpoint (both from the page cache when it holds the file). Wall clock and this process's CPU time; the
big files are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import vcollect
from vcollect.buffers import VectorRingBuffer


def timed(fn):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def dd_rate(args: list[str]) -> float:
    """Bytes/s as dd reports them."""
    text = subprocess.run(["dd", *args], capture_output=True, text=True, check=True).stderr
    match = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", text)
    assert match, text
    return int(match.group(1)) / float(match.group(2))


def bench_checkpoint(folder: Path, gb: float, rounds: int) -> None:
    obs = gym.spaces.Box(-1.0, 1.0, (64,), np.float32)  # 256 B a row: ~1 GB at 4M rows with the step columns
    rows_per_env = int(gb * 2**30 / (64 * 4 + 8 + 8 + 4)) // 4
    ring = VectorRingBuffer(4, rows_per_env, obs, gym.spaces.Discrete(4), seed=0)
    rng = np.random.default_rng(0)
    for a in ring._obs_flat:
        a[:] = rng.random(a.shape, dtype=np.float32)
    ring._rew_flat[:] = rng.random(ring._rew_flat.shape)
    ring._has_flat[:] = True
    nbytes = sum(a.nbytes for a in ring._checkpoint_arrays().values())
    path, dd_file = folder / "ring.h5", folder / "dd.bin"
    print(f"ring: {nbytes / 2**30:.2f} GiB ({ring.num_envs} x {ring.capacity} rows), folder {folder}")
    for r in range(rounds):
        _, save_wall, save_cpu = timed(lambda: ring.save(path, overwrite=True))
        dd_write = dd_rate(["if=/dev/zero", f"of={dd_file}", "bs=8M", f"count={nbytes // (8 << 20)}", "conv=fdatasync"])
        loaded, load_wall, load_cpu = timed(lambda: VectorRingBuffer.load(path))
        dd_read = dd_rate([f"if={path}", "of=/dev/null", "bs=8M"])
        del loaded
        size = path.stat().st_size
        print(f"round {r}: save {save_wall:.2f} s wall {save_cpu:.2f} s CPU = {size / save_wall / 1e6:.0f} MB/s "
              f"(dd write {dd_write / 1e6:.0f} MB/s, ratio {size / save_wall / dd_write:.2f}); "
              f"load {load_wall:.2f} s wall {load_cpu:.2f} s CPU = {size / load_wall / 1e6:.0f} MB/s "
              f"(dd read {dd_read / 1e6:.0f} MB/s, ratio {size / load_wall / dd_read:.2f})")
    path.unlink()
    dd_file.unlink()


def bench_preload(folder: Path, steps: int, rounds: int) -> None:
    root = folder / "datasets"
    envs = vcollect.make_vector("CartPole-v1", 8, backend="dummy")
    store = vcollect.EpisodeStore.create("bench/cartpole-1m-v0", envs.single_observation_space,
                                         envs.single_action_space, root=root)
    with vcollect.Collector(None, envs, store=store, seed=0) as collector:
        collector.collect(n_step=steps + 50_000, random=True, reset_before_collect=True)
    store.close()
    full = vcollect.load_dataset("bench/cartpole-1m-v0", root=root)
    cum = np.cumsum(full.episode_lengths)
    ids = np.arange(int(np.searchsorted(cum, steps)) + 1)
    total = int(cum[ids[-1]])
    print(f"dataset: {full.total_steps} steps; preloading its first {ids.size} episodes ({total} transitions)")
    for r in range(rounds):
        ring = VectorRingBuffer(8, total // 8 + 20_000, full.observation_space, full.action_space)
        _, wall, cpu = timed(lambda: ring.extend_from(full, ids))  # noqa: B023
        assert len(ring) == total
        print(f"round {r}: extend_from {total} transitions: {wall * 1e3:.0f} ms wall, {cpu * 1e3:.0f} ms CPU")
    full.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, default=None, help="folder on the disk measured (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="vcollect-o2o-") as tmp:
        bench_checkpoint(Path(tmp), args.gb, args.rounds)
        bench_preload(Path(tmp), args.steps, args.rounds)
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
