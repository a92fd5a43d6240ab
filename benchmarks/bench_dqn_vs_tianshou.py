"""DQN training wall-clock: vcollect's Collector + rings against Tianshou's Collector + VectorReplayBuffer.

The same training schedule on both sides, in one process, one after the other: CartPole-v1 on N
in-process envs, ``--learning-starts`` random steps, then rounds of ``--train-frequency`` env steps
(epsilon-greedy, the same linear schedule) followed by ``--gradient-steps`` gradient steps on batches
sampled from the replay buffer; the same network, the same ``dqn_update`` (examples/dqn_cartpole.py's,
imported from it), torch threads 1. No evaluation. Each side runs ``--repeats`` times in alternating order
and reports its best total time and where it went: collection (``collect``), sampling (``sample``) and
the gradient steps.

Two schedules by default: the example's (256 env steps, then 128 gradient steps of batch 64 on a 256-256
MLP: dominated by the gradient steps, which are the same torch code on both sides) and a collection-heavy
one (8 env steps, one per env, then 1 gradient step on a 64-64 MLP, Tianshou's ``update_per_step=0.125``).

    python benchmarks/bench_dqn_vs_tianshou.py [--total-steps 20000] [--num-envs 8]
"""

from __future__ import annotations

import argparse
import copy
import runpy
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import vcollect
from vcollect.policies import EpsilonGreedy, TorchPolicy

EXAMPLE = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "dqn_cartpole.py"),
                         run_name="vcollect_example_dqn_cartpole")
q_network, dqn_update, linear_schedule = EXAMPLE["q_network"], EXAMPLE["dqn_update"], EXAMPLE["linear_schedule"]

SCHEDULES = {  # name: (train_frequency, gradient_steps, batch_size, hidden)
    "example (256 steps / 128 updates, 256-256 MLP)": (256, 128, 64, 256),
    "per vector step (8 steps / 1 update, 64-64 MLP)": (8, 1, 64, 64),
}


class Timer:
    def __init__(self) -> None:
        self.collect = self.sample = self.update = 0.0


def run_vcollect(args: argparse.Namespace, schedule: tuple[int, int, int, int]) -> tuple[float, Timer]:
    frequency, gradient_steps, batch_size, hidden = schedule
    torch.manual_seed(args.seed)
    envs = vcollect.make_vector("CartPole-v1", args.num_envs, backend="dummy")
    q = q_network(4, 2, hidden)
    target, optimizer = copy.deepcopy(q), torch.optim.Adam(q.parameters(), lr=2.3e-3)
    explore = EpsilonGreedy(TorchPolicy(q, envs.single_action_space), envs.single_action_space, 1.0, seed=args.seed)
    buffer = vcollect.VectorRingBuffer(total_size=args.buffer_size, num_envs=args.num_envs, seed=args.seed)
    t = Timer()
    start = time.perf_counter()
    with vcollect.Collector(explore, envs, buffer, seed=args.seed, exploration_noise=True) as collector:
        collector.collect(n_step=args.learning_starts, random=True, reset_before_collect=True)
        step = args.learning_starts
        while step < args.total_steps:
            explore.epsilon = linear_schedule(1.0, 0.04, 8_000, step)
            t0 = time.perf_counter()
            collector.collect(n_step=frequency)
            t.collect += time.perf_counter() - t0
            step += frequency
            for _ in range(gradient_steps):
                t0 = time.perf_counter()
                batch = buffer.sample(batch_size)
                t1 = time.perf_counter()
                dqn_update(q, target, optimizer, batch, 0.99)
                t.update += time.perf_counter() - t1
                t.sample += t1 - t0
    return time.perf_counter() - start, t


class TianshouQ(nn.Module):
    """The same MLP behind the (obs, state, info) -> (values, state) call Tianshou's DQN makes."""

    def __init__(self, q: nn.Module) -> None:
        super().__init__()
        self.q = q

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[torch.Tensor, Any]:
        return self.q(torch.as_tensor(obs, dtype=torch.float32)), state


def run_tianshou(args: argparse.Namespace, schedule: tuple[int, int, int, int]) -> tuple[float, Timer]:
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv

    frequency, gradient_steps, batch_size, hidden = schedule
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # Tianshou's exploration noise draws from numpy's global generator
    envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(args.num_envs)])
    envs.seed(args.seed)
    q = q_network(4, 2, hidden)
    target, optimizer = copy.deepcopy(q), torch.optim.Adam(q.parameters(), lr=2.3e-3)
    policy = DiscreteQLearningPolicy(model=TianshouQ(q), action_space=envs.action_space[0])
    buffer = VectorReplayBuffer(args.buffer_size, args.num_envs)
    collector = Collector(policy, envs, buffer, exploration_noise=True)
    t = Timer()
    start = time.perf_counter()
    collector.reset()
    collector.collect(n_step=args.learning_starts, random=True)
    step = args.learning_starts
    while step < args.total_steps:
        policy.eps_training = policy.eps_inference = linear_schedule(1.0, 0.04, 8_000, step)
        t0 = time.perf_counter()
        collector.collect(n_step=frequency)
        t.collect += time.perf_counter() - t0
        step += frequency
        for _ in range(gradient_steps):
            t0 = time.perf_counter()
            sampled, _ = buffer.sample(batch_size)
            batch = {"observations": sampled.obs, "actions": sampled.act, "rewards": sampled.rew,
                     "next_observations": sampled.obs_next, "terminations": sampled.terminated}
            t1 = time.perf_counter()
            dqn_update(q, target, optimizer, batch, 0.99)
            t.update += time.perf_counter() - t1
            t.sample += t1 - t0
    elapsed = time.perf_counter() - start
    envs.close()
    return elapsed, t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=20_000)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--buffer-size", type=int, default=50_000)
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, alternating order; the best counts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"CartPole-v1, {args.num_envs} in-process envs, {args.total_steps} env steps, torch threads 1")
    print("| schedule | side | total s | collect s | sample s | gradient steps s | vcollect speed-up (total / collect+sample) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, schedule in SCHEDULES.items():
        runs: dict[str, list[tuple[float, Timer]]] = {"ours": [], "theirs": []}
        for r in range(args.repeats):  # alternating order (ABBA), the faster run of each side counts
            sides = (("ours", run_vcollect), ("theirs", run_tianshou))
            for side, run in sides if r % 2 == 0 else sides[::-1]:
                runs[side].append(run(args, schedule))
        ours, t_ours = min(runs["ours"], key=lambda run: run[0])
        theirs, t_theirs = min(runs["theirs"], key=lambda run: run[0])
        data_ours, data_theirs = t_ours.collect + t_ours.sample, t_theirs.collect + t_theirs.sample
        for side, total, t in (("Tianshou 2.0.1", theirs, t_theirs), ("vcollect", ours, t_ours)):
            ratio = f"{theirs / ours:.2f}x / {data_theirs / data_ours:.1f}x" if side == "vcollect" else ""
            print(f"| {name} | {side} | {total:.1f} | {t.collect:.1f} | {t.sample:.2f} | {t.update:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
