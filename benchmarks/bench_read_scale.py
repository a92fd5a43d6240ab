"""Reading a frame dataset larger than the sample cache: sample_steps latency and iterate_episodes against dd.

Builds a dataset of ``--gb`` GB of raw Pong frame stacks (4x84x84 uint8; real frames from ALE, gathered
once and reused episode after episode) with the default compression (Zstandard frames); with
``--frame-stack`` the same episodes stored once per frame (``frame_stack=4``), with ``--raw`` an
uncompressed copy. For each it times ``sample_steps(256)`` (the cache stays unbuilt: the columns exceed
it; wall and CPU time per call) and, alternating round by round, ``dd`` and ``iterate_episodes`` over the
same shard files, each once after evicting the files from the page cache (``posix_fadvise(DONTNEED)``,
checked with ``fincore`` where it is installed) and once with them cached. Speeds are given both as shard
file bytes per second (what ``dd`` measures) and as decoded observation bytes per second. Usage:

    python benchmarks/bench_read_scale.py [--gb 10] [--frame-stack] [--raw] [--samples 300] [--keep DIR]

``--keep DIR`` builds under DIR and keeps the datasets; a later run with the same DIR and ``--gb`` reuses them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from vcollect import EpisodeStore, load_dataset
from vcollect.store.read.reader import StoredDataset
from vcollect.store.write.frame_stack import FrameStack, rebuild_episode

EPISODE_STEPS = 1_000
STACK = 4


def pong_frames(n: int) -> np.ndarray:
    """``n`` + 1 consecutive frame stacks from ALE Pong under random actions (resets included)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(
        gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)), STACK)
    obs, _ = env.reset(seed=0)
    frames = [obs]
    while len(frames) <= n:
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        frames.append(obs)
        if terminated or truncated:
            frames.append(env.reset()[0])
    env.close()
    return np.stack(frames[: n + 1])


def build(root: Path, dataset_id: str, gb: float, compression: str, frames: np.ndarray, stacked: bool) -> float:
    """Write episodes of EPISODE_STEPS steps until ``gb`` GB of observations; return the seconds it took.

    With ``stacked`` each episode's stacks are rebuilt from its newest frames as gymnasium's
    FrameStackObservation pads a reset, so the store may keep each frame once (``frame_stack``)."""
    space = gym.spaces.Box(0, 255, frames.shape[1:], np.uint8)
    store = EpisodeStore.create(dataset_id, space, gym.spaces.Discrete(6), root=root, compression=compression,
                                shard_steps=20_000, shard_bytes=None, frame_stack=STACK if stacked else None)
    episodes = max(1, int(gb * 1e9 // (frames[0].nbytes * (EPISODE_STEPS + 1))))
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for i in range(episodes):
        first = int(rng.integers(0, len(frames) - EPISODE_STEPS - 1))
        obs = frames[first : first + EPISODE_STEPS + 1]
        if stacked:
            obs = rebuild_episode(np.ascontiguousarray(obs[:, -1]), FrameStack(STACK))
        done = np.zeros(EPISODE_STEPS, bool)
        done[-1] = True
        store.write_episode(obs, rng.integers(0, 6, EPISODE_STEPS), rng.normal(size=EPISODE_STEPS), done,
                            np.zeros(EPISODE_STEPS, bool), seed=i, env_id=0)
    store.close()
    return time.perf_counter() - start


def frames_nbytes(space: gym.Space[np.ndarray]) -> int:
    """Bytes of one observation (a frame stack) as the reader hands it over."""
    assert space.shape is not None and space.dtype is not None
    return int(np.prod(space.shape)) * np.dtype(space.dtype).itemsize


def shard_files(path: Path) -> list[Path]:
    return sorted((path / "shards").glob("*.h5"))


def evict(files: list[Path]) -> int:
    """Drop ``files`` from this machine's page cache; returns the bytes fincore still finds cached (-1: unknown)."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if shutil.which("fincore") is None:
        return -1
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(line) for line in out.split())


def dd_seconds(files: list[Path]) -> float:
    """Seconds ``dd`` takes to read every file (1 MiB blocks)."""
    start = time.perf_counter()
    for f in files:
        subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=1M"], check=True, capture_output=True)
    return time.perf_counter() - start


def iterate_seconds(dataset_id: str, root: Path) -> tuple[float, int]:
    """Seconds a fresh load + ``iterate_episodes`` over the whole dataset takes, and the observation bytes."""
    start = time.perf_counter()
    raw = 0
    for episode in load_dataset(dataset_id, root=root).iterate_episodes():
        raw += episode.observations.nbytes
    return time.perf_counter() - start, raw


def sample_latency(dataset_id: str, root: Path, samples: int) -> dict[str, float]:
    data = load_dataset(dataset_id, root=root)
    data.set_seed(0)
    for _ in range(10):  # chunk tables read, maps opened
        data.sample_steps(256)
    wall, cpu = [], []
    for _ in range(samples):
        start, start_cpu = time.perf_counter(), time.thread_time()
        data.sample_steps(256)
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    assert StoredDataset(data).sample_cache_nbytes == 0, "the sample cache was built: make the dataset larger than it"
    return {"p50_ms": float(np.percentile(wall, 50) * 1e3), "p99_ms": float(np.percentile(wall, 99) * 1e3),
            "cpu_p50_ms": float(np.percentile(cpu, 50) * 1e3), "cpu_p99_ms": float(np.percentile(cpu, 99) * 1e3)}


def read_speeds(dataset_id: str, root: Path, rounds: int) -> dict[str, float]:
    """dd and iterate, cold and cached, alternating; medians over ``rounds`` in MB/s (1e6 bytes)."""
    files = shard_files(load_dataset(dataset_id, root=root).path)
    disk = sum(f.stat().st_size for f in files)
    runs: dict[str, list[float]] = {"dd_cold": [], "it_cold": [], "dd_hot": [], "it_hot": []}
    left = 0
    raw = 0
    for _ in range(rounds):
        left = max(left, evict(files))
        runs["dd_cold"].append(dd_seconds(files))
        left = max(left, evict(files))
        seconds, raw = iterate_seconds(dataset_id, root)
        runs["it_cold"].append(seconds)
        runs["dd_hot"].append(dd_seconds(files))
        runs["it_hot"].append(iterate_seconds(dataset_id, root)[0])
    med = {k: float(np.median(v)) for k, v in runs.items()}
    return {
        "disk_GB": disk / 1e9, "raw_GB": raw / 1e9, "cached_after_evict_MB": left / 1e6,
        "dd_cold": disk / med["dd_cold"] / 1e6, "dd_hot": disk / med["dd_hot"] / 1e6,
        "it_cold_disk": disk / med["it_cold"] / 1e6, "it_cold_frames": raw / med["it_cold"] / 1e6,
        "it_hot_disk": disk / med["it_hot"] / 1e6, "it_hot_frames": raw / med["it_hot"] / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=10.0, help="raw GB of observations to write (default 10)")
    parser.add_argument("--frame-stack", action="store_true", help="also a copy stored one frame a row")
    parser.add_argument("--raw", action="store_true", help="also build and read an uncompressed copy")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of dd and iterate, cold and cached (0: none)")
    parser.add_argument("--keep", type=Path, default=None, help="build under DIR and keep it (default: a temp dir)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="vcollect-readscale-"))
    kinds = [("auto", False), *([("auto", True)] if args.frame_stack else []), *([("none", False)] if args.raw else [])]
    frames: np.ndarray | None = None
    print(f"load before: {os.getloadavg()}")
    try:
        sample_rows, read_rows = [], []
        for compression, stacked in kinds:
            name = f"{compression}{'-stack4' if stacked else ''}"
            dataset_id = f"bench/pong-{name}-{round(args.gb * 1000)}mb-v0"
            write_s = "(kept)"
            if not (root / "bench" / f"pong-{name}-{round(args.gb * 1000)}mb-v0").exists():
                frames = pong_frames(5_000) if frames is None else frames
                write_s = f"{build(root, dataset_id, args.gb, compression, frames, stacked):.1f}"
            s = sample_latency(dataset_id, root, args.samples)
            data = load_dataset(dataset_id, root=root)
            raw_gb = (data.total_steps + data.total_episodes) * frames_nbytes(data.observation_space) / 1e9
            disk_gb = sum(f.stat().st_size for f in shard_files(data.path)) / 1e9
            sample_rows.append(f"| {name} | {raw_gb:.2f} | {disk_gb:.3f} | {write_s} | {s['p50_ms']:.2f} "
                               f"| {s['p99_ms']:.2f} | {s['cpu_p50_ms']:.2f} | {s['cpu_p99_ms']:.2f} |")
            if not args.rounds:
                continue
            r = read_speeds(dataset_id, root, args.rounds)
            read_rows.append(
                f"| {name} | {r['dd_cold']:,.0f} | {r['it_cold_disk']:,.0f} | {r['it_cold_disk'] / r['dd_cold']:.2f} "
                f"| {r['it_cold_frames']:,.0f} | {r['it_cold_frames'] / r['dd_cold']:.2f} | {r['dd_hot']:,.0f} "
                f"| {r['it_hot_disk']:,.0f} | {r['it_hot_frames']:,.0f} | {r['cached_after_evict_MB']:.0f} |")
        print("| dataset | raw GB | disk GB | write s | sample_steps(256) p50 ms | p99 ms | CPU p50 ms | CPU p99 ms |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(sample_rows))
        print()
        print("| dataset | dd cold MB/s | iterate cold, file MB/s | / dd | iterate cold, frames MB/s | / dd "
              "| dd cached MB/s | iterate cached, file MB/s | iterate cached, frames MB/s | MB cached after evict |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print("\n".join(read_rows) if read_rows else "| (--rounds 0) |")
        print(f"load after: {os.getloadavg()}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
