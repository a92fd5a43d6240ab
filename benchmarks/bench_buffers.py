"""create_dataset_from_buffers: vcollect's against Minari's, on the same EpisodeBuffers (CartPole, random).

Both sides get buffers built the way Minari's docs build them (a reset's step data, then one per step),
and write a new dataset; the table gives seconds (best of ``--repeats``) and the ratio. Minari is
measured when installed (its ``[create]`` extra: jax builds its buffers). Usage:

    python benchmarks/bench_buffers.py [--episodes 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
import time
import warnings
from typing import Any

import gymnasium as gym


def record(episodes: int, buffer_cls: Any) -> list[Any]:
    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    buffers = []
    for e in range(episodes):
        obs, _ = env.reset(seed=e)
        buf = buffer_cls(id=e, seed=e, observations=obs)  # as Minari's DataCollector starts an episode
        done = False
        while not done:
            action = env.action_space.sample()
            obs, reward, terminated, truncated, _ = env.step(action)
            buf = buf.add_step_data({"observation": obs, "action": action, "reward": reward,
                                     "terminated": terminated, "truncated": truncated, "info": {}})
            done = terminated or truncated
        buffers.append(buf)
    return buffers


def best(fn: Any, repeats: int) -> float:
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import vcollect

    root = tempfile.mkdtemp(prefix="vcollect-buffers-")
    os.environ["MINARI_DATASETS_PATH"] = os.path.join(root, "minari")
    warnings.simplefilter("ignore")
    try:
        ours = record(args.episodes, vcollect.EpisodeBuffer)
        steps = sum(len(b) for b in ours)
        mine = best(lambda i: vcollect.create_dataset_from_buffers(
            f"bench/buffers{i}-v0", ours, env="CartPole-v1", root=root), args.repeats)
        print(f"| what | seconds | steps/s |\n|---|---:|---:|\n| vcollect, {args.episodes} episodes ({steps} steps) "
              f"| {mine:.3f} | {steps / mine:,.0f} |")
        if importlib.util.find_spec("minari") is not None:
            import minari
            from minari.data_collector.episode_buffer import EpisodeBuffer

            theirs_buffers = record(args.episodes, EpisodeBuffer)
            theirs = best(lambda i: minari.create_dataset_from_buffers(
                f"bench/buffers{i}-v0", theirs_buffers, env="CartPole-v1"), args.repeats)
            print(f"| minari {minari.__version__} | {theirs:.3f} | {steps / theirs:,.0f} |")
            print(f"\nvcollect is {theirs / mine:.1f}x faster")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
