"""Offline-to-online speed: a ring checkpoint's save and load against ``dd`` on the same disk, and preloading a
ring from a CartPole dataset of 1M transitions.

    python benchmarks/bench_offline_to_online.py [--gb 1.0] [--dir DIR] [--steps 1000000] [--rounds 3]
                                                 [--checkpoint-only]

Save: ``ring.save`` (fsync included) against ``dd if=/dev/zero bs=8M conv=fdatasync`` of the same size in
the same folder. Load: ``VectorRingBuffer.load`` (checksums checked) against ``dd of=/dev/null bs=8M`` of the
same checkpoint, twice: from the page cache (warm) and with the checkpoint's pages dropped from it first
(cold: ``posix_fadvise(DONTNEED)`` on that file only, before the load and again before ``dd``). Each is
given in wall clock and CPU time (this process's; ``dd``'s from its rusage), since wall clock means little on
a shared machine. For scale, the cost no load can avoid: making a new ring of the same size and touching
every page of it (the kernel's page faults). The big files are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import vcollect
from vcollect.buffers import VectorRingBuffer, checkpoint
from vcollect.buffers.ring import ring_columns


def timed(fn):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def timed_split(fn):  # type: ignore[no-untyped-def]
    """Wall seconds, CPU seconds, and the CPU split into user (Python, checksums) and system (the kernel's
    copies and page faults)."""
    wall, before = time.perf_counter(), os.times()
    fn()
    after = os.times()
    user, system = after.user - before.user, after.system - before.system
    return time.perf_counter() - wall, user + system, user, system


def dd(args: list[str]) -> tuple[float, float]:
    """dd's wall seconds (as it reports them) and CPU seconds (user + system, from its rusage)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = subprocess.run(["dd", *args], capture_output=True, text=True, check=True).stderr
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    match = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", text)
    assert match, text
    return float(match.group(2)), (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def drop_cached(path: Path) -> None:
    """Drop this file's (clean) pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def touch_new_ring(ring: VectorRingBuffer) -> None:
    """A new ring of ``ring``'s size with every page of its arrays written once."""
    fresh = VectorRingBuffer(ring.num_envs, ring.capacity, ring.observation_space, ring.action_space)
    for a in fresh._checkpoint_arrays().values():
        a.fill(1)


def bench_checkpoint(folder: Path, gb: float, rounds: int) -> None:
    obs = gym.spaces.Box(-1.0, 1.0, (64,), np.float32)  # 256 B a row: ~1 GB at 4M rows with the step columns
    rows_per_env = int(gb * 2**30 / (64 * 4 + 8 + 8 + 4)) // 4
    ring = VectorRingBuffer(4, rows_per_env, obs, gym.spaces.Discrete(4), seed=0)
    rng = np.random.default_rng(0)
    columns = ring_columns(ring)
    for a in columns.obs:
        a[:] = rng.random(a.shape, dtype=np.float32)
    columns.rewards[:] = rng.random(columns.rewards.shape)
    columns.has[:] = True
    nbytes = sum(a.nbytes for a in ring._checkpoint_arrays().values())
    path, dd_file = folder / "ring.h5", folder / "dd.bin"
    threads = getattr(checkpoint, "READ_THREADS", 1)
    print(f"ring: {nbytes / 2**30:.2f} GiB ({ring.num_envs} x {ring.capacity} rows), folder {folder}, "
          f"{os.cpu_count()} cores, {threads} reading threads, load average {os.getloadavg()[0]:.1f}")

    def line(what: str, size: int, times: tuple[float, float, float, float], dd_wall: float, dd_cpu: float) -> str:
        wall, cpu, user, system = times
        return (f"{what} {wall:.2f} s wall / {cpu:.2f} s CPU (user {user:.2f}, system {system:.2f}) = "
                f"{size / wall / 1e6:.0f} MB/s (dd {dd_wall:.2f} s / {dd_cpu:.2f} s CPU = {size / dd_wall / 1e6:.0f} "
                f"MB/s; ratio {dd_wall / wall:.2f} wall, {dd_cpu / max(cpu, 1e-9):.2f} CPU)")

    for r in range(rounds):
        save = timed_split(lambda: ring.save(path, overwrite=True))
        size = path.stat().st_size
        write = dd(["if=/dev/zero", f"of={dd_file}", "bs=8M", f"count={size // (8 << 20)}", "conv=fdatasync"])
        dd_file.unlink()
        warm = timed_split(lambda: VectorRingBuffer.load(path))
        warm_dd = dd([f"if={path}", "of=/dev/null", "bs=8M"])
        drop_cached(path)
        cold = timed_split(lambda: VectorRingBuffer.load(path))
        drop_cached(path)
        cold_dd = dd([f"if={path}", "of=/dev/null", "bs=8M"])
        touch_wall, touch_cpu, touch_user, touch_system = timed_split(lambda: touch_new_ring(ring))
        print(f"round {r}:\n  " + "\n  ".join([
            line("save", size, save, *write),
            line("load (warm)", size, warm, *warm_dd),
            line("load (cold)", size, cold, *cold_dd),
            f"new ring, every page touched: {touch_wall:.2f} s wall / {touch_cpu:.2f} s CPU (user {touch_user:.2f}, "
            f"system {touch_system:.2f})",
        ]), flush=True)
    path.unlink()


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
    parser.add_argument("--checkpoint-only", action="store_true", help="skip the preloading benchmark")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="vcollect-o2o-") as tmp:
        bench_checkpoint(Path(tmp), args.gb, args.rounds)
        if not args.checkpoint_only:
            bench_preload(Path(tmp), args.steps, args.rounds)
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
