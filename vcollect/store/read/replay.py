"""Replay stored episodes: reset the dataset's env with an episode's seed and options, step its actions,
and compare what the env returns with what was stored (``vcollect verify --replay N``; the step by step
comparison is episode_replay.replay_steps)."""

from __future__ import annotations

import numpy as np

from vcollect.errors import ReplayDivergenceError
from vcollect.store.read.episode_replay import replay_steps
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
    try:
        for _ in replay_steps(env, episode, dataset.observation_space, dataset.action_space):
            pass
    except ReplayDivergenceError as exc:
        return exc.problem
    return None
