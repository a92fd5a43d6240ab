"""The least a recording, validating collector can cost on CartPole's 64-env vector entry point.

Four rows, timed by this process's CPU time in alternated rounds: the raw loop (random actions, NEXT_STEP
restarts, real transitions counted as compare.py counts them); a "floor" loop that also copies each step's
actions, observations, rewards and flags into a preallocated ring row and checks the observations against
the space's bounds (the least any collector that records and validates does); and vcollect's Collector
with random actions and with RandomPolicy. Usage: ``python benchmarks/vector_floor.py [ROUNDS]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

import vcollect
from vcollect.policies import RandomPolicy

NUM_ENVS = 64
STEPS = 2_500  # vector steps per window
RING_ROWS = 4_096

Row = Callable[[np.random.Generator], float]  # CPU seconds per STEPS * NUM_ENVS real transitions


def make_envs() -> gym.vector.VectorEnv:
    envs = gym.make_vec("CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    return envs


def raw_row() -> Row:
    """The vector env stepped with random actions, nothing kept."""
    envs = make_envs()

    def window(rng: np.random.Generator) -> float:
        real, restarting = 0, np.zeros(NUM_ENVS, bool)
        start = time.process_time()
        for _ in range(STEPS):
            _, _, terminated, truncated, _ = envs.step(rng.integers(0, 2, size=NUM_ENVS))
            real += NUM_ENVS - int(np.count_nonzero(restarting))
            restarting = terminated | truncated
        return (time.process_time() - start) * STEPS * NUM_ENVS / real

    return window


def floor_row() -> Row:
    """The raw loop plus one ring row written per step and the observations checked against their bounds."""
    envs = make_envs()
    space = envs.single_observation_space
    high = np.where(np.isfinite(space.high), space.high, np.finfo(np.float32).max).astype(np.float32)
    bound = np.tile(high, (NUM_ENVS, 1))
    obs = np.zeros((RING_ROWS, NUM_ENVS, *space.shape), np.float32)
    actions = np.zeros((RING_ROWS, NUM_ENVS), np.int64)
    rewards = np.zeros((RING_ROWS, NUM_ENVS))
    terminations = np.zeros((RING_ROWS, NUM_ENVS), bool)
    truncations = np.zeros((RING_ROWS, NUM_ENVS), bool)

    def window(rng: np.random.Generator) -> float:
        real, restarting = 0, np.zeros(NUM_ENVS, bool)
        start = time.process_time()
        for j in range(STEPS):
            action = rng.integers(0, 2, size=NUM_ENVS)
            o, r, terminated, truncated, _ = envs.step(action)
            k = j % RING_ROWS
            actions[k], obs[k], rewards[k], terminations[k], truncations[k] = action, o, r, terminated, truncated
            if np.count_nonzero(np.abs(obs[k]) <= bound) != obs[k].size:
                raise ValueError("an observation outside the space")
            real += NUM_ENVS - int(np.count_nonzero(restarting))
            restarting = terminated | truncated
        return (time.process_time() - start) * STEPS * NUM_ENVS / real

    return window


def collector_row(policy: bool) -> Row:
    """vcollect's Collector on the same vector env, ``collect(n_step=STEPS * NUM_ENVS)`` per window."""
    envs = gym.make_vec("CartPole-v1", num_envs=NUM_ENVS, vectorization_mode="vector_entry_point")
    collector = vcollect.Collector(RandomPolicy(envs.single_action_space, seed=0) if policy else None, envs, seed=0)
    collector.collect(n_step=2_000, reset_before_collect=True, random=not policy)

    def window(rng: np.random.Generator) -> float:
        start = time.process_time()
        collector.collect(n_step=STEPS * NUM_ENVS, random=not policy)
        return time.process_time() - start

    return window


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rows = {"raw": raw_row(), "floor": floor_row(), "vcollect random": collector_row(False),
            "vcollect RandomPolicy": collector_row(True)}
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, window in rows.items():
            times[name].append(window(rng))
    raw = np.array(times["raw"])
    for name, values in times.items():
        v = np.array(values)
        print(f"{name:24s} best {v.min() / STEPS * 1e6:7.1f} us per {NUM_ENVS} transitions, median "
              f"{np.median(v) / STEPS * 1e6:7.1f}; raw / this: paired median {np.median(raw / v):.3f}, best "
              f"{raw.min() / v.min():.3f}")


if __name__ == "__main__":
    main()
