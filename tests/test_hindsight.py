"""Hindsight relabelling over the rings (vcollect.buffers.hindsight), against Tianshou 2.0.1's
HERVectorReplayBuffer on the same data, and its index arithmetic against a brute-force walk of what was
written, ring wrap-around included.

The test env is a 2-D reach: each step moves one unit right (action 0) or up (action 1) from a start that
names the episode, so every achieved goal says which episode and which step reached it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sinks import ListStore
from vcollect import Collector
from vcollect.buffers import HERVectorRingBuffer, HindsightRelabeler, VectorRingBuffer
from vcollect.buffers.hindsight import future_goal_rows, window_ends
from vcollect.buffers.ring import ring_columns
from vcollect.envs import DummyVectorEnv
from vcollect.spaces import leaves

SPAN = 1000  # episode e starts at x = SPAN * e


class Reach(gym.Env[dict, np.int64]):
    """Reach a goal 3 right and 3 up of the start (terminated there), truncated after ``max_steps``; the start
    is ``(SPAN * seed, 0)``. Rewards are sparse (0 at the goal, else -1), as gymnasium-robotics' are."""

    observation_space = gym.spaces.Dict({
        "observation": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
        "achieved_goal": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
        "desired_goal": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
    })
    action_space = gym.spaces.Discrete(2)

    def __init__(self, max_steps: int = 9) -> None:
        self.max_steps = max_steps
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.count += 1
        episode = seed if seed is not None else int(self.np_random.integers(1, 10**6))
        self.pos = np.array([SPAN * episode, 0.0])
        self.goal = self.pos + 3.0
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        self.pos = self.pos + (np.array([1.0, 0.0]) if int(action) == 0 else np.array([0.0, 1.0]))
        self.t += 1
        reward = float(compute_reward(self.pos[None], self.goal[None])[0])
        reached = reward == 0.0
        return self._obs(), reward, reached, self.t >= self.max_steps and not reached, {}

    def _obs(self) -> dict:
        return {"observation": self.pos.copy(), "achieved_goal": self.pos.copy(), "desired_goal": self.goal.copy()}


def compute_reward(achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
    return -np.any(achieved != desired, axis=-1).astype(np.float64)


def where(goal: np.ndarray) -> tuple[int, int]:
    """(episode, index of the observation in its episode) of an achieved goal of Reach."""
    episode = int(goal[0] // SPAN)
    return episode, int(goal[0] - SPAN * episode + goal[1])


def rollouts(num_envs: int, lengths: list[list[int]], seed: int) -> list[list[dict[str, Any]]]:
    """Per env, episodes of Reach (episode ids distinct over envs) with random actions, cut at ``lengths``
    steps (the last episode of each env left unfinished when its length is negative: its absolute value)."""
    rng = np.random.default_rng(seed)
    out: list[list[dict[str, Any]]] = []
    episode_id = 1
    for env_id in range(num_envs):
        env, episodes = Reach(max_steps=100), []
        for length in lengths[env_id]:
            obs, _ = env.reset(seed=episode_id)
            steps: dict[str, list[Any]] = {"obs": [obs], "act": [], "rew": [], "term": [], "trunc": []}
            for t in range(abs(length)):
                act = int(rng.integers(0, 2))
                obs, rew, term, _, _ = env.step(act)
                last = t == abs(length) - 1 and length > 0
                steps["obs"].append(obs)
                steps["act"].append(act)
                steps["rew"].append(rew)
                steps["term"].append(bool(term))
                steps["trunc"].append(last and not term)
                if term:
                    break
            episodes.append({"id": episode_id, "finished": length > 0 or bool(steps["term"] and steps["term"][-1]),
                             **steps})
            episode_id += 1
        out.append(episodes)
    return out


def fill_ring(ring: VectorRingBuffer, data: list[list[dict[str, Any]]]) -> None:
    for env_id, episodes in enumerate(data):
        ids = np.array([env_id])
        for episode in episodes:
            ring.start_episodes(ids, stack([episode["obs"][0]]))
            for t in range(len(episode["act"])):
                ring.add(ids, np.array([episode["act"][t]]), np.array([episode["rew"][t]]),
                         np.array([episode["term"][t]]), np.array([episode["trunc"][t]]), stack([episode["obs"][t + 1]]))


def stack(observations: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.stack([o[key] for o in observations]) for key in observations[0]}


def check_relabelled(
    obs: dict[str, np.ndarray], next_obs: dict[str, np.ndarray], rewards: np.ndarray, horizon: int,
    episode_steps: dict[int, int],
) -> tuple[np.ndarray, np.ndarray]:
    """Every transition of a batch: its desired goal is the episode's own (3, 3) from its start, or an achieved
    goal of the same episode at most ``horizon`` steps ahead and not beyond its last stored step; the next
    observation has the same goal; the reward is the one for that goal. Returns which have another goal than
    their own (relabelled, less those relabelled with the own goal their episode reached at its end) and how
    far ahead those goals lie."""
    relabelled, ahead = [], []
    for i in range(len(rewards)):
        episode, t = where(obs["achieved_goal"][i])
        goal = obs["desired_goal"][i]
        np.testing.assert_array_equal(next_obs["desired_goal"][i], goal)
        np.testing.assert_array_equal(next_obs["achieved_goal"][i][None], compute_reward_input(episode, t + 1, next_obs["achieved_goal"][i]))
        assert rewards[i] == compute_reward(next_obs["achieved_goal"][i][None], goal[None])[0]
        if np.array_equal(goal, own_goal(obs["achieved_goal"][i])):  # as stored, or relabelled with the same
            relabelled.append(False)
            ahead.append(0)
            continue
        goal_episode, goal_t = where(goal)
        assert goal_episode == episode, "a relabelled goal comes from the transition's own episode"
        assert t + 1 <= goal_t <= min(t + horizon, episode_steps[episode]), (t, goal_t, horizon)
        relabelled.append(True)
        ahead.append(goal_t - t)
    return np.array(relabelled), np.array(ahead)


def own_goal(achieved: np.ndarray) -> np.ndarray:
    """The desired goal Reach set for the episode of an achieved goal."""
    return np.array([SPAN * where(achieved)[0] + 3.0, 3.0])


def changed(batch: dict[str, Any]) -> np.ndarray:
    """Which rows of a ring's batch were relabelled with another goal than their own."""
    own = np.stack([own_goal(a) for a in batch["observations"]["achieved_goal"]])
    return batch["relabelled"] & (batch["observations"]["desired_goal"] != own).any(axis=1)


def compute_reward_input(episode: int, t: int, achieved: np.ndarray) -> np.ndarray:
    assert where(achieved) == (episode, t)  # the next observation is the step's own
    return achieved[None]


LENGTHS = [[9, 4, 12, 3, 7], [6, 6, 10, 2], [12, 5, 8, 1, 9, -4]]
HORIZON = 5


@pytest.fixture(scope="module")
def data() -> list[list[dict[str, Any]]]:
    return rollouts(3, LENGTHS, seed=0)


def episode_steps(data: list[list[dict[str, Any]]]) -> dict[int, int]:
    return {episode["id"]: len(episode["act"]) for episodes in data for episode in episodes}


def test_relabelled_goals_come_from_the_same_episodes_future_within_the_horizon_as_tianshous(data: Any) -> None:
    """The same episodes in Tianshou's HERVectorReplayBuffer and a HERVectorRingBuffer (no wrap-around in
    either), horizon the longest episode as Tianshou documents it: in both every goal is the episode's own or
    one it achieves later, the reward is recomputed for it, and over many draws both relabel the same share
    of transitions with goals equally far ahead on average (their draws differ, the distributions are the
    same). With a shorter horizon every goal of the ring's lies within it."""
    pytest.importorskip("tianshou")
    from tianshou.data import Batch, HERVectorReplayBuffer

    def reward_fn(achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        return compute_reward(achieved, desired)

    steps = episode_steps(data)
    horizon = max(steps.values())
    theirs = HERVectorReplayBuffer(3 * 100, buffer_num=3, compute_reward_fn=reward_fn, horizon=horizon, future_k=4)
    for env_id, episodes in enumerate(data):
        for episode in episodes:
            for t in range(len(episode["act"])):
                theirs.add(Batch(obs=Batch([episode["obs"][t]]), act=[episode["act"][t]], rew=[episode["rew"][t]],
                                 terminated=[episode["term"][t]], truncated=[episode["trunc"][t]],
                                 obs_next=Batch([episode["obs"][t + 1]]), info=Batch([{}])), buffer_ids=[env_id])
    mine = HERVectorRingBuffer(3, reward_fn, horizon=horizon, future_k=4, capacity=100,
                               observation_space=Reach.observation_space, action_space=Reach.action_space, seed=1)
    fill_ring(mine, data)
    assert len(mine) == len(theirs) == sum(steps.values())
    np.random.seed(0)  # Tianshou draws from numpy's global generator
    shares: dict[str, list[float]] = {"theirs": [], "mine": []}
    aheads: dict[str, list[int]] = {"theirs": [], "mine": []}
    for _ in range(120):
        batch, _ = theirs.sample(32)
        flags, ahead = check_relabelled(batch.obs, batch.obs_next, batch.rew, horizon, steps)
        shares["theirs"].append(flags.mean())
        aheads["theirs"].extend(ahead[flags])
        sampled = mine.sample(32)
        flags, ahead = check_relabelled(sampled["observations"], sampled["next_observations"], sampled["rewards"],
                                        horizon, steps)
        np.testing.assert_array_equal(flags, changed(sampled))
        shares["mine"].append(flags.mean())
        aheads["mine"].extend(ahead[flags])
    for name in ("theirs", "mine"):
        assert 0.5 < np.mean(shares[name]) < 0.8, name  # 3/4 of the groups, fewer where a count floors
    assert abs(np.mean(shares["theirs"]) - np.mean(shares["mine"])) < 0.04
    assert abs(np.mean(aheads["theirs"]) - np.mean(aheads["mine"])) < 0.25
    assert set(aheads["theirs"]) == set(aheads["mine"]) == set(range(1, horizon + 1))
    short = HindsightRelabeler(mine, reward_fn, horizon=HORIZON, future_k=4)
    for _ in range(20):
        sampled = short.sample(32)
        flags, ahead = check_relabelled(sampled["observations"], sampled["next_observations"], sampled["rewards"],
                                        HORIZON, steps)
        np.testing.assert_array_equal(flags, changed(sampled))


def test_goal_indices_name_the_row_of_the_goal_and_rewards_are_recomputed(data: Any) -> None:
    ring = VectorRingBuffer(3, 100, Reach.observation_space, Reach.action_space, seed=3)
    fill_ring(ring, data)
    batch = HindsightRelabeler(ring, compute_reward, horizon=HORIZON, future_k=float("inf")).sample(0)
    assert batch["relabelled"].all() and len(batch["indices"]) == len(ring)  # every group, every transition
    stored = ring[batch["indices"]]["observations"]  # the ring itself is untouched
    np.testing.assert_array_equal(stored["desired_goal"], stored["achieved_goal"] - stored["achieved_goal"] % SPAN + 3)
    achieved = leaves(Reach.observation_space)
    column = ring_columns(ring).obs[[leaf.path for leaf in achieved].index(("achieved_goal",))]
    np.testing.assert_array_equal(batch["observations"]["desired_goal"], column[batch["goal_indices"]])
    np.testing.assert_array_equal(batch["next_observations"]["desired_goal"], column[batch["goal_indices"]])
    reached = batch["rewards"] == 0.0
    rows = batch["indices"]
    np.testing.assert_array_equal(reached, batch["goal_indices"] == rows - rows % 100 + (rows % 100 + 1) % 100)
    assert 0 < reached.sum() < len(reached)
    none = HindsightRelabeler(ring, compute_reward, horizon=HORIZON, future_k=1).sample(64)
    assert not none["relabelled"].any() and (none["goal_indices"] == -1).all()
    np.testing.assert_array_equal(none["rewards"], ring[none["indices"]]["rewards"])


# ------------------------------------------------------------------ index arithmetic, brute force


@st.composite
def ring_histories(draw: Any) -> tuple[int, int, list[list[tuple[int, bool]]]]:
    """(num_envs, capacity, per env a list of (steps, ended) episodes written in turn), rings wrapping."""
    num_envs = draw(st.integers(1, 3))
    capacity = draw(st.integers(3, 12))
    envs = [draw(st.lists(st.tuples(st.integers(1, 2 * capacity), st.booleans()), min_size=1, max_size=5))
            for _ in range(num_envs)]
    return num_envs, capacity, envs


def written(num_envs: int, capacity: int, envs: list[list[tuple[int, bool]]]) -> tuple[VectorRingBuffer, dict]:
    """A ring holding the histories (each step's observation naming (episode, index)), and a brute-force log:
    per flat row, the (episode, step index) of the step it holds, and per episode its step count."""
    space = gym.spaces.Dict({key: gym.spaces.Box(-np.inf, np.inf, (2,)) for key in ("observation", "achieved_goal",
                                                                                    "desired_goal")})
    ring = VectorRingBuffer(num_envs, capacity, space, gym.spaces.Discrete(2), seed=0)
    holds: dict[int, tuple[int, int]] = {}  # flat row -> (episode, step) of the step it holds
    lengths: dict[int, int] = {}
    episode = 0
    for env_id in range(num_envs):
        ids, row = np.array([env_id]), capacity - 1  # the row before the first one
        for steps, ended in envs[env_id]:
            episode += 1
            row = (row + 1) % capacity
            ring.start_episodes(ids, obs(episode, 0))
            holds.pop(env_id * capacity + row, None)
            for t in range(steps):
                last = t == steps - 1 and ended
                ring.add(ids, np.array([0]), np.array([0.0]), np.array([last]), np.array([False]), obs(episode, t + 1))
                holds[env_id * capacity + row] = (episode, t)
                row = (row + 1) % capacity
                holds.pop(env_id * capacity + row, None)  # now the row of the next observation
            lengths[episode] = steps
    return ring, {"holds": holds, "lengths": lengths}


def obs(episode: int, index: int) -> dict[str, np.ndarray]:
    value = np.array([[float(episode), float(index)]])
    return {"observation": value, "achieved_goal": value, "desired_goal": np.zeros((1, 2))}


@settings(max_examples=150, deadline=None)
@given(ring_histories(), st.integers(1, 6), st.integers(0, 2**31), st.floats(1.0, 16.0))
def test_window_ends_and_future_rows_match_a_brute_force_walk(
    history: Any, horizon: int, seed: int, future_k: float
) -> None:
    num_envs, capacity, envs = history
    ring, log = written(num_envs, capacity, envs)
    holds, lengths = log["holds"], log["lengths"]
    if not holds:
        return
    rng = np.random.default_rng(seed)
    rows = rng.choice(sorted(holds), size=int(rng.integers(1, 3 * len(holds) + 1)))
    where_step = {value: row for row, value in holds.items()}
    cols = ring_columns(ring)
    ends, steps = window_ends(rows, cols.has, cols.terminations | cols.truncations, cols.next_rows, horizon)
    for row, end, walked in zip(rows.tolist(), ends.tolist(), steps.tolist()):
        episode, t = holds[row]
        last = t
        while last + 1 < lengths[episode] and last + 1 - t < horizon and (episode, last + 1) in where_step:
            last += 1  # the episode's next step, still in the ring (its newest step has no successor yet)
        assert (end, walked) == (where_step[(episode, last)], last - t)
    future_p = 1.0 - 1.0 / future_k
    relabelled, future = future_goal_rows(rows, ends, steps, capacity, future_p, rng)
    groups: dict[int, list[int]] = {}
    for i, end in enumerate(ends.tolist()):
        groups.setdefault(end, []).append(i)
    per_env: dict[int, list[bool]] = {}
    for end, members in groups.items():
        decisions = {bool(relabelled[i]) for i in members}
        assert len(decisions) == 1  # a group is relabelled whole, with one future step
        per_env.setdefault(end // capacity, []).append(decisions.pop())
        if not relabelled[members[0]]:
            assert (future[members] == -1).all()
            continue
        assert len(set(future[members].tolist())) == 1
        episode, f = holds[int(future[members[0]])]
        latest = max(holds[int(rows[i])][1] for i in members)
        assert episode == holds[int(rows[members[0]])][0]
        assert latest <= f <= holds[end][1]  # from the group's latest sampled step to its window end
    for decisions in per_env.values():
        assert sum(decisions) == int(len(decisions) * future_p)


def test_a_collector_fills_a_her_ring_whose_samples_are_relabelled() -> None:
    ring = HERVectorRingBuffer(2, compute_reward, horizon=4, capacity=64, seed=0)
    sink = ListStore()
    with Collector(None, DummyVectorEnv([Reach] * 2), ring, store=sink, seed=5) as collector:
        collector.collect(n_episode=6, random=True, reset_before_collect=True)
    steps = {where(e.observations["achieved_goal"][0])[0]: len(e.actions) for e in sink.episodes}
    batch = ring.sample(256)
    steps.update({where(a)[0]: 10**6 for a in batch["observations"]["achieved_goal"] if where(a)[0] not in steps})
    flags, ahead = check_relabelled(batch["observations"], batch["next_observations"], batch["rewards"], 4, steps)
    assert flags.mean() > 0.6 and (ahead[flags] >= 1).all()


def test_bad_arguments_are_refused() -> None:
    flat = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(ValueError, match="goal-conditioned Dict observations"):
        HERVectorRingBuffer(1, compute_reward, 3, capacity=8, observation_space=flat, action_space=gym.spaces.Discrete(2))
    ring = HERVectorRingBuffer(1, compute_reward, 3, capacity=8)
    with pytest.raises(ValueError, match="goal-conditioned"):
        ring.bind_spaces(flat, gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="future_k must be a number >= 1"):
        HERVectorRingBuffer(1, compute_reward, 3, future_k=0.5, capacity=8)
    with pytest.raises(ValueError, match="horizon must be >= 1"):
        HERVectorRingBuffer(1, compute_reward, 0, capacity=8)
    with pytest.raises(TypeError, match="compute_reward_fn must be callable"):
        HERVectorRingBuffer(1, None, 3, capacity=8)  # type: ignore[arg-type]
    ring = HERVectorRingBuffer(1, compute_reward, 3, capacity=8, observation_space=Reach.observation_space,
                               action_space=Reach.action_space)
    fill_ring(ring, rollouts(1, [[4]], seed=1))
    with pytest.raises(ValueError, match="stack_num=1 and no n_step"):
        ring.sample(4, stack_num=2)
    with pytest.raises(ValueError, match="stack_num=1 and no n_step"):
        ring.sample(4, n_step=3, gamma=0.9)
