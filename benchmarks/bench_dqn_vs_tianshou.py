"""DQN training wall-clock: vcollect's Collector + rings against Tianshou's Collector + VectorReplayBuffer.

The same training schedule on both sides, in one process (one after the other, or with ``--interleave``
a round of each in turn): CartPole-v1 on N in-process envs, ``--learning-starts`` random steps, then
rounds of ``train_frequency`` env steps (epsilon-greedy) followed by ``gradient_steps`` gradient steps on
batches sampled from the replay buffer, a hard target copy every ``target_every`` gradient steps; the same
network architecture, torch threads 1.
No evaluation. Each side runs ``--repeats`` times in alternating order (ABBA) and reports its best total
time and where it went: collection (``collect``), sampling (``sample``) and the gradient steps, and its
best CPU time (``time.process_time``; on a machine shared with other work, the steadier of the two).

Schedules (rows):

- the example's (examples/dqn_cartpole.py: 8 envs, 256 env steps then 128 gradient steps of batch 64 on
  a 256-256 MLP): dominated by the gradient steps;
- a collection-heavy one (8 envs, 8 env steps then 1 gradient step, 64-64 MLP);
- Tianshou's own CartPole DQN settings (its README's procedural example, examples/discrete/discrete_dqn.py:
  10 envs, ``collection_step_num_env_steps=10``, ``update_per_step=0.1`` i.e. 1 gradient step per
  collect, batch 64, a 128-128-128 MLP, lr 1e-3, gamma 0.9, target copy every 320 gradient steps,
  buffer 20,000, ``eps_train=0.1``), in three variants:

  - "same update": both sides run the example's ``dqn_update`` (imported from it) on the sampled arrays:
    byte-identical gradient-step code, so only the collectors and buffers differ;
  - "Tianshou's DQN.update" (n_step 3 as its example, and 1, its default): the Tianshou side runs as a
    Tianshou user's training loop does (the off-policy trainer's step without its logging, its buffer
    NaN check and test episodes): Tianshou's ``Net``, ``DiscreteQLearningPolicy`` and ``DQN`` algorithm,
    ``algorithm.update(sample_size=64, buffer=buffer)`` (it samples its Batch and computes n-step returns
    with the target network itself, MSE loss) inside ``policy_within_training_step``; the vcollect side
    runs the example's own update (1-step double-DQN targets, Huber loss, gradient-norm clip) on
    ``VectorRingBuffer.sample``: the same network passes, not the same arithmetic around them;
  - "the same DQN on both sides" (n_step 3 and 1): Tianshou's DQN as above against the example's
    ``dqn_update(..., huber=False, max_grad_norm=None)`` on ``sample(64, n_step=3, gamma=0.9)`` (resp.
    ``sample(64)``): the same arithmetic (tests/test_dqn_example.py checks both land on the same weights
    from the same transitions; tests/test_nstep_sampling.py that the n-step targets equal Tianshou's
    ``compute_nstep_return``), vcollect's envs seeded at their first reset only
    (``seed_every_reset=False``) as Tianshou seeds its envs once: a Tianshou user's DQN training against
    the same DQN written on vcollect. Once more with torch's fused Adam on both sides
    (``Adam(fused=True)``, Tianshou's ``TorchOptimizerFactory``): the same optimizer arithmetic in fewer
    kernels, which shortens the part both sides share.

The "bound" column is the speed-up vcollect would show if its side spent no time at all outside its
gradient steps (Tianshou's total over vcollect's gradient-step seconds): where it is under 2x, no data
layer can meet a 2x goal on that schedule.

    python benchmarks/bench_dqn_vs_tianshou.py [--total-steps 20000] [--repeats 3] [--interleave] [--only Tianshou]
"""

from __future__ import annotations

import argparse
import copy
import runpy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property, partial
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
dqn_update, linear_schedule = EXAMPLE["dqn_update"], EXAMPLE["linear_schedule"]


@dataclass(frozen=True)
class Schedule:
    """One benchmark row's training schedule (both sides run it)."""

    num_envs: int
    train_frequency: int  # env steps collected between trainings
    gradient_steps: int  # gradient steps each training
    hidden: tuple[int, ...]  # the MLP's hidden layer sizes
    batch_size: int = 64
    lr: float = 2.3e-3
    gamma: float = 0.99
    buffer_size: int = 50_000
    target_every: int = 128  # gradient steps between target copies
    epsilon: float | None = None  # fixed; None: the example's linear decay from 1.0 to 0.04 over 8,000 steps
    tianshou_dqn: bool = False  # Tianshou side: its DQN algorithm's update instead of dqn_update
    n_step: int = 3  # Tianshou DQN's n_step_return_horizon (only with tianshou_dqn)
    as_tianshou_dqn: bool = False  # vcollect side: dqn_update with Tianshou DQN's loss (MSE, no gradient clip)
    # and its envs seeded at their first reset only, as Tianshou's (seed_every_reset=False: the same env work)
    fused_adam: bool = False  # both sides: torch's fused Adam (the same arithmetic, one kernel per tensor)

    def adam(self, params: Any) -> torch.optim.Optimizer:
        """Adam as both sides make it (Tianshou's side through TorchOptimizerFactory with the same arguments)."""
        return torch.optim.Adam(params, lr=self.lr, fused=self.fused_adam or None)

    def sample_kwargs(self) -> dict[str, Any]:
        """The vcollect side's ``sample`` arguments: n-step targets as Tianshou's DQN computes them."""
        return {"n_step": self.n_step, "gamma": self.gamma} if self.as_tianshou_dqn and self.n_step > 1 else {}

    @cached_property
    def update(self) -> Callable[..., float]:
        """The vcollect side's gradient step (the example's, or the same with Tianshou DQN's defaults)."""
        return partial(dqn_update, huber=False, max_grad_norm=None) if self.as_tianshou_dqn else dqn_update


TIANSHOU_CARTPOLE = {"num_envs": 10, "train_frequency": 10, "gradient_steps": 1, "hidden": (128, 128, 128),
                     "lr": 1e-3, "gamma": 0.9, "buffer_size": 20_000, "target_every": 320, "epsilon": 0.1}
SCHEDULES = {
    "example (8 envs, 256 steps / 128 updates, 256-256 MLP)": Schedule(8, 256, 128, (256, 256)),
    "per vector step (8 envs, 8 steps / 1 update, 64-64 MLP)": Schedule(8, 8, 1, (64, 64)),
    "Tianshou's CartPole DQN settings (10 envs, 10 steps / 1 update, 128x3 MLP), same update":
        Schedule(**TIANSHOU_CARTPOLE),  # type: ignore[arg-type]
    "Tianshou's CartPole DQN settings, Tianshou side: its DQN.update (n_step 3, as its example)":
        Schedule(**TIANSHOU_CARTPOLE, tianshou_dqn=True),  # type: ignore[arg-type]
    "Tianshou's CartPole DQN settings, Tianshou side: its DQN.update (n_step 1)":
        Schedule(**TIANSHOU_CARTPOLE, tianshou_dqn=True, n_step=1),  # type: ignore[arg-type]
    "Tianshou's CartPole DQN settings, the same DQN on both sides (n_step 3 as its example, MSE, no clip)":
        Schedule(**TIANSHOU_CARTPOLE, tianshou_dqn=True, n_step=3, as_tianshou_dqn=True),  # type: ignore[arg-type]
    "Tianshou's CartPole DQN settings, the same DQN on both sides (n_step 1, MSE, no clip)":
        Schedule(**TIANSHOU_CARTPOLE, tianshou_dqn=True, n_step=1, as_tianshou_dqn=True),  # type: ignore[arg-type]
    "Tianshou's CartPole DQN settings, the same DQN on both sides (n_step 3), fused Adam on both sides":
        Schedule(**TIANSHOU_CARTPOLE, tianshou_dqn=True, n_step=3, as_tianshou_dqn=True,  # type: ignore[arg-type]
                 fused_adam=True),
}


class Timer:
    """Seconds spent collecting, sampling and in the gradient steps (wall clock), and the run's CPU
    seconds (``time.process_time``: all of this process's threads; what other processes on a loaded
    machine take from it does not count)."""

    def __init__(self) -> None:
        self.total = self.collect = self.sample = self.update = self.cpu = 0.0


def mlp(obs_dim: int, n_actions: int, hidden: tuple[int, ...]) -> nn.Module:
    """Linear + ReLU per hidden size, then a linear output: the layers of Tianshou's ``Net`` (and of the
    example's ``q_network`` for two equal hidden sizes)."""
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(obs_dim, size), nn.ReLU()]
        obs_dim = size
    return nn.Sequential(*layers, nn.Linear(obs_dim, n_actions))


def epsilon_at(s: Schedule, step: int) -> float:
    return linear_schedule(1.0, 0.04, 8_000, step) if s.epsilon is None else s.epsilon


Rounds = Iterator[None]  # a side's training: setup, then one yield per round (the random prefill is round 0)


def vcollect_rounds(args: argparse.Namespace, s: Schedule, t: Timer) -> Rounds:
    torch.manual_seed(args.seed)
    envs = vcollect.make_vector("CartPole-v1", s.num_envs, backend="dummy")
    q = mlp(4, 2, s.hidden)
    target, optimizer = copy.deepcopy(q), s.adam(q.parameters())
    explore = EpsilonGreedy(TorchPolicy(q, envs.single_action_space), envs.single_action_space, 1.0, seed=args.seed)
    buffer = vcollect.VectorRingBuffer(total_size=s.buffer_size, num_envs=s.num_envs, seed=args.seed)
    collector = vcollect.Collector(explore, envs, buffer, seed=args.seed, exploration_noise=True,
                                   seed_every_reset=not s.as_tianshou_dqn)
    updates = 0
    yield  # set up: not timed
    with collector:
        collector.collect(n_step=args.learning_starts, random=True, reset_before_collect=True)
        step = args.learning_starts
        yield
        while step < args.total_steps:
            explore.epsilon = epsilon_at(s, step)
            t0 = time.perf_counter()
            collector.collect(n_step=s.train_frequency)
            t.collect += time.perf_counter() - t0
            step += s.train_frequency
            for _ in range(s.gradient_steps):
                updates = sample_and_update(partial(buffer.sample, s.batch_size, **s.sample_kwargs()), q, target, optimizer,
                                            s, t, updates)
            yield


def sample_and_update(sample: Callable[[], Any], q: nn.Module, target: nn.Module, optimizer: Any, s: Schedule,
                      t: Timer, updates: int) -> int:
    """One gradient step of the example's ``dqn_update`` on ``sample()``'s batch, the target network copied
    every ``s.target_every`` updates, seconds added to ``t``; the updates done so far."""
    t0 = time.perf_counter()
    batch = sample()
    t1 = time.perf_counter()
    s.update(q, target, optimizer, batch, s.gamma)
    updates += 1
    if updates % s.target_every == 0:
        target.load_state_dict(q.state_dict())
    t.update += time.perf_counter() - t1
    t.sample += t1 - t0
    return updates


def tianshou_batch(buffer: Any, batch_size: int) -> dict[str, Any]:
    """A sample of Tianshou's buffer under the names the example's ``dqn_update`` reads."""
    sampled, _ = buffer.sample(batch_size)
    return {"observations": sampled.obs, "actions": sampled.act, "rewards": sampled.rew,
            "next_observations": sampled.obs_next, "terminations": sampled.terminated}


class TianshouQ(nn.Module):
    """The same MLP behind the (obs, state, info) -> (values, state) call Tianshou's DQN makes."""

    def __init__(self, q: nn.Module) -> None:
        super().__init__()
        self.q = q

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[torch.Tensor, Any]:
        return self.q(torch.as_tensor(obs, dtype=torch.float32)), state


def timed(fn: Callable[..., Any], timer: Timer) -> Callable[..., Any]:
    """``fn`` adding its seconds to ``timer.sample`` (Tianshou's update samples inside itself)."""
    def call(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            timer.sample += time.perf_counter() - t0
    return call


def tianshou_rounds(args: argparse.Namespace, s: Schedule, t: Timer) -> Rounds:
    from tianshou.algorithm import DQN
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory, TorchOptimizerFactory
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.utils.net.common import Net
    from tianshou.utils.torch_utils import policy_within_training_step

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # Tianshou's exploration noise draws from numpy's global generator
    envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(s.num_envs)])
    envs.seed(args.seed)
    buffer = VectorReplayBuffer(s.buffer_size, s.num_envs)
    updates = 0
    if s.tianshou_dqn:  # as a Tianshou user writes it
        policy = DiscreteQLearningPolicy(model=Net(state_shape=4, action_shape=2, hidden_sizes=list(s.hidden)),
                                         action_space=envs.action_space[0], eps_training=1.0)
        optim = TorchOptimizerFactory(torch.optim.Adam, lr=s.lr, fused=True) if s.fused_adam else \
            AdamOptimizerFactory(lr=s.lr)
        algorithm = DQN(policy=policy, optim=optim, gamma=s.gamma,
                        n_step_return_horizon=s.n_step, target_update_freq=s.target_every)
        collector = Collector(algorithm, envs, buffer, exploration_noise=True)
        buffer.sample = timed(buffer.sample, t)  # type: ignore[method-assign]
    else:
        q = mlp(4, 2, s.hidden)
        target, optimizer = copy.deepcopy(q), s.adam(q.parameters())
        policy = DiscreteQLearningPolicy(model=TianshouQ(q), action_space=envs.action_space[0])
        collector = Collector(policy, envs, buffer, exploration_noise=True)
    yield  # set up: not timed
    collector.reset()
    collector.collect(n_step=args.learning_starts, random=True)
    step = args.learning_starts
    yield
    while step < args.total_steps:
        policy.set_eps_training(epsilon_at(s, step))
        with policy_within_training_step(policy):
            t0 = time.perf_counter()
            collector.collect(n_step=s.train_frequency)
            t.collect += time.perf_counter() - t0
            step += s.train_frequency
            for _ in range(s.gradient_steps):
                if s.tianshou_dqn:
                    t0 = time.perf_counter()
                    algorithm.update(sample_size=s.batch_size, buffer=buffer)
                    t.update += time.perf_counter() - t0  # the sampling inside is taken off below
                    continue
                updates = sample_and_update(partial(tianshou_batch, buffer, s.batch_size), q, target, optimizer, s, t,
                                            updates)
        yield
    if s.tianshou_dqn:
        t.update -= t.sample
    envs.close()


def drive(sides: list[tuple[Rounds, Timer]]) -> None:
    """Run the sides' rounds to their end, round-robin (one side: one after the other), the order of each
    pass reversed from the last; each round's wall and CPU seconds go to its side's Timer."""
    for rounds, _ in sides:
        next(rounds)  # set up
    live, flip = list(sides), False
    while live:
        for side in (live[::-1] if flip else list(live)):
            rounds, t = side
            t0, c0 = time.perf_counter(), time.process_time()
            done = next(rounds, StopIteration) is StopIteration
            t.total += time.perf_counter() - t0
            t.cpu += time.process_time() - c0
            if done:
                live.remove(side)
        flip = not flip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=20_000)
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="runs per side; the best counts")
    parser.add_argument("--interleave", action="store_true",
                        help="run both sides in one loop, a training round of each in turn, so that a shared "
                        "machine's changing load falls on both alike (each side's caches then see the other's "
                        "work too); default: one after the other, ABBA")
    parser.add_argument("--only", default="", help="run only the schedules whose name contains this")
    args = parser.parse_args()
    torch.set_num_threads(1)
    mode = "interleaved round by round" if args.interleave else "one after the other, ABBA"
    print(f"CartPole-v1, in-process envs, {args.total_steps} env steps, torch threads 1, best of {args.repeats}, {mode}")
    print("| schedule | side | total s | CPU s | collect s | sample s | gradient steps s "
          "| vcollect speed-up: total / CPU / collect + sample | bound |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, schedule in SCHEDULES.items():
        if args.only not in name:
            continue
        runs: dict[str, list[Timer]] = {"ours": [], "theirs": []}
        for r in range(args.repeats):
            ours_t, theirs_t = Timer(), Timer()
            sides = [(vcollect_rounds(args, schedule, ours_t), ours_t), (tianshou_rounds(args, schedule, theirs_t), theirs_t)]
            if args.interleave:  # both trainings in one loop, a round of each in turn
                drive(sides)
            else:  # one after the other, alternating order (ABBA)
                for side in sides if r % 2 == 0 else sides[::-1]:
                    drive([side])
            runs["ours"].append(ours_t)
            runs["theirs"].append(theirs_t)
        t_ours, t_theirs = (min(runs[side], key=lambda t: t.total) for side in ("ours", "theirs"))
        ours, theirs = t_ours.total, t_theirs.total
        cpu_ours, cpu_theirs = (min(t.cpu for t in runs[side]) for side in ("ours", "theirs"))
        data_ours, data_theirs = t_ours.collect + t_ours.sample, t_theirs.collect + t_theirs.sample
        # bound: the speed-up if vcollect's side spent nothing at all outside its gradient steps
        ratio = (f"{theirs / ours:.2f}x / {cpu_theirs / cpu_ours:.2f}x / {data_theirs / data_ours:.1f}x "
                 f"| {theirs / t_ours.update:.2f}x")
        for side, total, cpu, t in (("Tianshou 2.0.1", theirs, cpu_theirs, t_theirs), ("vcollect", ours, cpu_ours, t_ours)):
            print(f"| {name} | {side} | {total:.1f} | {cpu:.1f} | {t.collect:.2f} | {t.sample:.2f} | {t.update:.1f} "
                  f"| {ratio if side == 'vcollect' else ' |'} |", flush=True)


if __name__ == "__main__":
    main()
