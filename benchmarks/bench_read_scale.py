"""Reading a frame dataset larger than the sample cache: sample_steps latency and iterate_episodes speed.

Builds a dataset of ``--gb`` GB of raw Pong frame stacks (4x84x84 uint8; real frames from ALE, gathered
once and reused episode after episode) with the default compression and, with ``--raw``, an uncompressed
copy; then times ``sample_steps(256)`` (the cache stays unbuilt: the columns exceed it) and
``iterate_episodes`` over the whole dataset, beside ``dd`` reading the same shard files. Usage:

    python benchmarks/bench_read_scale.py [--gb 10] [--raw] [--samples 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from vcollect import EpisodeStore, load_dataset

EPISODE_STEPS = 1_000


def pong_frames(n: int) -> np.ndarray:
    """``n`` + 1 consecutive frame stacks from ALE Pong under random actions (resets included)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(
        gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)), 4)
    obs, _ = env.reset(seed=0)
    frames = [obs]
    while len(frames) <= n:
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        frames.append(obs)
        if terminated or truncated:
            frames.append(env.reset()[0])
    env.close()
    return np.stack(frames[: n + 1])


def build(root: Path, dataset_id: str, gb: float, compression: str, frames: np.ndarray) -> float:
    """Write episodes of EPISODE_STEPS steps until ``gb`` GB of observations; return the seconds it took."""
    space = gym.spaces.Box(0, 255, frames.shape[1:], np.uint8)
    store = EpisodeStore.create(dataset_id, space, gym.spaces.Discrete(6), root=root, compression=compression,
                                shard_steps=20_000, shard_bytes=None)
    episodes = max(1, int(gb * 1e9 // (frames[0].nbytes * (EPISODE_STEPS + 1))))
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for i in range(episodes):
        first = int(rng.integers(0, len(frames) - EPISODE_STEPS - 1))
        obs = frames[first : first + EPISODE_STEPS + 1]
        done = np.zeros(EPISODE_STEPS, bool)
        done[-1] = True
        store.write_episode(obs, rng.integers(0, 6, EPISODE_STEPS), rng.normal(size=EPISODE_STEPS), done,
                            np.zeros(EPISODE_STEPS, bool), seed=i, env_id=0)
    store.close()
    return time.perf_counter() - start


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path / "shards").glob("*.h5"))


def dd_speed(path: Path) -> float:
    """Bytes/s of ``dd`` reading every shard file of the dataset (1 MiB blocks)."""
    files = sorted((path / "shards").glob("*.h5"))
    start = time.perf_counter()
    for f in files:
        subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=1M"], check=True, capture_output=True)
    return disk_bytes(path) / (time.perf_counter() - start)


def measure(root: Path, dataset_id: str, samples: int) -> dict[str, float]:
    data = load_dataset(dataset_id, root=root)
    lat = []
    for _ in range(samples):
        start = time.perf_counter()
        data.sample_steps(256)
        lat.append(time.perf_counter() - start)
    assert data.sample_cache_nbytes == 0, "the sample cache was built: make the dataset larger than it"
    raw = 0
    start = time.perf_counter()
    for episode in data.iterate_episodes():
        raw += episode.observations.nbytes
    seconds = time.perf_counter() - start
    path = data.path
    return {
        "p50_ms": float(np.percentile(lat, 50) * 1e3), "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "iterate_raw_MBps": raw / seconds / 1e6, "iterate_disk_MBps": disk_bytes(path) / seconds / 1e6,
        "dd_MBps": dd_speed(path) / 1e6, "disk_GB": disk_bytes(path) / 1e9, "raw_GB": raw / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=10.0, help="raw GB of observations to write (default 10)")
    parser.add_argument("--raw", action="store_true", help="also build and read an uncompressed copy")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--keep", type=Path, default=None, help="build under DIR and keep it (default: a temp dir)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="vcollect-readscale-"))
    frames = pong_frames(5_000)
    try:
        print("| dataset | raw GB | disk GB | write s | sample_steps(256) p50 ms | p99 ms | iterate raw MB/s "
              "| iterate disk MB/s | dd MB/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for compression in ("auto", *(("none",) if args.raw else ())):
            dataset_id = f"bench/pong-{compression}-v0"
            write_s = build(root, dataset_id, args.gb, compression, frames)
            m = measure(root, dataset_id, args.samples)
            print(f"| {compression} | {m['raw_GB']:.2f} | {m['disk_GB']:.3f} | {write_s:.1f} | {m['p50_ms']:.2f} "
                  f"| {m['p99_ms']:.2f} | {m['iterate_raw_MBps']:,.0f} | {m['iterate_disk_MBps']:,.0f} "
                  f"| {m['dd_MBps']:,.0f} |")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
