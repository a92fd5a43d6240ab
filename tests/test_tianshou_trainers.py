"""Tianshou's trainers on vcollect.tianshou's Collector and VectorReplayBuffer (the two-line change): DQN
through OffPolicyTrainer and PPO through OnPolicyTrainer, via ``algorithm.run_training``, small budgets."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("tianshou")
torch = pytest.importorskip("torch")

from tianshou.algorithm import DQN, PPO  # noqa: E402
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy  # noqa: E402
from tianshou.algorithm.modelfree.reinforce import DiscreteActorPolicy  # noqa: E402
from tianshou.algorithm.optim import AdamOptimizerFactory  # noqa: E402
from tianshou.data import CollectStats  # noqa: E402
from tianshou.env import DummyVectorEnv  # noqa: E402
from tianshou.trainer import OffPolicyTrainerParams, OnPolicyTrainerParams  # noqa: E402
from tianshou.utils.net.common import Net  # noqa: E402
from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic  # noqa: E402
from tianshou.utils.torch_utils import policy_within_training_step  # noqa: E402

from vcollect.tianshou import Collector, VectorReplayBuffer  # noqa: E402


def _envs(n: int) -> Any:
    return DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])


@pytest.mark.slow
def test_dqn_trains_off_policy_on_the_rings() -> None:
    np.random.seed(0)
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    policy = DiscreteQLearningPolicy(
        model=Net(state_shape=(4,), action_shape=2, hidden_sizes=[32]), action_space=env.action_space,
        observation_space=env.observation_space, eps_training=0.1, eps_inference=0.05,
    )
    algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.9, n_step_return_horizon=3,
                    target_update_freq=20)
    buffer = VectorReplayBuffer(400, 4)
    training = Collector[CollectStats](algorithm, _envs(4), buffer, exploration_noise=True)
    test = Collector[CollectStats](algorithm, _envs(2), exploration_noise=True)
    with policy_within_training_step(policy):
        training.reset()
        first = training.collect(n_step=64)
    assert isinstance(first, CollectStats) and first.n_collected_steps == 64
    assert len(buffer) == 64
    weights = [p.detach().clone() for p in policy.parameters()]
    result = algorithm.run_training(OffPolicyTrainerParams(
        training_collector=training, test_collector=test, max_epochs=2, epoch_num_steps=200,
        collection_step_num_env_steps=10, test_step_num_episodes=2, batch_size=32,
        update_step_num_gradient_steps_per_sample=0.1, show_progress=False,
    ))
    # as on Tianshou's Collector: each collect steps every env, 10 steps rounded up to 12, 17 collects an epoch
    # (the initial 64 were before the trainer reset the counters), one gradient step each (round(0.1 * 12))
    assert result.train_step == 2 * 17 * 12
    assert result.test_episode == 2 * 3  # the initial test and one per epoch
    assert len(buffer) == 400  # 472 steps collected into 4 rings of 100 transitions: the newest 100 of each
    assert result.update_step == 2 * 17
    assert any(not torch.equal(w, p) for w, p in zip(weights, policy.parameters()))  # the update read the rings
    assert np.isfinite(result.best_reward)


def test_ppo_trains_on_policy_on_the_rings() -> None:
    np.random.seed(0)
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    net = Net(state_shape=(4,), hidden_sizes=[32])
    actor = DiscreteActor(preprocess_net=net, action_shape=2)
    critic = DiscreteCritic(preprocess_net=net)
    policy = DiscreteActorPolicy(actor=actor, dist_fn=torch.distributions.Categorical, action_space=env.action_space)
    algorithm = PPO(policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=3e-4), gamma=0.99, gae_lambda=0.95)
    buffer = VectorReplayBuffer(2000, 4)
    training = Collector[CollectStats](algorithm, _envs(4), buffer)
    test = Collector[CollectStats](algorithm, _envs(2))
    seen: list[int] = []
    update = algorithm.update

    def counting_update(buffer: Any, batch_size: Any, repeat: int) -> Any:
        seen.append(len(buffer))
        return update(buffer=buffer, batch_size=batch_size, repeat=repeat)

    algorithm.update = counting_update  # type: ignore[method-assign]
    result = algorithm.run_training(OnPolicyTrainerParams(
        training_collector=training, test_collector=test, max_epochs=1, epoch_num_steps=600,
        collection_step_num_env_steps=200, update_step_num_repetitions=2, test_step_num_episodes=2, batch_size=64,
        show_progress=False,
    ))
    assert result.train_step == 600
    assert seen == [200, 200, 200]  # each update saw exactly the steps collected since the last (buffer reset)
    assert len(buffer) == 0  # the trainer empties it after each update
    # running episodes went on across the resets: every reported episode is whole (CartPole pays 1 a step)
    stats = training.collect(n_step=40)
    assert np.array_equal(stats.returns, stats.lens.astype(float))
    assert len(buffer) == 40
