"""vcollect.tianshou's ``collect(random=True)`` where no Tianshou DummyVectorEnv is stepped (there it is
Tianshou's, bit for bit: tests/test_tianshou_reproduces.py): vcollect's own backends sample one seeded copy of
the action space per env, give the samples to the envs and store the policy's ``map_action_inverse`` of them,
on the scale of the policy's own stored actions (gymnasium and EnvPool vector envs alike:
tests/test_tianshou_vector_actions.py). Every action an env receives is recorded by the env itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("tianshou")
torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from tianshou.algorithm.modelfree.sac import SACPolicy  # noqa: E402
from tianshou.utils.torch_utils import policy_within_training_step  # noqa: E402

import vcollect.tianshou as vt  # noqa: E402
from tests.tianshou_pendulum import SIZE, Recorded, sac, stored_per_env  # noqa: E402
from vcollect.envs import DummyVectorEnv  # noqa: E402


def random_then_policy(policy: Any, seed: int, steps: int = 12) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Random steps then the policy's on vcollect's DummyVectorEnv: (stored, given) actions per env."""
    envs = [Recorded() for _ in range(2)]
    buf = vt.VectorReplayBuffer(2 * SIZE, 2)
    collector = vt.Collector(policy, DummyVectorEnv([lambda env=env: env for env in envs]), buf,
                             exploration_noise=True, seed=seed)
    collector.reset()
    collector.collect(n_step=steps, random=True)
    if isinstance(policy, SACPolicy):
        with policy_within_training_step(policy):
            collector.collect(n_step=4)
    return stored_per_env(buf), [np.stack(env.given) for env in envs]


def test_random_actions_are_stored_on_the_policys_scale_from_seeded_copies() -> None:
    policy = sac()
    stored, given = random_then_policy(policy, seed=11)
    for mine, sent in zip(stored, given, strict=True):
        assert len(mine) == len(sent) == 8  # 6 random steps, 2 of the policy
        random_sent, random_stored = sent[:6], mine[:6]
        assert np.abs(random_sent).max() > 1.0  # env-scale samples, drawn over Pendulum's [-2, 2]
        assert np.abs(random_stored).max() <= 1.0  # stored on the policy's scale, as its own actions are
        assert np.array_equal(random_stored, policy.map_action_inverse(random_sent))
        assert np.array_equal(policy.map_action(mine[6:]), sent[6:])  # the policy's: raw stored, mapped given
    assert not np.array_equal(given[0][:6], given[1][:6])  # each env its own copy of the space
    again, _ = random_then_policy(sac(), seed=11)
    other, _ = random_then_policy(sac(), seed=12)
    for mine, repeated, changed in zip(stored, again, other, strict=True):
        assert np.array_equal(mine[:6], repeated[:6])
        assert not np.array_equal(mine[:6], changed[:6])


def test_without_action_scaling_the_samples_are_stored_as_drawn() -> None:
    stored, given = random_then_policy(sac(action_scaling=False), seed=3)
    for mine, sent in zip(stored, given, strict=True):
        assert np.abs(sent[:6]).max() > 1.0
        assert np.array_equal(mine[:6], sent[:6])


def test_a_policy_without_map_action_inverse_stores_the_samples() -> None:
    def zeros(obs: Any, state: Any = None) -> tuple[np.ndarray, Any]:
        return np.zeros((len(obs), 1), dtype=np.float32), state

    stored, given = random_then_policy(zeros, seed=5, steps=8)
    for mine, sent in zip(stored, given, strict=True):
        assert len(mine) == len(sent) == 4
        assert np.abs(sent).max() > 1.0
        assert np.array_equal(mine, sent)


def test_no_policy_state_comes_out_of_random_steps() -> None:
    """As Tianshou's Collector: after ``collect(random=True)`` the policy starts again from no state."""
    seen: list[Any] = []

    def counting(obs: Any, state: Any = None) -> tuple[np.ndarray, Any]:
        seen.append(None if state is None else state.copy())
        count = np.zeros(len(obs)) if state is None else state
        return np.zeros((len(obs), 1), dtype=np.float32), count + 1

    collector = vt.Collector(counting, DummyVectorEnv([Recorded, Recorded]), vt.VectorReplayBuffer(2 * SIZE, 2))
    collector.reset()
    collector.collect(n_step=4)
    assert seen[0] is None and np.array_equal(seen[1], [1, 1])
    collector.collect(n_step=4, random=True)
    collector.collect(n_step=2)
    assert len(seen) == 3 and seen[2] is None
