"""make_vector: build any vcollect vector-env backend from an env id or a factory."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from vcollect.envs.base import VectorEnv
from vcollect.envs.dummy import DummyVectorEnv
from vcollect.envs.subproc import SubprocVectorEnv

__all__ = ["BACKENDS", "make_vector"]

BACKENDS: dict[str, Callable[..., VectorEnv]] = {
    "dummy": DummyVectorEnv,
    "subproc": SubprocVectorEnv,
}
"""Backend name -> constructor taking a list of env factories (plus backend keyword arguments)."""


def make_vector(
    env: str | Callable[[], gym.Env],
    num_envs: int,
    backend: str = "dummy",
    *,
    env_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """Build `num_envs` copies of `env` (a registered id, or a zero-arg factory) on the named backend.

    `env_kwargs` go to gymnasium.make (or to the factory); other keyword arguments go to the backend.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; available backends: {', '.join(sorted(BACKENDS))}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    env_kwargs = dict(env_kwargs or {})
    factory: Callable[[], gym.Env]
    if isinstance(env, str):
        try:
            gym.spec(env)
        except gym.error.Error as exc:
            raise ValueError(f"unknown environment id {env!r}: {exc}") from exc
        factory = functools.partial(gym.make, env, **env_kwargs)
    elif callable(env):
        factory = functools.partial(env, **env_kwargs) if env_kwargs else env
    else:
        raise TypeError(
            f"env must be a registered env id or a zero-argument factory, got {type(env).__name__}"
        )
    return BACKENDS[backend]([factory] * num_envs, **kwargs)
