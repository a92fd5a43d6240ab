"""Minari's reference scores: the returns a random and an expert policy reach, to normalise episode returns.

``reference_scores`` computes the metadata keys Minari stores (``ref_min_score``, ``ref_max_score``,
``num_episodes_average_score``) by Minari's rule: only when ``ref_max_score`` or ``expert_policy`` is given;
``ref_min_score``, when not given, is the mean return of uniformly random actions (action space seeded
123) over ``num_episodes_average_score`` episodes of the (evaluation) env, first reset seeded 123, as
Minari computes it, so the numbers match a Minari dataset made from the same env.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

__all__ = ["average_return", "get_normalized_score", "reference_scores"]


def average_return(env: gym.Env[Any, Any], policy: Callable[[Any], Any], num_episodes: int) -> float:
    """Mean undiscounted return of ``policy`` over ``num_episodes`` episodes (first reset seeded 123, as Minari)."""
    returns: list[float] = []
    obs, _ = env.reset(seed=123)
    total = 0.0
    while len(returns) < num_episodes:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        total += float(reward)
        if terminated or truncated:
            returns.append(total)
            total = 0.0
            obs, _ = env.reset()
    return float(np.mean(returns, dtype=np.float32))


def reference_scores(
    env: str | gym.Env[Any, Any] | EnvSpec | None,
    *,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    expert_policy: Callable[[Any], Any] | None = None,
    num_episodes_average_score: int = 100,
) -> dict[str, Any]:
    """The reference-score metadata for a dataset of ``env``.

    Args:
        env: The env a missing score is computed on: an id, env, EnvSpec or its JSON (None: none).
        ref_min_score: The minimum score; computed as a random policy's average return when None.
        ref_max_score: The maximum score.
        expert_policy: A policy (observation -> action) whose average return becomes the maximum score.
        num_episodes_average_score: The episodes a computed score averages.

    Returns:
        ``ref_min_score``, ``ref_max_score`` and ``num_episodes_average_score``; {} when neither
        ``ref_max_score`` nor ``expert_policy`` is given (Minari stores none then).

    Raises:
        ValueError: Both ``ref_max_score`` and ``expert_policy`` are given, or a score must be computed and
            there is no env to compute it on.
    """
    if expert_policy is not None and ref_max_score is not None:
        raise ValueError("pass expert_policy or ref_max_score, not both (Minari refuses both as well)")
    if expert_policy is None and ref_max_score is None:
        return {}
    if ref_min_score is None or expert_policy is not None:
        if env is None:
            raise ValueError(
                "computing a reference score needs the env: pass env (or eval_env), or both ref_min_score and "
                "ref_max_score"
            )
        if isinstance(env, str) and env.lstrip().startswith("{"):
            env = EnvSpec.from_json(env)
        score_env = env if isinstance(env, gym.Env) else gym.make(env)
        try:
            if ref_min_score is None:
                score_env.action_space.seed(123)
                ref_min_score = average_return(
                    score_env, lambda _obs: score_env.action_space.sample(), num_episodes_average_score
                )
            if expert_policy is not None:
                ref_max_score = average_return(score_env, expert_policy, num_episodes_average_score)
        finally:
            if score_env is not env:
                score_env.close()
    return {"ref_max_score": float(ref_max_score),  # type: ignore[arg-type]
            "ref_min_score": float(ref_min_score),
            "num_episodes_average_score": int(num_episodes_average_score)}


def get_normalized_score(dataset: Any, returns: Any) -> np.ndarray:
    """(returns - ref_min_score) / (ref_max_score - ref_min_score), with the dataset's reference scores (its
    metadata, as Minari keeps them).

    Args:
        dataset: The dataset whose metadata holds the reference scores.
        returns: The returns to normalise.

    Returns:
        The normalised returns, float64.

    Raises:
        ValueError: The dataset has no reference scores (as Minari's).
    """
    metadata = dataset.metadata
    low, high = metadata.get("ref_min_score"), metadata.get("ref_max_score")
    if low is None or high is None:
        raise ValueError(
            f"Reference score not provided for dataset {dataset.id!r}. Can't compute the normalized score "
            "(pass ref_max_score or expert_policy when creating it)."
        )
    return (np.asarray(returns, dtype=np.float64) - low) / (high - low)

