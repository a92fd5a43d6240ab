"""User story: "Train DQN on CartPole with vcollect as the data layer, in one file I can read top to bottom."

CleanRL-style DQN (double Q-learning targets, Huber loss, a hard-copied target network; the schedule of
rl-baselines3-zoo's CartPole DQN: 128 gradient steps of batch 64 after every 256 env steps) on CartPole-v1:
vcollect's ``Collector`` steps N envs with a ``TorchPolicy`` wrapped in ``EpsilonGreedy`` exploration,
every transition goes into the rings (``VectorRingBuffer``, given its spaces by the collector), and the
gradient steps sample from them. A greedy evaluation every ``--eval-every`` env steps stops training once
its mean return reaches ``--target-return`` (475, CartPole-v1's bar); the last evaluation's episodes are
stored as a dataset (an expert dataset, once solved).

Needs the torch extra (``pip install 'vcollect[torch]'``); without it, it says so in one line and exits.

    python examples/dqn_cartpole.py                       # up to 100k env steps, stops when solved
    python examples/dqn_cartpole.py --total-steps 20000   # a shorter budget
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import vcollect
from vcollect.policies import EpsilonGreedy

try:
    import torch
    from torch import nn

    from vcollect.policies import TorchPolicy  # imports torch too
except ImportError:  # one line naming the extra, not a traceback
    sys.exit("examples/dqn_cartpole.py needs the torch extra: pip install 'vcollect[torch]'")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-steps", type=int, default=100_000, help="env steps budget")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--buffer-size", type=int, default=50_000, help="ring rows in all (split between the envs)")
    parser.add_argument("--learning-starts", type=int, default=1_000, help="random steps before training")
    parser.add_argument("--train-frequency", type=int, default=256, help="env steps collected between trainings")
    parser.add_argument("--gradient-steps", type=int, default=128, help="gradient steps each training")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=2.3e-3)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--target-every", type=int, default=128, help="gradient steps between target copies")
    parser.add_argument("--start-epsilon", type=float, default=1.0)
    parser.add_argument("--end-epsilon", type=float, default=0.04)
    parser.add_argument("--exploration-steps", type=int, default=8_000, help="env steps epsilon decays over")
    parser.add_argument("--eval-every", type=int, default=2_500, help="env steps between greedy evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--target-return", type=float, default=475.0, help="stop when evaluation reaches it")
    parser.add_argument("--dataset", default="examples/cartpole-dqn-v0")
    parser.add_argument("--root", default=None)
    return parser.parse_args(argv)


def q_network(obs_dim: int, n_actions: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    return end + (start - end) * max(0.0, 1.0 - t / duration)


def dqn_update(q: nn.Module, target: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, Any],
               gamma: float, *, huber: bool = True, max_grad_norm: float | None = 10.0) -> float:
    """One gradient step on a batch of transitions: double-DQN target, Huber loss (mean squared error with
    ``huber=False``), the gradient's norm clipped to ``max_grad_norm`` (None: not clipped; with
    ``huber=False`` this is the update Tianshou's ``DQN`` makes by default). Truncated episodes
    (CartPole's 500-step limit) bootstrap; only terminations end the return. A batch sampled with
    ``n_step=n, gamma=gamma`` gets n-step targets (its ``n_step_*`` keys)."""
    obs = torch.as_tensor(batch["observations"], dtype=torch.float32)
    actions = torch.as_tensor(batch["actions"], dtype=torch.int64)
    if "n_step_returns" in batch:  # r_t + ... + gamma^(m-1) r_(t+m-1), then gamma^m (0 if terminated) * Q(s_(t+m))
        returns = torch.as_tensor(batch["n_step_returns"], dtype=torch.float32)
        discounts = torch.as_tensor(batch["n_step_discounts"], dtype=torch.float32)
        next_obs = torch.as_tensor(batch["n_step_next_observations"], dtype=torch.float32)
    else:
        returns = torch.as_tensor(batch["rewards"], dtype=torch.float32)
        discounts = gamma * (1.0 - torch.as_tensor(batch["terminations"], dtype=torch.float32))
        next_obs = torch.as_tensor(batch["next_observations"], dtype=torch.float32)
    with torch.no_grad():
        best = q(next_obs).argmax(dim=1, keepdim=True)
        td_target = returns + discounts * target(next_obs).gather(1, best).squeeze(1)
    predicted = q(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
    loss_fn = nn.functional.smooth_l1_loss if huber else nn.functional.mse_loss
    loss = loss_fn(predicted, td_target)
    optimizer.zero_grad()
    loss.backward()
    if max_grad_norm is not None:
        nn.utils.clip_grad_norm_(q.parameters(), max_grad_norm)
    optimizer.step()
    return loss.item()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train until the greedy policy's mean return reaches --target-return or --total-steps are spent."""
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # a small MLP: one thread is fastest, and leaves the other core to the envs
    started = time.perf_counter()

    envs = vcollect.make_vector(args.env, args.num_envs, backend="dummy")
    action_space = envs.single_action_space
    obs_dim = int(np.prod(envs.single_observation_space.shape))  # type: ignore[arg-type]
    q = q_network(obs_dim, int(action_space.n), args.hidden_size)  # type: ignore[attr-defined]
    target = copy.deepcopy(q)
    optimizer = torch.optim.Adam(q.parameters(), lr=args.learning_rate)

    # The collector acts with the live network (TorchPolicy holds q itself), epsilon-greedy while training.
    explore = EpsilonGreedy(TorchPolicy(q, action_space), action_space, epsilon=args.start_epsilon, seed=args.seed)
    buffer = vcollect.VectorRingBuffer(total_size=args.buffer_size, num_envs=args.num_envs, seed=args.seed)
    collector = vcollect.Collector(explore, envs, buffer, seed=args.seed, exploration_noise=True)
    eval_envs = vcollect.make_vector(args.env, args.eval_episodes, backend="dummy")
    evaluator = vcollect.Collector(TorchPolicy(q, action_space), eval_envs, seed=args.seed + 10_000)

    collector.collect(n_step=args.learning_starts, random=True, reset_before_collect=True)
    step, updates, loss = args.learning_starts, 0, float("nan")
    history: list[tuple[int, float]] = []
    solved_at: int | None = None
    next_eval = args.eval_every
    while step < args.total_steps:
        explore.epsilon = linear_schedule(args.start_epsilon, args.end_epsilon, args.exploration_steps, step)
        collector.collect(n_step=args.train_frequency)
        step += args.train_frequency
        for _ in range(args.gradient_steps):
            loss = dqn_update(q, target, optimizer, buffer.sample(args.batch_size), args.gamma)
            updates += 1
            if updates % args.target_every == 0:
                target.load_state_dict(q.state_dict())
        if step >= next_eval or step >= args.total_steps:
            next_eval += args.eval_every
            stats = evaluator.collect(n_episode=args.eval_episodes, reset_before_collect=True)
            assert stats.returns_stat is not None
            history.append((step, stats.returns_stat.mean))
            print(f"step {step:6d}  epsilon {explore.epsilon:.2f}  loss {loss:.4f}  "
                  f"greedy return {stats.returns_stat.mean:6.1f}  ({time.perf_counter() - started:.0f} s)")
            if stats.returns_stat.mean >= args.target_return:
                solved_at = step
                break
    train_seconds = time.perf_counter() - started
    collector.close()
    evaluator.close()

    # The trained greedy policy's episodes, stored as a dataset.
    store = vcollect.EpisodeStore.create(
        args.dataset, envs.single_observation_space, action_space, env_spec=gym.spec(args.env), root=args.root,
        metadata={"algorithm_name": "DQN (examples/dqn_cartpole.py)"}, overwrite=True,
    )
    final_envs = vcollect.make_vector(args.env, args.eval_episodes, backend="dummy")
    with store, vcollect.Collector(TorchPolicy(q, action_space), final_envs, store=store, seed=args.seed + 1) as final:
        final_stats = final.collect(n_episode=args.eval_episodes, reset_before_collect=True)
    assert final_stats.returns_stat is not None
    print(f"{'solved' if solved_at else 'not solved'} after {step} env steps, {updates} gradient steps, "
          f"{train_seconds:.1f} s; stored {final_stats.n_collected_episodes} greedy episodes, mean return "
          f"{final_stats.returns_stat.mean:.1f}, as {args.dataset}")
    return {"solved_at": solved_at, "steps": step, "updates": updates, "history": history,
            "final": final_stats, "seconds": train_seconds}


if __name__ == "__main__":
    main()
