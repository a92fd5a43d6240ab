"""Real Tianshou 2.0.1 policies collected by vcollect's Collector, against Tianshou's own Collector.

The envs here reset from a fixed list of seeds whatever seed they are given (``ListSeeded``), so
Tianshou's Collector (which resets without seeds) and vcollect's (which seeds every reset) start the
same episodes: with a deterministic policy both must then give the same transitions.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
tianshou = pytest.importorskip("tianshou")

from tianshou.algorithm import DQN  # noqa: E402
from tianshou.algorithm.algorithm_base import Policy as TianshouBasePolicy  # noqa: E402
from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy  # noqa: E402
from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy  # noqa: E402
from tianshou.algorithm.optim import AdamOptimizerFactory  # noqa: E402
from tianshou.data import Batch, VectorReplayBuffer  # noqa: E402
from tianshou.data import Collector as TianshouCollector  # noqa: E402
from tianshou.env import DummyVectorEnv as TianshouDummyVectorEnv  # noqa: E402
from tianshou.utils.net.common import Net, Recurrent  # noqa: E402
from tianshou.utils.net.continuous import ContinuousActorProbabilistic  # noqa: E402
from tianshou.utils.torch_utils import policy_within_training_step  # noqa: E402
from torch.distributions import Independent, Normal  # noqa: E402

from tests.sinks import ListStore  # noqa: E402
from vcollect import Collector, EpisodeStore, load_dataset  # noqa: E402
from vcollect.envs import DummyVectorEnv  # noqa: E402
from vcollect.errors import ActionError  # noqa: E402
from vcollect.policies import TianshouPolicy, TorchPolicy  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:action_scaling and action_bound_method:UserWarning")


class ListSeeded(gym.Wrapper):
    """Resets with the next seed of ``seeds`` (then unseeded), ignoring the seed it is given."""

    def __init__(self, env: gym.Env, seeds: Sequence[int]) -> None:
        super().__init__(env)
        self.seeds = list(seeds)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.env.reset(seed=self.seeds.pop(0) if self.seeds else None, options=options)


def seeded(env_id: str, seeds: Sequence[int]) -> Any:
    return lambda: ListSeeded(gym.make(env_id), seeds)


def dqn_policy(recurrent: bool = False, **eps: float) -> DiscreteQLearningPolicy:
    torch.manual_seed(7 if recurrent else 3)  # (7: an LSTM whose actions on these seeds depend on its memory)
    space = gym.make("CartPole-v1").action_space
    if recurrent:
        model: Any = Recurrent(layer_num=1, state_shape=4, action_shape=2, hidden_layer_size=16)
    else:
        model = Net(state_shape=4, action_shape=2, hidden_sizes=[32, 32])
    return DiscreteQLearningPolicy(model=model, action_space=space, **eps)


def gaussian_policy(deterministic_eval: bool = True, **mapping: Any) -> ProbabilisticActorPolicy:
    torch.manual_seed(5)
    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=3, hidden_sizes=[16]), action_shape=1, unbounded=True
    )
    return ProbabilisticActorPolicy(
        actor=actor,
        dist_fn=lambda loc_scale: Independent(Normal(*loc_scale), 1),
        deterministic_eval=deterministic_eval,
        action_space=gym.make("Pendulum-v1").action_space,
        **mapping,
    )


def tianshou_run(policy: Any, env_fns: list[Any], **collect: Any) -> VectorReplayBuffer:
    buffer = VectorReplayBuffer(total_size=4000 * len(env_fns), buffer_num=len(env_fns))
    collector = TianshouCollector(policy, TianshouDummyVectorEnv(env_fns), buffer)
    collector.reset()
    collector.collect(**collect)
    collector.close()
    return buffer


def tianshou_episodes(buffer: VectorReplayBuffer, env: int = 0) -> list[Batch]:
    """The episodes of sub-buffer ``env``, in order."""
    sub = buffer.buffers[env]
    rows = sub[np.arange(len(sub))]
    ends = np.flatnonzero(rows.done) + 1
    return [rows[a:b] for a, b in zip([0, *ends[:-1]], ends)]


def assert_same_episode(stored: Any, ts: Batch, actions: np.ndarray | None = None) -> None:
    np.testing.assert_array_equal(stored.observations[:-1], ts.obs)
    np.testing.assert_array_equal(stored.observations[1:], ts.obs_next)
    np.testing.assert_array_equal(stored.actions, ts.act if actions is None else actions)
    np.testing.assert_array_equal(stored.rewards, ts.rew)
    np.testing.assert_array_equal(stored.terminations, ts.terminated)
    np.testing.assert_array_equal(stored.truncations, ts.truncated)


def test_collector_wraps_a_tianshou_dqn_policy_and_stores_what_tianshous_collector_collects(tmp_path: Any) -> None:
    seeds = [11, 12, 13, 14]
    ts = tianshou_episodes(tianshou_run(dqn_policy(), [seeded("CartPole-v1", seeds)], n_episode=3))
    store = EpisodeStore.create("t/dqn-v0", *spaces_of("CartPole-v1"), root=tmp_path)
    with Collector(dqn_policy(), DummyVectorEnv([seeded("CartPole-v1", seeds)]), store=store, seed=0) as collector:
        assert isinstance(collector.policy, TianshouPolicy)
        collector.reset()
        stats = collector.collect(n_episode=3)
        last = collector.buffer.episode(0)
    store.close()
    episodes = list(load_dataset("t/dqn-v0", root=tmp_path).iterate_episodes())
    assert stats.n_collected_episodes == 3 and len(episodes) == 3 and len(ts) == 3
    for stored, theirs in zip(episodes, ts):
        assert_same_episode(stored, theirs)
    np.testing.assert_array_equal(last.actions, episodes[-1].actions)  # the ring holds the last one
    np.testing.assert_array_equal(last.observations, episodes[-1].observations)


def spaces_of(env_id: str) -> tuple[gym.Space[Any], gym.Space[Any]]:
    env = gym.make(env_id)
    return env.observation_space, env.action_space


def test_an_algorithm_is_collected_through_its_policy() -> None:
    algorithm = DQN(policy=dqn_policy(), optim=AdamOptimizerFactory(lr=1e-3))
    collector = Collector(algorithm, DummyVectorEnv([seeded("CartPole-v1", [11])]), seed=0)
    assert isinstance(collector.policy, TianshouPolicy) and collector.policy.policy is algorithm.policy
    collector.reset()
    assert collector.collect(n_step=5).n_collected_steps == 5
    collector.close()


def test_recurrent_tianshou_policy_keeps_each_envs_hidden_state_and_resets_it_per_episode() -> None:
    """Two envs interleaved in one vcollect Collector act as each does alone in Tianshou's Collector
    (its own hidden state, zeroed when its episode ends); without the reset the second episodes differ."""
    seeds = [[21, 22, 23], [31, 32, 33]]
    store = ListStore()
    with Collector(
        dqn_policy(recurrent=True), DummyVectorEnv([seeded("CartPole-v1", s) for s in seeds]), store=store, seed=0
    ) as collector:
        collector.reset()
        collector.collect(n_episode=4)  # two per env
        assert {k: tuple(v.shape) for k, v in collector._actor.state.items()} == {"hidden": (2, 1, 16), "cell": (2, 1, 16)}
    for env_id, env_seeds in enumerate(seeds):
        ts = tianshou_episodes(tianshou_run(dqn_policy(recurrent=True), [seeded("CartPole-v1", env_seeds)], n_episode=2))
        mine = [e for e in store.episodes if e.env_id == env_id]
        assert len(mine) == 2 and len(ts) == 2
        for stored, theirs in zip(mine, ts):
            assert_same_episode(stored, theirs)
    # the hidden state matters: env 0's second episode, run on without a reset after the first, differs
    mine = [e for e in store.episodes if e.env_id == 0]
    assert len(set(mine[1].actions.tolist())) == 2
    policy = TianshouPolicy(dqn_policy(recurrent=True))
    second = mine[1]
    actions, state = [], None
    for obs in mine[0].observations[:-1]:
        _, state = policy(obs[None], state)
    for obs in second.observations[:-1]:
        act, state = policy(obs[None], state)
        actions.append(int(act[0]))
    assert actions != second.actions.tolist()


def test_gaussian_actor_policy_maps_actions_like_tianshou_and_stores_the_mapped_ones() -> None:
    """PPO-style actor (Gaussian, deterministic in eval): Tianshou's buffer keeps the raw action, vcollect
    the mapped one the env received (map_action: clip to [-1, 1], scale to [-2, 2])."""
    policy = gaussian_policy(action_scaling=True, action_bound_method="clip")
    ts = tianshou_run(policy, [seeded("Pendulum-v1", [7])], n_step=30).buffers[0]
    rows = ts[np.arange(30)]
    collector = Collector(gaussian_policy(action_scaling=True), DummyVectorEnv([seeded("Pendulum-v1", [7])]), seed=0)
    collector.reset()
    collector.collect(n_step=30)
    mine = collector.buffer.episode(0)
    collector.close()
    mapped = policy.map_action(rows.act)
    assert not np.array_equal(mapped, rows.act)  # the mapping did something here
    np.testing.assert_array_equal(mine.actions, mapped)
    np.testing.assert_array_equal(mine.observations[:-1], rows.obs)
    np.testing.assert_allclose(mine.rewards, rows.rew)


def test_stochastic_gaussian_actions_stay_in_the_space_and_out_of_space_ones_raise_action_error() -> None:
    env_fns = [seeded("Pendulum-v1", [1]), seeded("Pendulum-v1", [2])]
    collector = Collector(gaussian_policy(deterministic_eval=False), DummyVectorEnv(env_fns), seed=0)
    collector.reset()
    collector.collect(n_step=40)
    actions = collector.buffer.episode(0).actions
    assert np.all(np.abs(actions) <= 2.0) and len(np.unique(actions)) > 10
    collector.close()
    unmapped = gaussian_policy(action_scaling=False, action_bound_method=None)
    with torch.no_grad():  # loc far outside [-2, 2]
        [m for m in unmapped.actor.mu.modules() if isinstance(m, torch.nn.Linear)][-1].bias.fill_(10.0)
    collector = Collector(unmapped, DummyVectorEnv(env_fns), seed=0)
    collector.reset()
    with pytest.raises(ActionError, match="outside the action space"):
        collector.collect(n_step=2)
    collector.close()


class OutOfRangePolicy(TianshouBasePolicy):
    """A Tianshou policy answering action 5 in Discrete(2)."""

    def forward(self, batch: Any, state: Any = None, **kwargs: Any) -> Batch:
        return Batch(act=np.full(len(batch.obs), 5))


def test_a_tianshou_policy_with_actions_outside_the_space_raises_action_error() -> None:
    policy = OutOfRangePolicy(action_space=gym.spaces.Discrete(2))
    collector = Collector(policy, DummyVectorEnv([seeded("CartPole-v1", [1])]), seed=0)
    collector.reset()
    with pytest.raises(ActionError, match=r"outside the action space Discrete\(2\) for envs \[0\]"):
        collector.collect(n_step=1)
    collector.close()


def greedy_actions(policy: DiscreteQLearningPolicy, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return policy.model(torch.as_tensor(obs))[0].argmax(dim=1).numpy()


def collected(policy: Any, n_step: int = 300, **options: Any) -> tuple[np.ndarray, np.ndarray]:
    """The observations and actions of n_step transitions on CartPole, numpy's global generator seeded
    (Tianshou's DQN draws its epsilon from it)."""
    np.random.seed(0)
    sink = ListStore()
    env_fns = [seeded("CartPole-v1", list(range(100, 200)))]
    collector = Collector(policy, DummyVectorEnv(env_fns), store=sink, seed=0, unfinished="truncate", **options)
    collector.reset()
    collector.collect(n_step=n_step)
    collector.close()
    obs = np.concatenate([e.observations[:-1] for e in sink.episodes])
    acts = np.concatenate([e.actions for e in sink.episodes])
    assert len(acts) == n_step
    return obs, acts


def test_a_wrapped_policy_explores_as_in_tianshous_collector_under_the_callers_flag() -> None:
    """TianshouPolicy(policy) (exploration_noise=False): noise only where the collector asks, at the epsilon
    the caller's flag picks: eps_inference outside a training step, eps_training inside one."""
    non_greedy = {}
    for noise in (False, True):
        policy = dqn_policy(eps_inference=1.0)
        obs, acts = collected(TianshouPolicy(policy), exploration_noise=noise)
        non_greedy[noise] = int(np.sum(acts != greedy_actions(policy, obs)))
    assert non_greedy[False] == 0
    assert 90 < non_greedy[True] < 210  # a random action differs from the greedy one half of the time
    policy = dqn_policy(eps_training=1.0)
    obs, acts = collected(TianshouPolicy(policy), exploration_noise=True)
    assert np.array_equal(acts, greedy_actions(policy, obs))  # eps_inference (0) outside the training step
    with policy_within_training_step(policy):
        obs, acts = collected(TianshouPolicy(policy), exploration_noise=True)
    assert 90 < int(np.sum(acts != greedy_actions(policy, obs))) < 210


ROUTES = {  # how the user asks for exploration: (wrapper's exploration_noise or None: unwrapped, collector's)
    "collector given the policy": (None, True),
    "TianshouPolicy(exploration_noise=True)": (True, False),
    "both": (True, True),
}


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("context", ["none", "disabled"])
def test_exploration_noise_explores_at_eps_training_outside_any_training_step(route: str, context: str) -> None:
    """With eps_training 1.0 the collected actions are uniformly random (counted against the greedy ones),
    with 0.0 all greedy (eps_inference is then 1.0, so a call outside the training step would be random),
    whether the caller is in no context or in policy_within_training_step(enabled=False); the flag is set
    back after each call, and asking twice (wrapper and collector) adds the noise once."""
    wrapper, collector_noise = ROUTES[route]
    results = {}
    for eps in (1.0, 0.0):
        policy = dqn_policy(eps_training=eps, eps_inference=1.0 - eps)
        given = policy if wrapper is None else TianshouPolicy(policy, exploration_noise=wrapper)
        if context == "disabled":
            with policy_within_training_step(policy, enabled=False):
                obs, acts = collected(given, exploration_noise=collector_noise)
        else:
            obs, acts = collected(given, exploration_noise=collector_noise)
        assert policy.is_within_training_step is False
        results[eps] = (int(np.sum(acts != greedy_actions(policy, obs))), np.bincount(acts, minlength=2))
    assert results[0.0][0] == 0
    non_greedy, counts = results[1.0]
    assert 110 < non_greedy < 190 and counts.min() > 110  # binomial(300, 1/2): both actions, half non-greedy
    policy = dqn_policy(eps_training=1.0)
    once = collected(TianshouPolicy(policy, exploration_noise=True))[1]
    assert np.array_equal(once, collected(TianshouPolicy(policy, exploration_noise=True), exploration_noise=True)[1])


class FlagRecordingPolicy(TianshouBasePolicy):
    """Action 0 always; records is_within_training_step in forward and in add_exploration_noise."""

    def __init__(self) -> None:
        super().__init__(action_space=gym.spaces.Discrete(2))
        self.flags: list[tuple[str, bool]] = []

    def forward(self, batch: Any, state: Any = None, **kwargs: Any) -> Batch:
        self.flags.append(("forward", self.is_within_training_step))
        return Batch(act=np.zeros(len(batch.obs), np.int64))

    def add_exploration_noise(self, act: Any, batch: Any) -> Any:
        self.flags.append(("noise", self.is_within_training_step))
        return act


def test_exploring_calls_run_forward_and_noise_in_the_training_step_and_others_under_the_callers_flag() -> None:
    obs = np.zeros((2, 4), np.float32)
    policy = FlagRecordingPolicy()
    TianshouPolicy(policy, exploration_noise=True)(obs)
    assert policy.flags == [("forward", True), ("noise", True)] and not policy.is_within_training_step
    policy.flags.clear()
    wrapped = TianshouPolicy(policy)
    actions, _ = wrapped(obs)
    wrapped.add_exploration_noise(actions, obs)
    with policy_within_training_step(policy):
        actions, _ = wrapped(obs)
        wrapped.add_exploration_noise(actions, obs)
    assert policy.flags == [("forward", False), ("noise", False), ("forward", True), ("noise", True)]
    policy.flags.clear()
    TianshouPolicy(policy, exploration_noise=True).add_exploration_noise(actions, obs)
    assert policy.flags == []  # the call added the noise already
    with pytest.raises(TypeError, match="exploration_noise must be True or False"):
        TianshouPolicy(policy, exploration_noise="yes")  # type: ignore[arg-type]


def test_torch_policy_accepts_tianshou_nets_returning_output_and_state() -> None:
    """Net returns (logits, state): TorchPolicy acts as the wrapped Tianshou policy does; so does the
    recurrent net (batch-first Batch state) and the Gaussian actor ((loc, std) output)."""
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    policy = dqn_policy()
    space = policy.action_space
    actions, state = TorchPolicy(policy.model, space)(obs)
    assert state is None
    np.testing.assert_array_equal(actions, TianshouPolicy(policy)(obs)[0])

    rnn = dqn_policy(recurrent=True)
    mine, theirs = TorchPolicy(rnn.model, space, recurrent=True), TianshouPolicy(rnn)
    state_a = state_b = None
    for _ in range(3):
        act_a, state_a = mine(obs, state_a)
        act_b, state_b = theirs(obs, state_b)
        np.testing.assert_array_equal(act_a, act_b)
        torch.testing.assert_close(state_a["hidden"], state_b["hidden"])

    gaussian = gaussian_policy(action_scaling=False, action_bound_method=None)
    box = gaussian.action_space
    obs3 = obs[:, :3]
    with torch.no_grad():
        (loc, _), _ = gaussian.actor(obs3)
    np.testing.assert_allclose(TorchPolicy(gaussian.actor, box)(obs3)[0], np.clip(loc.numpy(), -2, 2), rtol=1e-6)
    torch.manual_seed(0)
    sampled = TorchPolicy(gaussian.actor, box, deterministic=False)(np.repeat(obs3[:1], 4000, axis=0))[0]
    with torch.no_grad():
        (loc1, std1), _ = gaussian.actor(obs3[:1])
    inside = sampled[np.abs(sampled) < 2.0]  # unclipped samples: N(loc, std), so std is used, not log std
    assert abs(float(np.std(inside)) - float(std1)) < 0.1 * float(std1) + 0.05


def test_torch_policy_refuses_a_module_without_state_when_told_it_returns_one() -> None:
    module = torch.nn.Linear(4, 2)
    policy = TorchPolicy(module, gym.spaces.Discrete(2), returns_state=True)
    with pytest.raises(ActionError, match=r"return \(output, state\)"):
        policy(np.zeros((1, 4), np.float32))


def test_tianshou_policy_refuses_other_objects() -> None:
    with pytest.raises(TypeError, match="wraps a tianshou Policy or Algorithm"):
        TianshouPolicy(torch.nn.Linear(4, 2))


def test_collectors_do_not_import_tianshou_to_recognise_its_policies() -> None:
    code = (
        "import sys, gymnasium as gym; from vcollect import Collector; from vcollect.policies import RandomPolicy\n"
        "env = gym.make('CartPole-v1'); c = Collector(RandomPolicy(env.action_space), env); c.reset(); "
        "c.collect(n_step=3)\n"
        "assert 'tianshou' not in sys.modules and 'torch' not in sys.modules; print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


class ModeRecordingPolicy(TianshouBasePolicy):
    """Action 0 always; records whether it and its net were in training mode at each call."""

    def __init__(self) -> None:
        super().__init__(action_space=gym.spaces.Discrete(2))
        self.net = torch.nn.Sequential(torch.nn.Dropout(0.5))
        self.modes: list[tuple[bool, bool]] = []

    def forward(self, batch: Any, state: Any = None, **kwargs: Any) -> Batch:
        self.modes.append((self.training, self.net[0].training))
        return Batch(act=np.zeros(len(batch.obs), np.int64))


def test_the_policy_runs_in_eval_mode_and_gets_its_mode_back() -> None:
    policy = ModeRecordingPolicy()
    policy.net[0].eval()  # a module already in eval mode stays so
    collector = Collector(policy, DummyVectorEnv([seeded("CartPole-v1", [1])]), seed=0)
    collector.reset()
    collector.collect(n_step=3)
    collector.close()
    assert policy.modes == [(False, False)] * 3
    assert policy.training and not policy.net[0].training
