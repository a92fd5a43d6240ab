"""Tianshou 2.0.1's own training setups, unchanged vs with the two-line change to vcollect.

The three setups of Tianshou 2.0.1's tests, reproduced here (same networks, hyperparameters, seeds, budgets,
reward thresholds, trainers, test collectors, TensorBoard logging and best-policy saving):
test/discrete/test_dqn.py (DQN, CartPole-v1), test/discrete/test_ppo_discrete.py (PPO, CartPole-v1) and
the SAC stage of test/continuous/test_sac_with_il.py (SAC, Pendulum-v1). Each runs once with Tianshou's
``Collector`` / ``VectorReplayBuffer`` and once with ``from vcollect.tianshou import Collector,
VectorReplayBuffer`` -- the only difference -- each side in a fresh process, torch on one thread on both.

Recorded per run: the best test reward, whether it met the threshold, the env steps trained, the gradient
steps and test episodes, wall-clock
and CPU time (``time.process_time``: on a shared machine the fairer of the two) of the training (the
initial collect and ``run_training``), and CPU time per 1,000 env steps.

``--fixed-steps N`` drops the early stop and trains exactly N env steps (one epoch) on both sides, so the
same work is timed whatever each side's learning curve does.

Usage:
    python benchmarks/tianshou_trainers.py --algo dqn ppo sac            # upstream budgets, early stop
    python benchmarks/tianshou_trainers.py --algo dqn --fixed-steps 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

ALGOS = ("dqn", "ppo", "sac")


def side_imports(side: str) -> tuple[Any, Any]:
    """The Collector and VectorReplayBuffer of one side: the two lines that change."""
    if side == "vcollect":
        from vcollect.tianshou import Collector, VectorReplayBuffer
    else:
        from tianshou.data import Collector, VectorReplayBuffer
    return Collector, VectorReplayBuffer


def _logger(name: str) -> tuple[Any, str]:
    from tianshou.utils import TensorboardLogger
    from torch.utils.tensorboard import SummaryWriter

    log_path = tempfile.mkdtemp(prefix=f"ts-{name}-")
    return TensorboardLogger(SummaryWriter(log_path)), log_path


def run_dqn(side: str, fixed_steps: int | None) -> dict[str, Any]:
    """test/discrete/test_dqn.py's test_dqn (Tianshou 2.0.1), its default arguments."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import DQN
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import CollectStats
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net
    from tianshou.utils.torch_utils import policy_within_training_step

    Collector, VectorReplayBuffer = side_imports(side)
    task, seed, threshold = "CartPole-v1", 1626, 195
    env = gym.make(task)
    training_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(10)])
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(100)])
    np.random.seed(seed)
    torch.manual_seed(seed)
    training_envs.seed(seed)
    test_envs.seed(seed)
    net = Net(state_shape=env.observation_space.shape, action_shape=env.action_space.n, hidden_sizes=[128] * 4)
    policy = DiscreteQLearningPolicy(
        model=net, action_space=env.action_space, observation_space=env.observation_space,
        eps_training=0.1, eps_inference=0.05,
    )
    algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.9, n_step_return_horizon=3,
                    target_update_freq=320)
    buf = VectorReplayBuffer(20000, buffer_num=len(training_envs))
    training_collector = Collector[CollectStats](algorithm, training_envs, buf, exploration_noise=True)
    test_collector = Collector[CollectStats](algorithm, test_envs, exploration_noise=True)
    logger, log_path = _logger("dqn")

    def train_fn(epoch: int, env_step: int) -> None:
        if env_step <= 10000:
            policy.set_eps_training(0.1)
        elif env_step <= 50000:
            policy.set_eps_training(0.1 - (env_step - 10000) / 40000 * (0.9 * 0.1))
        else:
            policy.set_eps_training(0.1 * 0.1)

    def train() -> Any:
        with policy_within_training_step(policy):
            training_collector.reset()
            training_collector.collect(n_step=64 * 10)
        return algorithm.run_training(OffPolicyTrainerParams(
            training_collector=training_collector, test_collector=test_collector,
            **_budget(fixed_steps, 20, 10000, threshold), collection_step_num_env_steps=10,
            test_step_num_episodes=100, batch_size=64, update_step_num_gradient_steps_per_sample=0.1,
            training_fn=train_fn, save_best_fn=_saver(log_path), logger=logger,
        ))

    return _timed(train, threshold)


def run_ppo(side: str, fixed_steps: int | None) -> dict[str, Any]:
    """test/discrete/test_ppo_discrete.py's test_ppo (Tianshou 2.0.1), its default arguments (CPU)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import PPO
    from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import CollectStats
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OnPolicyTrainerParams
    from tianshou.utils.net.common import ActorCritic, Net
    from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic

    Collector, VectorReplayBuffer = side_imports(side)
    task, seed, threshold = "CartPole-v1", 1626, 195
    env = gym.make(task)
    training_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(20)])
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(100)])
    np.random.seed(seed)
    torch.manual_seed(seed)
    training_envs.seed(seed)
    test_envs.seed(seed)
    net = Net(state_shape=env.observation_space.shape, hidden_sizes=[64, 64])
    actor = DiscreteActor(preprocess_net=net, action_shape=env.action_space.n)
    critic = DiscreteCritic(preprocess_net=net)
    for module in ActorCritic(actor, critic).modules():
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.orthogonal_(module.weight)
            torch.nn.init.zeros_(module.bias)
    policy = DiscreteActorPolicy(actor=actor, dist_fn=torch.distributions.Categorical,
                                 action_space=env.action_space, deterministic_eval=True)
    algorithm = PPO(
        policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=3e-4), gamma=0.99, max_grad_norm=0.5,
        eps_clip=0.2, vf_coef=0.5, ent_coef=0.0, gae_lambda=0.95, return_scaling=False, dual_clip=None,
        value_clip=False, advantage_normalization=False, recompute_advantage=False,
    )
    training_collector = Collector[CollectStats](algorithm, training_envs, VectorReplayBuffer(20000, len(training_envs)))
    test_collector = Collector[CollectStats](algorithm, test_envs)
    logger, log_path = _logger("ppo")

    def train() -> Any:
        return algorithm.run_training(OnPolicyTrainerParams(
            training_collector=training_collector, test_collector=test_collector,
            **_budget(fixed_steps, 10, 50000, threshold), update_step_num_repetitions=10,
            test_step_num_episodes=100, batch_size=64, collection_step_num_env_steps=2000,
            save_best_fn=_saver(log_path), logger=logger,
        ))

    return _timed(train, threshold)


def run_sac(side: str, fixed_steps: int | None) -> dict[str, Any]:
    """The SAC stage of test/continuous/test_sac_with_il.py (Tianshou 2.0.1), its default arguments."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import SAC
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import CollectStats
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    Collector, VectorReplayBuffer = side_imports(side)
    task, seed, threshold = "Pendulum-v1", 1, -250
    env = gym.make(task)
    training_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(10)])
    test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(100)])
    np.random.seed(seed)
    torch.manual_seed(seed)
    training_envs.seed(seed)
    test_envs.seed(seed + 10)
    shape, action_shape = env.observation_space.shape, env.action_space.shape
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=shape, hidden_sizes=[128, 128]), action_shape=action_shape, unbounded=True
    )
    critic1 = ContinuousCritic(preprocess_net=Net(state_shape=shape, action_shape=action_shape,
                                                  hidden_sizes=[128, 128], concat=True))
    critic2 = ContinuousCritic(preprocess_net=Net(state_shape=shape, action_shape=action_shape,
                                                  hidden_sizes=[128, 128], concat=True))
    alpha = AutoAlpha(-int(np.prod(action_shape)), 0.0, AdamOptimizerFactory(lr=3e-4))
    policy = SACPolicy(actor=actor, action_space=env.action_space)
    algorithm = SAC(
        policy=policy, policy_optim=AdamOptimizerFactory(lr=1e-3), critic=critic1,
        critic_optim=AdamOptimizerFactory(lr=1e-3), critic2=critic2, critic2_optim=AdamOptimizerFactory(lr=1e-3),
        tau=0.005, gamma=0.99, alpha=alpha, n_step_return_horizon=3,
    )
    training_collector = Collector[CollectStats](
        algorithm, training_envs, VectorReplayBuffer(20000, len(training_envs)), exploration_noise=True
    )
    test_collector = Collector[CollectStats](algorithm, test_envs)
    logger, log_path = _logger("sac")

    def train() -> Any:
        return algorithm.run_training(OffPolicyTrainerParams(
            training_collector=training_collector, test_collector=test_collector,
            **_budget(fixed_steps, 10, 24000, threshold), collection_step_num_env_steps=10,
            test_step_num_episodes=100, batch_size=128, update_step_num_gradient_steps_per_sample=0.1,
            save_best_fn=_saver(log_path), logger=logger,
        ))

    return _timed(train, threshold)


def _budget(fixed_steps: int | None, epochs: int, epoch_steps: int, threshold: float) -> dict[str, Any]:
    """The trainer's budget: upstream's (with its early stop at the threshold), or exactly ``fixed_steps``."""
    if fixed_steps is not None:
        return {"max_epochs": 1, "epoch_num_steps": fixed_steps, "stop_fn": None, "test_in_training": False}
    return {"max_epochs": epochs, "epoch_num_steps": epoch_steps, "stop_fn": lambda r: r >= threshold,
            "test_in_training": True}


def _saver(log_path: str) -> Any:
    import torch

    return lambda algorithm: torch.save(algorithm.state_dict(), os.path.join(log_path, "policy.pth"))


def _timed(train: Any, threshold: float) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = train()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "best_reward": float(result.best_reward), "threshold": threshold,
        "threshold_met": bool(result.best_reward >= threshold), "env_steps": int(result.train_step),
        "gradient_steps": int(result.update_step), "test_episodes": int(result.test_episode),
        "wall_s": wall, "cpu_s": cpu, "cpu_s_per_1k_steps": 1000 * cpu / max(1, int(result.train_step)),
    }


RUNS = {"dqn": run_dqn, "ppo": run_ppo, "sac": run_sac}


def _child(algo: str, side: str, fixed_steps: int | None) -> None:
    import torch

    torch.set_num_threads(1)
    print(json.dumps(RUNS[algo](side, fixed_steps)), flush=True)


def run_child(script: str, algo: str, side: str, fixed_steps: int | None, timeout: float) -> dict[str, Any]:
    """Run ``script --child algo side`` in a fresh process (torch on one thread) and return the JSON result
    its last line prints."""
    cmd = [sys.executable, script, "--child", algo, side]
    if fixed_steps is not None:
        cmd += ["--fixed-steps", str(fixed_steps)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{algo}/{side} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", nargs="+", choices=ALGOS, default=list(ALGOS))
    parser.add_argument("--sides", nargs="+", choices=("tianshou", "vcollect"), default=["tianshou", "vcollect"])
    parser.add_argument("--fixed-steps", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--child", nargs=2, metavar=("ALGO", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], args.fixed_steps)
        return
    rows = []
    for algo in args.algo:
        results = {}
        for side in args.sides:
            results[side] = run_child(__file__, algo, side, args.fixed_steps, args.timeout)
            row = {"algo": algo, "side": side, **results[side]}
            rows.append(row)
            print(json.dumps(row), flush=True)
        if len(results) == 2:
            t, v = results["tianshou"], results["vcollect"]
            print(json.dumps({
                "algo": algo, "wall_speedup": t["wall_s"] / v["wall_s"], "cpu_speedup": t["cpu_s"] / v["cpu_s"],
                "cpu_per_step_speedup": t["cpu_s_per_1k_steps"] / v["cpu_s_per_1k_steps"],
            }), flush=True)


if __name__ == "__main__":
    main()
