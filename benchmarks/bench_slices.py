"""Slices (windows of consecutive steps of one episode): 256 windows of 64 steps, CPU time per call.

Rings: a CartPole-shaped ring of ``--rows`` rows (float32 observations of 4, 8 envs, episodes of 10 to 500
steps), ``VectorRingBuffer.sample_slices`` and ``PrioritizedVectorRingBuffer.sample_slices``. The episode
table is kept up to date from the rows written since the last call: the "static" rows time calls on a ring
not written between them (a draw then costs the batch), the "after" rows one ``add`` of every env, or 125 of
them (1,000 steps, an online loop's collect call), before each call (the table reads those rows only).

Dataset: a Pong-like store (uint8 84x84 frames with a constant background, two paddles and a ball that move,
``frame_stack=4``, Zstandard as "auto" gives image columns) of ``--pong-steps`` steps in episodes of 800 to
3,000 steps, ``Dataset.sample_slices`` read from the shard files (``cache_bytes=0``), with and without
``next_observations``.

Times are CPU time (``time.process_time``) per call, p50 / p99 over ``--calls`` calls, beside wall clock:
on a shared machine wall clock says little.

    python benchmarks/bench_slices.py [--rows 1000000] [--pong-steps 30000] [--calls 200] [--skip-rings|--skip-pong]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from vcollect.buffers import PrioritizedVectorRingBuffer, VectorRingBuffer


def cartpole_ring(cls: type[VectorRingBuffer], rows: int, num_envs: int = 8, **kw: Any) -> VectorRingBuffer:
    """A full ring of CartPole-shaped steps, episodes of 10 to 500 steps (a mixed-quality policy's)."""
    ring = cls(total_size=rows, num_envs=num_envs, seed=0, **kw)
    ring.bind_spaces(spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2))
    rng = np.random.default_rng(0)
    ids = np.arange(num_envs)
    ring.start_episodes(ids, np.zeros((num_envs, 4), np.float32))
    left = rng.integers(10, 501, num_envs)
    no = np.zeros(num_envs, bool)
    for _ in range(ring.capacity + 10):
        left -= 1
        done = left == 0
        nxt = rng.standard_normal((num_envs, 4)).astype(np.float32)
        ring.add(ids, rng.integers(0, 2, num_envs), np.ones(num_envs), done, no, nxt)
        if done.any():
            ring.start_episodes(ids[done], nxt[done])
            left[done] = rng.integers(10, 501, int(done.sum()))
    return ring


def block_ring(rows: int, num_envs: int = 8, block: int = 65_536) -> VectorRingBuffer:
    """A full ring of CartPole-shaped steps written in blocks (``RingWriter.add_steps``): per env, episodes of
    ``torchrl_peer.episode_lengths``' 10 to 500 steps, each after the first begun by a restart row."""
    from torchrl_peer import episode_lengths

    from vcollect.buffers.ring import RingWriter

    ring = VectorRingBuffer(total_size=rows, num_envs=num_envs, seed=0)
    ring.bind_spaces(spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2))
    ring.start_episodes(np.arange(num_envs), np.zeros((num_envs, 4), np.float32))
    total = ring.capacity + 10
    ends = np.zeros((total, num_envs), bool)
    restarts = np.zeros((total, num_envs), bool)
    for env in range(num_envs):
        lengths = np.asarray(episode_lengths(2 * total, seed=env + 1))
        last = np.cumsum(lengths + 1) - 2  # each episode's last step row; a restart row follows it
        ends[last[last < total], env] = True
        restarts[last[last + 1 < total] + 1, env] = True
    rng = np.random.default_rng(0)
    writer = RingWriter(ring)
    block = min(block, ring.capacity - 1)
    for lo in range(0, total, block):
        hi = min(lo + block, total)
        k = hi - lo
        writer.add_steps([rng.integers(0, 2, (k, num_envs))], np.ones((k, num_envs)), ends[lo:hi],
                         np.zeros((k, num_envs), bool), [rng.standard_normal((k, num_envs, 4), dtype=np.float32)],
                         restarts[lo:hi])
    return ring


def torchrl_rows(sizes: list[int], calls: int, batch: int, lengths: list[int]) -> None:
    """vcollect's ring against TorchRL's ReplayBuffer(LazyMemmapStorage, SliceSampler) at each size, CPU ms."""
    from torchrl_peer import torchrl_slice_speed

    print("\n| transitions | slice length | vcollect ring CPU ms p50 / p99 | TorchRL CPU ms p50 / p99 (wall p50) "
          "| ratio | TorchRL cache_values=True CPU ms p50 (wall p50) | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        ring = block_ring(n)
        for length in lengths:
            ours = timed(lambda r=ring, n_=length: r.sample_slices(batch, n_), calls)
            peer = torchrl_slice_speed("cartpole", n, batch, length, calls)
            cached = torchrl_slice_speed("cartpole", n, batch, length, calls, cache_values=True)
            if peer is None or cached is None:
                print("TorchRL is not installed: set TORCHRL_PYTHON (benchmarks/torchrl_peer.py)")
                return
            print(f"| {n:,} | {length} | {ours[0]:.3f} / {ours[1]:.3f} | {peer['cpu50']:.2f} / {peer['cpu99']:.2f} "
                  f"({peer['wall50']:.2f}) | {peer['cpu50'] / ours[0]:.1f}x | {cached['cpu50']:.2f} "
                  f"({cached['wall50']:.2f}) | {cached['cpu50'] / ours[0]:.1f}x |", flush=True)
        del ring


def timed(call: Callable[[], Any], calls: int, before: Callable[[], None] | None = None) -> tuple[float, float, float]:
    """(p50 CPU ms, p99 CPU ms, p50 wall ms) of ``calls`` calls (``before`` runs untimed before each)."""
    cpu, wall = [], []
    call()
    for _ in range(calls):
        if before is not None:
            before()
        c0, w0 = time.process_time(), time.perf_counter()
        call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return (float(np.percentile(cpu, 50)) * 1e3, float(np.percentile(cpu, 99)) * 1e3,
            float(np.percentile(wall, 50)) * 1e3)


def row(name: str, times: tuple[float, float, float], bar: str = "") -> None:
    p50, p99, wall = times
    print(f"| {name} | {p50:.3f} | {p99:.3f} | {wall:.3f} | {bar} |", flush=True)


def ring_rows(rows: int, calls: int, batch: int, length: int) -> None:
    ring = cartpole_ring(VectorRingBuffer, rows)
    prio = cartpole_ring(PrioritizedVectorRingBuffer, rows, alpha=0.6, beta=0.4)
    prio.update_weight(*(lambda b: (b["indices"], np.random.default_rng(1).random(b["indices"].size) * 5))(
        prio.sample(50_000)))
    print(f"rings: {ring.num_envs} envs x {ring.capacity} rows = {ring.num_envs * ring.capacity:,} rows, "
          f"{len(ring):,} transitions; batch {batch} x length {length}")
    print("| call | CPU ms p50 | CPU ms p99 | wall ms p50 | bar |")
    print("| --- | --- | --- | --- | --- |")
    row("ring, pad='none' (static)", timed(lambda: ring.sample_slices(batch, length), calls), "< 1 ms")
    row("ring, pad='both' (static)", timed(lambda: ring.sample_slices(batch, length, pad="both"), calls))
    row("ring, by='episode' (static)", timed(lambda: ring.sample_slices(batch, length, by="episode"), calls))
    row("ring, gamma=0.99 (static)", timed(lambda: ring.sample_slices(batch, length, gamma=0.99), calls))
    row("ring, stack_num=4 (static)", timed(lambda: ring.sample_slices(batch, length, stack_num=4), calls))
    row("ring: sample(256) for scale (static)", timed(lambda: ring.sample(batch), calls))
    row("prioritized, first step, pad='none' (static)", timed(lambda: prio.sample_slices(batch, length), calls),
        "< 2 ms")
    row("prioritized, max over steps (every window weighed)",
        timed(lambda: prio.sample_slices(batch, length, priority="max"), max(calls // 10, 5)))
    n = ring.num_envs
    ids, act, rew, no = np.arange(n), np.zeros(n, np.int64), np.ones(n), np.zeros(n, bool)
    obs = np.zeros((n, 4), np.float32)

    def write() -> None:
        ring.add(ids, act, rew, no, no, obs)

    def collect() -> None:
        for _ in range(125):
            write()

    row("ring, pad='none', after one add of every env",
        timed(lambda: ring.sample_slices(batch, length), max(calls // 10, 5), before=write))
    row("ring, pad='none', after 125 adds of every env",
        timed(lambda: ring.sample_slices(batch, length), max(calls // 10, 5), before=collect))


def pong_frames(steps: int, rng: np.random.Generator) -> np.ndarray:
    """Pong-like 84x84 frames: background 87, two paddles and a ball moving, the score band at the top."""
    frames = np.full((steps, 84, 84), 87, np.uint8)
    t = np.arange(steps)
    left = (34 + 25 * np.sin(t / 17.0)).astype(int)
    right = (34 + 25 * np.sin(t / 11.0 + 1.0) + rng.integers(-1, 2, steps)).astype(int)
    bx = (42 + 36 * np.sin(t / 23.0)).astype(int)
    by = (45 + 30 * np.sin(t / 13.0 + 2.0)).astype(int)
    frames[:, :8, :] = 236
    for i in range(steps):
        frames[i, left[i] : left[i] + 8, 8:10] = 213
        frames[i, right[i] : right[i] + 8, 74:76] = 92
        frames[i, by[i] : by[i] + 2, bx[i] : bx[i] + 1] = 236
    return frames


def stacks(frames: np.ndarray, k: int = 4) -> np.ndarray:
    idx = np.maximum(np.arange(len(frames))[:, None] + np.arange(1 - k, 1), 0)
    return frames[idx]


def pong_rows(steps: int, calls: int, batch: int, length: int) -> None:
    from vcollect.store import EpisodeStore, load_dataset

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        store = EpisodeStore.create("bench/pong-like-v0", space, spaces.Discrete(6), root=Path(tmp), frame_stack=4)
        written = 0
        while written < steps:
            t = int(min(rng.integers(800, 3001), steps - written))
            rew = np.zeros(t)
            rew[rng.integers(0, t, 20)] = rng.choice([-1.0, 1.0], 20)
            store.write_episode(stacks(pong_frames(t + 1, rng)), rng.integers(0, 6, t), rew,
                                np.eye(1, t, t - 1, dtype=bool)[0], np.zeros(t, bool), seed=None, env_id=0)
            written += t
        store.close()
        ds = load_dataset("bench/pong-like-v0", root=Path(tmp))
        on_disk = sum(p.stat().st_size for p in (Path(tmp) / "bench" / "pong-like-v0" / "shards").glob("*.h5"))
        print(f"\nPong-like dataset: {ds.total_episodes} episodes, {ds.total_steps:,} steps, frames "
              f"{(ds.total_steps + ds.total_episodes) * 84 * 84 / 2**20:.0f} MiB raw "
              f"({(ds.total_steps + ds.total_episodes) * 4 * 84 * 84 / 2**20:.0f} MiB as stacks), "
              f"{on_disk / 2**20:.1f} MiB on disk (frame_stack=4, zstd); batch {batch} x length {length}: "
              f"observations and next_observations {2 * batch * length * 4 * 84 * 84 / 2**20:.0f} MiB a call")
        print("| call | CPU ms p50 | CPU ms p99 | wall ms p50 | bar |")
        print("| --- | --- | --- | --- | --- |")
        row("dataset, pad='none', cache_bytes=0",
            timed(lambda: ds.sample_slices(batch, length, cache_bytes=0), calls), "p50 < 20 ms, p99 < 50 ms (10 GB)")
        row("dataset, next_observations=False, cache_bytes=0",
            timed(lambda: ds.sample_slices(batch, length, cache_bytes=0, next_observations=False), calls))
        row("dataset, 16 x 64, cache_bytes=0", timed(lambda: ds.sample_slices(16, length, cache_bytes=0), calls))
        row("dataset: sample_steps(256) for scale", timed(lambda: ds.sample_steps(batch, cache_bytes=0), calls))
        ds.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--pong-steps", type=int, default=30_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--skip-pong", action="store_true")
    parser.add_argument("--skip-rings", action="store_true")
    parser.add_argument("--torchrl", type=int, nargs="*", default=None, metavar="TRANSITIONS",
                        help="only the TorchRL comparison, at these stored transitions (e.g. 1000000 10000000)")
    parser.add_argument("--torchrl-lengths", type=int, nargs="+", default=[64, 4])
    args = parser.parse_args()
    if args.torchrl:
        torchrl_rows(args.torchrl, args.calls, args.batch, args.torchrl_lengths)
        return
    if not args.skip_rings:
        ring_rows(args.rows, args.calls, args.batch, args.length)
    if not args.skip_pong:
        pong_rows(args.pong_steps, max(args.calls // 10, 10), args.batch, args.length)


if __name__ == "__main__":
    main()
