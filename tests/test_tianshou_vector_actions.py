"""vcollect.tianshou's Collector on vector envs that step every env at once (gymnasium vector envs in each
autoreset mode, EnvPool): the buffer holds the policy's own actions (a SAC actor's, in [-1, 1]) while the envs
get its ``map_action`` of them (Pendulum's [-2, 2]), and ``collect(random=True)`` stores the
``map_action_inverse`` of the samples the envs get, as Tianshou's Collector does; a policy without
``map_action`` stores what it gives. Every action an env receives is recorded on the env's side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("tianshou")
torch = pytest.importorskip("torch")
gym = pytest.importorskip("gymnasium")

from gymnasium.vector import AutoresetMode  # noqa: E402
from tianshou.algorithm.modelfree.sac import SACPolicy  # noqa: E402
from tianshou.utils.torch_utils import policy_within_training_step  # noqa: E402

import vcollect.tianshou as vt  # noqa: E402
from tests.tianshou_pendulum import SIZE, Recorded, sac, stored_per_env  # noqa: E402

NUM_ENVS = 2
RANDOM_STEPS, POLICY_STEPS = 4, 3  # per env


def random_then_policy(policy: Any, env: Any) -> list[np.ndarray]:
    """RANDOM_STEPS random steps then POLICY_STEPS of the policy (with its exploration noise): the stored
    actions per env."""
    buf = vt.VectorReplayBuffer(NUM_ENVS * SIZE, NUM_ENVS)
    collector = vt.Collector(policy, env, buf, exploration_noise=True, seed=7)
    collector.reset()
    collector.collect(n_step=NUM_ENVS * RANDOM_STEPS, random=True)
    if isinstance(policy, SACPolicy):
        with policy_within_training_step(policy):
            collector.collect(n_step=NUM_ENVS * POLICY_STEPS)
    else:
        collector.collect(n_step=NUM_ENVS * POLICY_STEPS)
    return stored_per_env(buf)


def check_on_the_policys_scale(policy: SACPolicy, stored: list[np.ndarray], given: list[np.ndarray]) -> None:
    """Random samples: drawn over [-2, 2] for the envs, stored through map_action_inverse; the policy's
    actions: stored raw in [-1, 1], given through map_action."""
    for mine, sent in zip(stored, given, strict=True):
        assert len(mine) == len(sent) == RANDOM_STEPS + POLICY_STEPS
        random_stored, random_sent = mine[:RANDOM_STEPS], sent[:RANDOM_STEPS]
        assert np.abs(random_sent).max() > 1.0  # env-scale samples
        assert np.abs(random_stored).max() <= 1.0
        assert np.array_equal(random_stored, policy.map_action_inverse(random_sent))
        policy_stored, policy_sent = mine[RANDOM_STEPS:], sent[RANDOM_STEPS:]
        assert np.abs(policy_stored).max() <= 1.0  # the actor's own actions
        assert np.abs(policy_stored).min() > 0.0  # (so that scaling them changes them)
        assert np.array_equal(policy.map_action(policy_stored), policy_sent)
        assert np.allclose(policy_sent, 2.0 * policy_stored)  # Pendulum's bounds: twice the raw action
    assert not np.array_equal(given[0][:RANDOM_STEPS], given[1][:RANDOM_STEPS])  # each env its own samples


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED])
def test_gymnasium_vector_env_stores_the_policys_actions(mode: AutoresetMode) -> None:
    policy = sac()
    venv = gym.vector.SyncVectorEnv([Recorded] * NUM_ENVS, autoreset_mode=mode)
    stored = random_then_policy(policy, venv)
    check_on_the_policys_scale(policy, stored, [np.stack(env.given) for env in venv.envs])  # type: ignore[attr-defined]


def test_make_vec_env_stores_the_policys_actions() -> None:
    policy = sac()
    venv = gym.make_vec("Pendulum-v1", num_envs=NUM_ENVS, vectorization_mode="sync")
    given: list[list[np.ndarray]] = [[] for _ in range(NUM_ENVS)]
    for env_id, env in enumerate(venv.envs):  # type: ignore[attr-defined]
        inner_step = env.step

        def step(action: Any, inner_step: Any = inner_step, env_id: int = env_id) -> Any:
            given[env_id].append(np.array(action, copy=True))
            return inner_step(action)

        env.step = step
    stored = random_then_policy(policy, venv)
    check_on_the_policys_scale(policy, stored, [np.stack(each) for each in given])


def test_envpool_stores_the_policys_actions() -> None:
    envpool = pytest.importorskip("envpool")
    policy = sac()
    pool = envpool.make("Pendulum-v1", env_type="gymnasium", num_envs=NUM_ENVS, seed=0)
    given: list[list[np.ndarray]] = [[] for _ in range(NUM_ENVS)]
    pool_step = pool.step

    def step(actions: Any, env_id: Any = None) -> Any:
        ids = range(NUM_ENVS) if env_id is None else np.asarray(env_id).tolist()
        for row, each in zip(np.asarray(actions), ids, strict=True):
            given[each].append(np.array(row, copy=True))
        return pool_step(actions, env_id)

    pool.step = step
    try:
        stored = random_then_policy(policy, pool)
    finally:
        pool.close()
    check_on_the_policys_scale(policy, stored, [np.stack(each) for each in given])


def test_a_policy_without_map_action_stores_what_it_gives() -> None:
    def push(obs: Any, state: Any = None) -> tuple[np.ndarray, Any]:
        return np.full((len(obs), 1), 1.5, dtype=np.float32), state

    venv = gym.vector.SyncVectorEnv([Recorded] * NUM_ENVS)
    stored = random_then_policy(push, venv)
    for env, mine in zip(venv.envs, stored, strict=True):
        sent = np.stack(env.given)  # type: ignore[attr-defined]
        assert len(mine) == len(sent) == RANDOM_STEPS + POLICY_STEPS
        assert np.abs(sent[:RANDOM_STEPS]).max() > 1.0  # the samples, stored as drawn
        assert np.array_equal(mine, sent)
        assert np.all(mine[RANDOM_STEPS:] == 1.5)
