"""make_vector: build any vcollect vector-env backend from an env id or a factory; as_vector_env: a VectorEnv
from whatever a user passes as envs."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from vcollect.envs.base import VectorEnv
from vcollect.envs.dummy import DummyVectorEnv
from vcollect.envs.envpool_adapter import EnvPoolVectorEnv, is_envpool
from vcollect.envs.gymnasium_adapter import GymnasiumVectorEnv
from vcollect.envs.restarts import check_max_restarts
from vcollect.envs.subproc import SubprocVectorEnv

__all__ = ["BACKENDS", "FROM_ENV_ID", "RESTART_BACKENDS", "TIMEOUT_BACKENDS", "make_vector"]

TIMEOUT_BACKENDS = frozenset({"subproc", "ray"})
"""Backends that take ``timeout=`` (seconds per synchronous step or reset): their envs run in other
processes, which can be stopped when a call never returns. The others call the envs in this process (or
on EnvPool's threads) and cannot interrupt a call that hangs."""

RESTART_BACKENDS = frozenset({"subproc", "ray"})
"""Backends that take ``max_restarts=`` (replace a worker process or actor that died or whose env raised;
vcollect.envs.restarts)."""

OPTIONAL_BACKENDS: dict[str, str] = {"ray": "ray", "envpool": "envpool"}
"""Backends that need an extra: backend name -> the package it imports (and the extra that installs it)."""


def _installed(package: str) -> bool:
    """Whether ``package`` can be imported here (found on the path; not imported, so this stays cheap)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-removed installation
        return False


def _ray_vector_env(env_fns: list[Callable[[], gym.Env]], **kwargs: Any) -> VectorEnv:
    """RayVectorEnv, imported on use: Ray is optional (ImportError naming `vcollect[ray]` without it)."""
    from vcollect.envs.ray_env import RayVectorEnv

    return RayVectorEnv(env_fns, **kwargs)


BACKENDS: dict[str, Callable[..., VectorEnv]] = {
    "dummy": DummyVectorEnv,
    "subproc": SubprocVectorEnv,
    "gymnasium": GymnasiumVectorEnv.from_env_fns,
}
"""Backend name -> constructor taking a list of env factories (plus backend keyword arguments); only the
backends whose packages are installed (``ray`` with the ``ray`` extra)."""
if _installed(OPTIONAL_BACKENDS["ray"]):
    BACKENDS["ray"] = _ray_vector_env

FROM_ENV_ID: dict[str, Callable[..., VectorEnv]] = {
    "gymnasium": GymnasiumVectorEnv.make,
}
"""Backends built from a registered env id: name -> builder(env_id, num_envs, **kwargs). The gymnasium
backend uses gymnasium.make_vec (so vector entry points work); envpool (listed only with the ``envpool``
extra installed) needs an envpool task id."""
if _installed(OPTIONAL_BACKENDS["envpool"]):
    FROM_ENV_ID["envpool"] = EnvPoolVectorEnv.make


def make_vector(
    env: str | Callable[[], gym.Env],
    num_envs: int,
    backend: str = "dummy",
    *,
    env_kwargs: dict[str, Any] | None = None,
    timeout: float | None = None,
    max_restarts: int = 0,
    **kwargs: Any,
) -> VectorEnv:
    """Build ``num_envs`` copies of ``env`` on the named backend.

    ``backend="gymnasium"`` wraps gymnasium.make_vec (its vector entry point when the env has one; see
    GymnasiumVectorEnv.make); ``backend="envpool"`` needs an envpool task id (see EnvPoolVectorEnv.make).

    Args:
        env: A registered env id, or a zero-argument factory returning a ``gymnasium.Env``.
        num_envs: How many envs to run.
        backend: One of ``BACKENDS`` (built from factories) or ``FROM_ENV_ID`` (built from an env id):
            ``"dummy"``, ``"subproc"``, ``"gymnasium"``, and with their extras ``"ray"`` and ``"envpool"``.
        env_kwargs: Keyword arguments for ``gymnasium.make`` (or for the factory).
        timeout: Seconds each synchronous step or reset may take (None: wait forever); only the backends of
            ``TIMEOUT_BACKENDS`` (subproc, ray) take one, and past it they raise EnvWorkerError and close.
        max_restarts: How many times the subproc and ray backends (``RESTART_BACKENDS``) replace a worker that
            died or whose env raised before EnvWorkerError (vcollect.envs.restarts); default 0. The other
            backends cannot replace an env and take only 0.
        **kwargs: Passed to the backend.

    Returns:
        The vector env.

    Raises:
        ImportError: The backend needs an extra that is not installed (the message names it).
        ValueError: An unknown backend, ``num_envs < 1``, or a timeout for an in-process backend (which
            cannot interrupt a hung call).
        TypeError: ``backend="envpool"`` with an env that is not a task id.
    """
    if backend in OPTIONAL_BACKENDS and backend not in BACKENDS and backend not in FROM_ENV_ID:
        extra = OPTIONAL_BACKENDS[backend]
        raise ImportError(f"the {backend} backend needs the {extra} extra: pip install 'vcollect[{extra}]'")
    if backend not in BACKENDS and backend not in FROM_ENV_ID:
        names = ", ".join([*BACKENDS, *(b for b in FROM_ENV_ID if b not in BACKENDS)])
        missing = [f"{name} (vcollect[{extra}])" for name, extra in OPTIONAL_BACKENDS.items()
                   if name not in BACKENDS and name not in FROM_ENV_ID]
        not_installed = f"; not installed: {', '.join(missing)}" if missing else ""
        raise ValueError(f"unknown backend {backend!r}; available backends: {names}{not_installed}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if timeout is not None:
        if backend not in TIMEOUT_BACKENDS:
            raise ValueError(
                f"the {backend} backend calls its envs in this process and cannot interrupt a step or reset "
                f"that never returns, so it takes no timeout; use {' or '.join(sorted(TIMEOUT_BACKENDS))}"
            )
        kwargs["timeout"] = timeout
    if max_restarts != 0:
        if backend not in RESTART_BACKENDS:
            raise ValueError(
                f"the {backend} backend cannot replace a failed env, so it takes no max_restarts; use "
                f"{' or '.join(sorted(RESTART_BACKENDS))}"
            )
        kwargs["max_restarts"] = check_max_restarts(max_restarts)
    if backend == "envpool":
        if not isinstance(env, str):
            raise TypeError(f"the envpool backend builds envs from an envpool task id (a str), got {type(env).__name__}")
        return EnvPoolVectorEnv.make(env, num_envs, **(env_kwargs or {}), **kwargs)
    env_kwargs = dict(env_kwargs or {})
    factory: Callable[[], gym.Env]
    if isinstance(env, str):
        try:
            gym.spec(env)
        except gym.error.Error as exc:
            raise ValueError(f"unknown environment id {env!r}: {exc}") from exc
        if backend in FROM_ENV_ID:
            return FROM_ENV_ID[backend](env, num_envs, env_kwargs=env_kwargs, **kwargs)
        factory = functools.partial(gym.make, env, **env_kwargs)
    elif callable(env):
        factory = functools.partial(env, **env_kwargs) if env_kwargs else env
    else:
        raise TypeError(
            f"env must be a registered env id or a zero-argument factory, got {type(env).__name__}"
        )
    return BACKENDS[backend]([factory] * num_envs, **kwargs)


def as_vector_env(envs: Any) -> VectorEnv:
    """Accept a VectorEnv, a gymnasium vector env, an EnvPool pool, one gymnasium.Env, or a list of env factories.

    Raises:
        TypeError: ``envs`` is none of these.
    """
    if isinstance(envs, VectorEnv):
        return envs
    if is_envpool(envs):
        return EnvPoolVectorEnv(envs)
    if isinstance(envs, gym.vector.VectorEnv):
        return GymnasiumVectorEnv(envs)
    if isinstance(envs, gym.Env):
        env = envs
        return DummyVectorEnv([lambda: env])
    if isinstance(envs, Sequence) and envs and all(callable(fn) for fn in envs):
        return DummyVectorEnv(list(envs))
    raise TypeError(
        "envs must be a vcollect VectorEnv (with its capabilities declared), a gymnasium vector env, a "
        f"gymnasium.Env or a non-empty list of zero-argument env factories; got {type(envs).__name__}"
    )
