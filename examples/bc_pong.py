"""Behaviour cloning on Atari Pong frames, read from a vcollect dataset by a torch DataLoader.

Top to bottom: (1) a teacher policy plays ALE Pong (84x84 grayscale, 4-frame stacks) in subprocess envs
and every episode goes into a dataset (frames compressed with Zstandard by default); (2) a small CNN
learns the teacher's actions from ``dataset.as_torch_dataset()`` through a DataLoader whose worker
processes read the shards themselves; (3) its accuracy on held-out episodes is printed beside the
share of the teacher's most common action (what a constant guess would score).

The teacher is a fixed linear map of how the newest frame differs from the empty court: its actions
depend on where the ball and paddles are, so there is something to learn. Needs the torch and atari
extras: ``pip install 'vcollect[torch,atari]'``. Run ``python examples/bc_pong.py --help`` for sizes.
"""

from __future__ import annotations

import argparse
import sys

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:
    sys.exit("examples/bc_pong.py needs the torch extra: pip install 'vcollect[torch]'")
try:
    import ale_py
except ImportError:
    sys.exit("examples/bc_pong.py needs the atari extra: pip install 'vcollect[atari]'")

import gymnasium as gym
import numpy as np

import vcollect
from vcollect.envs import SubprocVectorEnv
from vcollect.policies import TorchPolicy


def make_pong() -> gym.Env:
    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, max_episode_steps=500)
    return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env), 4)


class Teacher(torch.nn.Module):
    """Logits = W pool(newest frame - empty court): a deterministic policy reacting to where the paddles and
    the ball are (the court is subtracted, and 12x12 average pooling leaves a 7x7 map of them)."""

    def __init__(self, court: np.ndarray, n_actions: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.register_buffer("court", torch.as_tensor(court, dtype=torch.float32))
        self.register_buffer("weights", torch.randn(49, n_actions, generator=generator))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        moving = torch.nn.functional.avg_pool2d((frames[:, -1:] - self.court).abs(), 12).flatten(1)
        return moving @ self.weights


class Student(torch.nn.Module):
    """A small CNN over the 4-frame stack, less the mean frame stack of the training data (without that the
    static court drowns the few pixels that move, and the net learns only the commonest action)."""

    def __init__(self, mean_frames: np.ndarray, n_actions: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean_frames, dtype=torch.float32))
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(4, 16, 8, stride=4), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 4, stride=2), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Linear(32 * 9 * 9, 128), torch.nn.ReLU(), torch.nn.Linear(128, n_actions),
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.net((frames.float() - self.mean) / 32.0)


def collect(dataset_id: str, steps: int, num_envs: int, root: str | None) -> vcollect.Dataset:
    court = make_pong().reset(seed=0)[0][-1]
    envs = SubprocVectorEnv([make_pong] * num_envs)
    teacher = TorchPolicy(Teacher(court, int(envs.single_action_space.n)), envs.single_action_space)
    store = vcollect.EpisodeStore.create(dataset_id, envs.single_observation_space, envs.single_action_space,
                                         root=root, overwrite=True, metadata={"algorithm_name": "linear teacher"})
    with vcollect.Collector(teacher, envs, store=store, seed=0, unfinished="truncate") as collector:
        collector.reset()
        stats = collector.collect(n_step=steps)
    store.close()
    print(f"collected {stats.n_collected_steps} steps in {stats.n_collected_episodes} finished episodes "
          f"({stats.collect_speed:,.0f} steps/s)")
    return vcollect.load_dataset(dataset_id, root=root)


def accuracy(model: torch.nn.Module, loader: DataLoader) -> float:
    right = total = 0
    with torch.no_grad():
        for batch in loader:
            right += int((model(batch["observations"]).argmax(1) == batch["actions"]).sum())
            total += len(batch["actions"])
    return right / total


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="examples/pong-teacher-v0", help="dataset id to write")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps the teacher plays")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--root", default=None, help="datasets root (default: $VCOLLECT_DATASETS_PATH or ~/.vcollect/datasets)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # this script's own training; the workers are separate processes

    dataset = collect(args.dataset, args.steps, args.num_envs, args.root)
    held_out = max(1, dataset.total_episodes // 5)
    train, test = vcollect.split_dataset(dataset, [dataset.total_episodes - held_out, held_out], seed=0)
    loader = DataLoader(train.as_torch_dataset(), batch_size=64, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0, timeout=300 if args.workers else 0)
    test_loader = DataLoader(test.as_torch_dataset(), batch_size=256, num_workers=0)
    mean_frames = train.sample_steps(1024, cache_bytes=0)["observations"].mean(axis=0)
    model = Student(mean_frames, int(dataset.action_space.n))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch["observations"]), batch["actions"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}, held-out accuracy {accuracy(model, test_loader):.3f}")
    actions = np.concatenate([e.actions for e in test.iterate_episodes()])
    constant = np.bincount(actions).max() / len(actions)
    final = accuracy(model, test_loader)
    print(f"held-out accuracy {final:.3f}; always guessing the commonest action: {constant:.3f}")
    return {"accuracy": final, "constant": float(constant), "steps": float(dataset.total_steps)}


if __name__ == "__main__":
    main()
