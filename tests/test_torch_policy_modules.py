"""TorchPolicy with modules of the user's own that follow Tianshou's convention, ``forward(obs, state=None,
info=None) -> (output, state)``: recognised by their first output, their state kept per env and reset per
episode by the collectors."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from tests.sinks import ListStore
from vcollect import Collector
from vcollect.envs import DummyVectorEnv
from vcollect.errors import ActionError
from vcollect.policies import TorchPolicy


class Stateless(torch.nn.Module):
    """An MLP returning ``(logits, None)``, as Tianshou's Net does; no Tianshou class anywhere."""

    def __init__(self, actions: int = 2) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, actions))

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[Any, Any]:
        return self.net(torch.as_tensor(obs, dtype=torch.float32)), state


class Memory(torch.nn.Module):
    """Returns ``(logits, hidden)``, hidden batch-first (Tianshou's layout): the running sum of the
    observations; action 0 while its first entry is positive, so the actions depend on the steps before."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[bool] = []  # whether each call was given a state

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[Any, Any]:
        self.calls.append(state is not None)
        hidden = obs if state is None else state + obs
        return torch.stack([hidden[:, 0], -hidden[:, 0]], dim=1), hidden


class TorchLayout(torch.nn.Module):
    """A one-layer GRU returning ``(logits, hidden)`` with torch's hidden layout (layers, batch, H)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.rnn = torch.nn.GRU(4, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[Any, Any]:
        out, hidden = self.rnn(obs.unsqueeze(0), state)
        return self.head(out[0]), hidden


class NoiseEnv(gym.Env[np.ndarray, np.int64]):
    """Observations drawn from the reset's seed; episodes of 5 to 12 steps."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.left = int(self.np_random.integers(5, 13))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.left -= 1
        return self._obs(), float(action), self.left == 0, False, {}

    def _obs(self) -> np.ndarray:
        return self.np_random.normal(size=4).astype(np.float32)


def obs_batch(k: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(k, 4)).astype(np.float32)


def test_a_module_returning_logits_and_none_acts_as_its_logits_say() -> None:
    module = Stateless(3)
    policy = TorchPolicy(module, spaces.Discrete(3))
    obs = obs_batch(64)
    actions, state = policy(obs)
    assert state is None and policy.returns_state is True
    with torch.no_grad():
        np.testing.assert_array_equal(actions, module(obs)[0].argmax(dim=1).numpy())
    assert len(np.unique(actions)) > 1
    sink = ListStore()
    with Collector(TorchPolicy(Stateless(), spaces.Discrete(2)), DummyVectorEnv([lambda: gym.make("CartPole-v1")] * 2),
                   store=sink, seed=0) as collector:
        collector.reset()
        assert collector.collect(n_episode=4).n_collected_episodes == 4
        assert collector._actor.state is None
    with torch.no_grad():
        for episode in sink.episodes:
            np.testing.assert_array_equal(episode.actions, module_argmax(Stateless(), episode.observations[:-1]))


def module_argmax(module: torch.nn.Module, obs: np.ndarray) -> np.ndarray:
    return module(torch.as_tensor(obs))[0].argmax(dim=1).numpy()


def test_a_box_module_returning_mean_and_none_or_mean_and_log_std() -> None:
    class Mean(torch.nn.Module):
        def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[Any, Any]:
            return obs[:, :2] * 0.5, None

    class Gaussian(torch.nn.Module):
        def forward(self, obs: Any) -> tuple[Any, Any]:
            return obs[:, :2], torch.full_like(obs[:, :2], -30.0)

    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    obs = obs_batch(8) * 0.5
    np.testing.assert_allclose(TorchPolicy(Mean(), box)(obs)[0], np.clip(obs[:, :2] * 0.5, -1, 1))
    gaussian = TorchPolicy(Gaussian(), box, deterministic=False)
    np.testing.assert_allclose(gaussian(obs)[0], np.clip(obs[:, :2], -1, 1), atol=1e-6)  # std e^-30: the mean
    assert gaussian.returns_state is False


def replay(module: torch.nn.Module, observations: np.ndarray) -> list[int]:
    """The module's greedy actions over one episode's observations, its state from none at the start."""
    state, actions = None, []
    with torch.no_grad():
        for obs in observations:
            logits, state = module(torch.as_tensor(obs[None]), state)
            actions.append(int(logits.argmax(dim=1)[0]))
    return actions


def test_a_module_returning_logits_and_hidden_keeps_each_envs_state_and_resets_it_per_episode() -> None:
    """Three envs stepped together: every stored episode is what the module does on that episode alone,
    starting from no state; the state matters (without it, or run on from the episode before, the actions
    differ)."""
    module = Memory()
    sink = ListStore()
    envs = DummyVectorEnv([NoiseEnv] * 3)
    with Collector(TorchPolicy(module, spaces.Discrete(2)), envs, store=sink, seed=0) as collector:
        collector.reset()
        collector.collect(n_episode=9)
        assert tuple(collector._actor.state.shape) == (3, 4)
    assert module.calls[0] is False and all(module.calls[1:])  # the state is handed back from the 2nd call
    episodes = sink.episodes
    assert len(episodes) == 9 and {e.env_id for e in episodes} == {0, 1, 2}
    stateless_differs = carried_differs = 0
    reference = Memory()
    for episode in episodes:
        observations = episode.observations[:-1]
        assert episode.actions.tolist() == replay(reference, observations)
        stateless = module_argmax_each(reference, observations)
        stateless_differs += stateless != episode.actions.tolist()
    for env_id in range(3):
        first, second = [e for e in episodes if e.env_id == env_id][:2]
        carried = replay(reference, np.concatenate([first.observations[:-1], second.observations[:-1]]))
        carried_differs += carried[len(first.actions):] != second.actions.tolist()
    assert stateless_differs > 0 and carried_differs > 0


def module_argmax_each(module: Memory, observations: np.ndarray) -> list[int]:
    """Each step from no state: the actions a policy that dropped the state would take."""
    with torch.no_grad():
        return module(torch.as_tensor(observations))[0].argmax(dim=1).tolist()


def test_a_state_not_batch_first_is_refused_by_default_and_kept_with_its_batch_axis() -> None:
    obs = obs_batch(5)
    with pytest.raises(ActionError, match=r"state of shape \(1, 5, 8\).*hidden_batch_dim"):
        TorchPolicy(TorchLayout(), spaces.Discrete(2))(obs)
    policy = TorchPolicy(TorchLayout(), spaces.Discrete(2), hidden_batch_dim=1)
    actions, state = policy(obs)
    assert tuple(state.shape) == (5, 1, 8)
    reference = TorchLayout()
    with torch.no_grad():
        _, hidden = reference(torch.as_tensor(obs))
        logits, _ = reference(torch.as_tensor(obs), hidden)
    np.testing.assert_array_equal(policy(obs, state)[0], logits.argmax(dim=1).numpy())
    dropped = TorchPolicy(TorchLayout(), spaces.Discrete(2), recurrent=False)
    assert dropped(obs)[1] is None


def test_a_tuple_action_space_pair_is_an_output_and_a_nested_one_an_output_and_state() -> None:
    space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))

    class Pair(torch.nn.Module):
        def forward(self, obs: Any) -> tuple[Any, Any]:
            return obs[:, :2], obs[:, 1:4]

    class PairAndState(torch.nn.Module):
        def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[Any, Any]:
            return (obs[:, :2], obs[:, 1:4]), None

    obs = obs_batch(6)
    expected = (obs[:, :2].argmax(axis=1), obs[:, 1:4].argmax(axis=1))
    for module in (Pair(), PairAndState()):
        actions, state = TorchPolicy(module, space)(obs)
        assert state is None
        np.testing.assert_array_equal(actions[0], expected[0])
        np.testing.assert_array_equal(actions[1], expected[1])
