"""vcollect.tianshou's Collector and VectorReplayBuffer reproduce Tianshou 2.0.1's own, for the same seeds: a
script that swaps the two imports collects the same transitions (per env, in order), reports the same episodes,
leaves numpy's global generator (which Tianshou's exploration draws from) in the same state, samples the same
indices and, through Tianshou's trainer, trains the same weights.

The envs are Tianshou ``DummyVectorEnv``s seeded by ``venv.seed(seed)`` as Tianshou's scripts seed them; each
side gets its own, built the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("tianshou")
torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

import tianshou.data as ts  # noqa: E402
from tianshou.algorithm import DQN  # noqa: E402
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy  # noqa: E402
from tianshou.algorithm.optim import AdamOptimizerFactory  # noqa: E402
from tianshou.env import DummyVectorEnv  # noqa: E402
from tianshou.trainer import OffPolicyTrainerParams  # noqa: E402
from tianshou.utils.net.common import Net  # noqa: E402
from tianshou.utils.torch_utils import policy_within_training_step  # noqa: E402

import vcollect.tianshou as vt  # noqa: E402

SIDES = {"tianshou": (ts.Collector, ts.VectorReplayBuffer), "vcollect": (vt.Collector, vt.VectorReplayBuffer)}
KEYS = ("obs", "act", "rew", "terminated", "truncated", "obs_next")


def dqn(eps_training: float = 0.5, eps_inference: float = 0.2) -> tuple[Any, Any]:
    """A small DQN on CartPole, its weights from torch's seed 0: (policy, algorithm)."""
    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    net = Net(state_shape=env.observation_space.shape, action_shape=2, hidden_sizes=[16])
    policy = DiscreteQLearningPolicy(
        model=net, action_space=env.action_space, observation_space=env.observation_space,
        eps_training=eps_training, eps_inference=eps_inference,
    )
    return policy, DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), gamma=0.9, n_step_return_horizon=3,
                       target_update_freq=20)


def cartpoles(n: int, seed: int) -> DummyVectorEnv:
    envs = DummyVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])
    envs.seed(seed)
    return envs


def collected(side: str) -> dict[str, Any]:
    """A script's collection on one side: exploring training steps (with a reset cutting the running
    episodes, and n_step not a multiple of the env count), then test passes of more and of fewer episodes
    than envs; what the buffers and stats hold afterwards."""
    collector_cls, buffer_cls = SIDES[side]
    policy, _ = dqn()
    np.random.seed(3)
    buf = buffer_cls(400, 4)
    train = collector_cls(policy, cartpoles(4, 7), buf, exploration_noise=True)
    test = collector_cls(policy, cartpoles(5, 70), exploration_noise=True)
    with policy_within_training_step(policy):
        train.reset()
        train.collect(n_step=60)
        train.reset(reset_buffer=False)
        steps = train.collect(n_step=42)
    test.reset()
    many = test.collect(n_episode=7)
    test.reset()
    few = test.collect(n_episode=3)
    every = buf.sample_indices(0)
    batch = buf[every]
    sampled = buf.sample_indices(32)
    return {
        "indices": every, **{key: batch[key] for key in KEYS}, "env_id": batch.info.env_id,
        "n_step": steps.n_collected_steps, "returns": [many.returns, few.returns], "lens": [many.lens, few.lens],
        "test_rows": test.buffer[test.buffer.sample_indices(0)].obs,
        "next": buf.next(every), "prev": buf.prev(every), "unfinished": buf.unfinished_index(),
        "sampled": sampled, "sampled_obs": buf.sample(32)[0].obs, "numpy_after": np.random.rand(3),
    }


@pytest.mark.filterwarnings("ignore:n_step=", "ignore:n_episode=")
def test_collection_samples_and_generator_state_equal_tianshous() -> None:
    theirs, ours = collected("tianshou"), collected("vcollect")
    assert theirs["n_step"] == 44  # Tianshou steps every env each time: 42 rounded up to a multiple of 4
    assert len(theirs["returns"][0]) == 7 and len(theirs["returns"][1]) == 3
    for key, value in theirs.items():
        if isinstance(value, list):
            for mine, reference in zip(ours[key], value, strict=True):
                assert np.array_equal(mine, reference), key
        else:
            assert np.array_equal(ours[key], value), key


def trained(side: str) -> tuple[list[Any], dict[str, Any]]:
    """Tianshou's test_dqn.py setup, scaled down: its trainer run on one side; the weights and the counts."""
    collector_cls, buffer_cls = SIDES[side]
    policy, algorithm = dqn(eps_training=0.1, eps_inference=0.05)
    np.random.seed(5)
    training_envs, test_envs = cartpoles(4, 11), cartpoles(5, 11)
    training_collector = collector_cls(algorithm, training_envs, buffer_cls(2000, 4), exploration_noise=True)
    test_collector = collector_cls(algorithm, test_envs, exploration_noise=True)
    with policy_within_training_step(policy):
        training_collector.reset()
        training_collector.collect(n_step=64)
    result = algorithm.run_training(OffPolicyTrainerParams(
        training_collector=training_collector, test_collector=test_collector, max_epochs=2, epoch_num_steps=160,
        collection_step_num_env_steps=8, test_step_num_episodes=5, batch_size=32,
        update_step_num_gradient_steps_per_sample=0.25, show_progress=False, test_in_training=False,
    ))
    weights = [p.detach().clone() for p in algorithm.state_dict().values() if isinstance(p, torch.Tensor)]
    counts = {"env_steps": result.train_step, "gradient_steps": result.update_step,
              "best_reward": result.best_reward, "train_episodes": result.train_episode}
    return weights, counts


def test_dqn_trainer_trains_the_same_weights_as_on_tianshous() -> None:
    """Tianshou's OffPolicyTrainer with the two lines swapped: the same env steps, gradient steps, test
    returns and, bit for bit, the same trained weights."""
    theirs, ours = trained("tianshou"), trained("vcollect")
    assert ours[1] == theirs[1]
    assert theirs[1]["gradient_steps"] > 0
    assert len(ours[0]) == len(theirs[0]) > 0
    for mine, reference in zip(ours[0], theirs[0], strict=True):
        assert torch.equal(mine, reference)


def sac_updated(side: str) -> dict[str, Any]:
    """A small SAC on Pendulum: exploring collection, then a few of Tianshou's updates from the buffer."""
    from tianshou.algorithm import SAC
    from tianshou.algorithm.modelfree.sac import SACPolicy
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    collector_cls, buffer_cls = SIDES[side]
    torch.manual_seed(1)
    np.random.seed(1)
    env = gym.make("Pendulum-v1")
    shape, action_shape = env.observation_space.shape, env.action_space.shape
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=shape, hidden_sizes=[16]), action_shape=action_shape, unbounded=True
    )
    critics = [ContinuousCritic(preprocess_net=Net(state_shape=shape, action_shape=action_shape, hidden_sizes=[16],
                                                   concat=True)) for _ in range(2)]
    policy = SACPolicy(actor=actor, action_space=env.action_space)
    algorithm = SAC(policy=policy, policy_optim=AdamOptimizerFactory(lr=1e-3), critic=critics[0],
                    critic_optim=AdamOptimizerFactory(lr=1e-3), critic2=critics[1],
                    critic2_optim=AdamOptimizerFactory(lr=1e-3), n_step_return_horizon=3)
    envs = DummyVectorEnv([lambda: gym.make("Pendulum-v1") for _ in range(2)])
    envs.seed(4)
    buf = buffer_cls(200, 2)
    collector = collector_cls(algorithm, envs, buf, exploration_noise=True)
    with policy_within_training_step(policy):
        collector.reset()
        collector.collect(n_step=60)
        batch = buf[buf.sample_indices(0)]
        for _ in range(3):
            algorithm.update(buffer=buf, sample_size=16)  # type: ignore[arg-type]
    return {**{key: batch[key] for key in KEYS},
            "weights": [p.detach().clone() for p in algorithm.state_dict().values() if isinstance(p, torch.Tensor)]}


def test_sac_stores_the_policys_own_actions_and_updates_the_same_weights() -> None:
    """The buffer holds the policy's actions before map_action scales them into the env's bounds (in [-1, 1]
    for Pendulum's [-2, 2]), as Tianshou's does, so SAC's critic learns on the same actions."""
    theirs, ours = sac_updated("tianshou"), sac_updated("vcollect")
    assert np.abs(theirs["act"]).max() <= 1.0 < 2.0 * np.abs(theirs["act"]).max()
    for key in KEYS:
        assert np.array_equal(ours[key], theirs[key]), key
    for mine, reference in zip(ours["weights"], theirs["weights"], strict=True):
        assert torch.equal(mine, reference)


def sac_warmed_up(side: str, action_scaling: bool) -> dict[str, Any]:
    """A SAC script's warm-up on one side: random steps (``collect(n_step=..., random=True)``, crossing episode
    ends), random episodes, then the policy's exploring steps; what the buffer holds, the envs' action spaces'
    generator states and numpy's global generator afterwards."""
    from tianshou.algorithm.modelfree.sac import SACPolicy
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic

    collector_cls, buffer_cls = SIDES[side]
    torch.manual_seed(2)
    np.random.seed(2)
    env = gym.make("Pendulum-v1")
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=env.observation_space.shape, hidden_sizes=[16]),
        action_shape=env.action_space.shape, unbounded=True,
    )
    policy = SACPolicy(actor=actor, action_space=env.action_space, action_scaling=action_scaling)
    envs = DummyVectorEnv([lambda: gym.make("Pendulum-v1", max_episode_steps=15) for _ in range(3)])
    envs.seed(5)
    buf = buffer_cls(600, 3)
    collector = collector_cls(policy, envs, buf, exploration_noise=True)
    collector.reset()
    warm = collector.collect(n_step=60, random=True)
    episodes = collector.collect(n_episode=4, random=True)
    random_act = buf[buf.sample_indices(0)].act
    with policy_within_training_step(policy):
        collector.collect(n_step=30)
    batch = buf[buf.sample_indices(0)]
    return {
        **{key: batch[key] for key in KEYS}, "random_act": random_act,
        "returns": [warm.returns, episodes.returns], "lens": [warm.lens, episodes.lens],
        "space_states": [space.np_random.bit_generator.state for space in envs.get_env_attr("action_space")],
        "numpy_after": np.random.rand(3),
    }


@pytest.mark.parametrize("action_scaling", [True, False])
def test_random_warm_up_stores_and_steps_as_tianshous(action_scaling: bool) -> None:
    """``collect(random=True)`` samples each env's own action space in env-id order, gives the samples to the
    envs and stores the policy's map_action_inverse of them (the policy's scale, [-1, 1] for Pendulum's
    [-2, 2] with action scaling; the samples as drawn without it), as Tianshou's Collector does: the
    transitions, the spaces' generators and numpy's are then Tianshou's, bit for bit."""
    theirs, ours = sac_warmed_up("tianshou", action_scaling), sac_warmed_up("vcollect", action_scaling)
    bound = 1.0 if action_scaling else 2.0
    assert np.abs(theirs["random_act"]).max() <= bound < 2.0 * np.abs(theirs["random_act"]).max()
    assert len(theirs["returns"][0]) == 3 and len(theirs["returns"][1]) == 4
    for key, value in theirs.items():
        if key == "space_states":
            assert ours[key] == value
        elif isinstance(value, list):
            for mine, reference in zip(ours[key], value, strict=True):
                assert np.array_equal(mine, reference), key
        else:
            assert np.array_equal(ours[key], value), key
