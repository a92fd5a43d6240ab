"""Rendering speed: stored 84x84 Atari frames to MP4, and replay rendering against the env's own loop.

1. ``frames``: real ALE Pong frames (AtariPreprocessing: 84x84 gray, 4-frame stacks stored with
   ``frame_stack=4``) collected into a temporary dataset, then ``vcollect.render.episodes.render_video`` of
   the episode to an MP4 with labels. Frames/s are the frames written over the CPU time of this process
   plus the ffmpeg child it streams to (``resource.getrusage``), so the figure is per core of CPU.
2. ``replay``: ``Dataset.render_episode(source="replay")`` of a HalfCheetah episode (MuJoCo, offscreen EGL)
   against the env's own loop on the same seed and actions (``reset``, ``step``, ``render`` per step), CPU
   time of this process, alternating, best of ``--rounds``. The ratio is replay frames/s over own frames/s.

    MUJOCO_GL=egl python benchmarks/bench_render.py [--steps 1000] [--replay-steps 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import vcollect  # noqa: E402
from vcollect.render.episodes import render_video  # noqa: E402
from vcollect.store import EpisodeStore, load_dataset  # noqa: E402


def cpu() -> float:
    """CPU seconds of this process and its finished children (ffmpeg)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def collect(root: Path, dataset_id: str, make_env: Any, steps: int, frame_stack: int | None = None) -> vcollect.Dataset:
    envs = vcollect.make_vector(make_env, 1, backend="dummy")
    store = EpisodeStore.create(dataset_id, envs.single_observation_space, envs.single_action_space, root=root,
                                frame_stack=frame_stack)
    with vcollect.Collector(None, envs, store=store, seed=0, unfinished="truncate") as collector:
        collector.collect(n_step=steps, random=True, reset_before_collect=True)
    store.close()
    return load_dataset(dataset_id, root=root)


def bench_frames(root: Path, steps: int, rounds: int) -> None:
    import ale_py

    gym.register_envs(ale_py)

    def make() -> gym.Env[Any, Any]:
        env = gym.make("ALE/Pong-v5", frameskip=1)
        return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env), 4)

    dataset = collect(root, "bench/pong-v0", make, steps, frame_stack=4)
    frames = sum(len(dataset[i]) + 1 for i in range(dataset.total_episodes))
    best = float("inf")
    for _ in range(rounds):
        start, wall = cpu(), time.perf_counter()
        video = render_video(dataset, list(range(dataset.total_episodes)), root / "pong.mp4", fps=30)
        spent = cpu() - start
        best = min(best, spent)
        print(f"frames -> mp4: {video.frames} frames of {video.width}x{video.height} in {spent:.3f} s CPU "
              f"({time.perf_counter() - wall:.3f} s wall)")
    print(f"frames -> mp4: {frames / best:,.0f} frames/s per core of CPU (best of {rounds})")


def bench_replay(root: Path, steps: int, rounds: int) -> None:
    dataset = collect(root, "bench/cheetah-v0", "HalfCheetah-v5", steps)
    episode = dataset[0]
    size = {"width": 96, "height": 96}
    env = dataset.render_env(**size)
    own_env = gym.make("HalfCheetah-v5", render_mode="rgb_array", **size)
    replay_best = own_best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        frames = dataset.render_episode(0, env=env)
        replay_best = min(replay_best, time.process_time() - start)
        start = time.process_time()
        own_env.reset(seed=episode.seed)
        own = [own_env.render()]
        for action in episode.actions:
            own_env.step(action)
            own.append(own_env.render())
        own_best = min(own_best, time.process_time() - start)
        assert np.array_equal(frames, np.stack(own))
    n = len(episode) + 1
    print(f"replay: {n / replay_best:,.1f} frames/s; env's own loop: {n / own_best:,.1f} frames/s; "
          f"ratio {own_best / replay_best:.3f} (CPU time, best of {rounds})")
    env.close()
    own_env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="Pong steps stored (default 1000)")
    parser.add_argument("--replay-steps", type=int, default=100, help="HalfCheetah steps replayed (default 100)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench_frames(Path(tmp), args.steps, args.rounds)
        bench_replay(Path(tmp), args.replay_steps, args.rounds)


if __name__ == "__main__":
    main()
