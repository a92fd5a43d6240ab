"""Replay stored episodes: reset the dataset's env with an episode's seed and options, step its actions,
and compare what the env returns with what was stored (``vcollect verify --replay N``)."""

from __future__ import annotations

import numpy as np

from vcollect.spaces import flatten_batch, unflatten_batch
from vcollect.store.read.reader import Dataset, EpisodeData

__all__ = ["replay_episodes"]


def replay_episodes(dataset: Dataset, count: int, seed: int = 0) -> tuple[int, list[str]]:
    """Replay up to ``count`` episodes that carry a seed, drawn at random with ``seed``: (how many were
    replayed, one line per episode that differs from its replay). Observations, rewards and terminations
    must match exactly; a stored truncation may also mark an episode cut short by the collector
    (``unfinished='truncate'``), so only the env's own truncations must be stored."""
    seeded = np.flatnonzero(dataset.episode_seeded).tolist()
    if not seeded or count <= 0:
        return 0, []
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(seeded, size=min(count, len(seeded)), replace=False).tolist())
    env = dataset.recover_environment()
    problems: list[str] = []
    try:
        for index in chosen:
            episode = dataset[index]
            problem = _replay_one(env, episode, dataset)
            if problem is not None:
                problems.append(f"episode {episode.id} (env {episode.env_id}, seed {episode.seed}): {problem}")
    finally:
        env.close()
    return len(chosen), problems


def _replay_one(env: object, episode: EpisodeData, dataset: Dataset) -> str | None:
    obs_space, act_space = dataset.observation_space, dataset.action_space
    obs, _ = env.reset(seed=episode.seed, options=episode.options)  # type: ignore[attr-defined]
    if not _same(obs_space, obs, episode.observations, 0):
        return "the reset observation differs"
    actions = flatten_batch(act_space, episode.actions)
    for t in range(len(episode)):
        action = _row(act_space, actions, t)
        obs, reward, terminated, truncated, _ = env.step(action)  # type: ignore[attr-defined]
        if not _same(obs_space, obs, episode.observations, t + 1):
            return f"the observation after step {t} differs"
        if float(reward) != float(episode.rewards[t]):
            return f"the reward of step {t} differs ({reward!r} replayed, {episode.rewards[t]!r} stored)"
        if bool(terminated) != bool(episode.terminations[t]):
            return f"the termination of step {t} differs"
        if truncated and not episode.truncations[t]:
            return f"the env truncated at step {t}, the stored episode did not"
    return None


def _same(space: object, value: object, stored: object, t: int) -> bool:
    """Whether ``value`` (one observation) equals row t of the stored observations, leaf by leaf."""
    got = flatten_batch(space, value)  # type: ignore[arg-type]
    want = flatten_batch(space, stored)  # type: ignore[arg-type]
    return all(np.array_equal(np.asarray(g), np.asarray(w)[t]) for g, w in zip(got, want))


def _row(space: object, leaves: list[np.ndarray], t: int) -> object:
    """Action t in the nested form the env takes."""
    return unflatten_batch(space, [leaf[t] for leaf in leaves])  # type: ignore[arg-type]
