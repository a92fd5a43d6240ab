"""What the command line names, resolved: an ENV_ID into the vector env Python's make_vector builds from it,
a --policy module:callable into its factory, and the backends this installation has.

An ENV_ID is what Python's ``gymnasium.make`` or ``make_vector`` takes once the modules that register envs
are imported: a namespaced id whose module is known (``ALE/Pong-v5``: ale_py) gets that module named
(``ale_py:ALE/Pong-v5``, so worker processes import it too), and with ``--backend envpool`` an EnvPool task
id that gymnasium does not know (``Pong-v5``) goes to EnvPool as ``make_vector(id, backend="envpool")``
takes it."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym

from vcollect.cli.exits import UsageError

if TYPE_CHECKING:
    from vcollect.envs.base import VectorEnv


def available_backends() -> list[str]:
    """Vector-env backends available in this installation (``vcollect.envs.factory``)."""
    from vcollect.envs.factory import BACKENDS, FROM_ENV_ID

    return sorted({*BACKENDS, *FROM_ENV_ID})


def import_from_cwd(module_name: str) -> Any:
    """Import a user module, looking in the current directory too (as ``python -m`` would)."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module(module_name)


NAMESPACE_MODULES: dict[str, tuple[str, str]] = {
    "ALE": ("ale_py", "ale-py"),
    "dm_control": ("shimmy", "shimmy[dm-control]"),
}
"""Env id namespaces registered by a module gymnasium does not import itself: namespace -> (the module,
what pip installs it as)."""

UNNAMESPACED_MODULES: tuple[str, ...] = ("gymnasium_robotics",)
"""Modules (imported where installed, in this order) that register ids without a namespace, tried for an
id gymnasium does not know."""


def qualified_env_id(env_id: str, backend: str | None = None) -> str:
    """``ENV_ID`` as ``module:ENV_ID`` where gymnasium does not know it and a known module registers it.

    An id of a known namespace (``ALE/Pong-v5``) always gets its module (NAMESPACE_MODULES), so that worker
    processes import it too; another id gymnasium does not know, the first installed module of
    UNNAMESPACED_MODULES that registers it when imported. Ids given as ``module:ENV_ID``, other ids gymnasium
    knows, EnvPool task ids (``backend="envpool"``) and ids no known module registers are returned as given
    (``resolve_env`` says what is wrong with those).

    Args:
        env_id: The ENV_ID the command was given.
        backend: The backend it is built on.

    Returns:
        The id to build the envs from.

    Raises:
        UsageError: The id's namespace is registered by a module that is not installed.
    """
    if ":" in env_id:
        return env_id
    namespace, sep, _ = env_id.rpartition("/")
    if sep and namespace in NAMESPACE_MODULES:
        module, package = NAMESPACE_MODULES[namespace]
        if not _installed(module):
            raise UsageError(
                f"environment id {env_id!r}: its namespace {namespace!r} is registered by {module}, which is not "
                f"installed here (pip install '{package}')"
            )
        return f"{module}:{env_id}"
    if sep or _registered(env_id) or (backend == "envpool" and _envpool_task(env_id)):
        return env_id
    for module in UNNAMESPACED_MODULES:
        if _installed(module):
            try:
                importlib.import_module(module)
            except Exception:  # a module that cannot be imported here registers nothing
                continue
            if _registered(env_id):
                return f"{module}:{env_id}"
    return env_id


def _registered(env_id: str) -> bool:
    """Whether gymnasium knows ``env_id`` now."""
    try:
        gym.spec(env_id)
    except gym.error.Error:
        return False
    return True


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _envpool_task(env_id: str) -> bool:
    """Whether EnvPool (when installed) has a task ``env_id``."""
    if not _installed("envpool"):
        return False
    import envpool

    return env_id in envpool.list_all_envs()


def resolve_env(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, backend: str | None = None
) -> tuple[Callable[[], gym.Env] | None, Any]:
    """(zero-argument env factory, EnvSpec) for ``ENV_ID`` or ``module:ENV_ID``; UsageError if unknown.

    The factory keeps the ``module:`` prefix, so worker processes import the module themselves. With
    ``backend="envpool"`` an EnvPool task id that gymnasium does not know gives (None, None): EnvPool
    builds it, and there is no gymnasium env or spec.
    """
    module_name, sep, bare_id = env_id.rpartition(":")
    if sep:
        try:
            import_from_cwd(module_name)
        except Exception as exc:  # ImportError, or the module raising while it is imported
            raise UsageError(
                f"cannot import module {module_name!r} of env id {env_id!r}: {type(exc).__name__}: {exc}"
            ) from None
    if not sep and backend == "envpool" and not _registered(bare_id) and _envpool_task(bare_id):
        return None, None
    try:
        spec = gym.spec(bare_id)
    except gym.error.Error as exc:
        raise UsageError(f"unknown environment id {bare_id!r}: {exc}{_id_hint(env_id, backend)}") from None
    kwargs = dict(env_kwargs or {})
    if kwargs:  # the stored spec must rebuild the env that was collected from (as gym.make sets env.spec)
        fields = {key: kwargs[key] for key in ("max_episode_steps", "disable_env_checker") if key in kwargs}
        env_args = {key: value for key, value in kwargs.items() if key not in fields}
        spec = dataclasses.replace(spec, kwargs={**spec.kwargs, **env_args}, **fields)
    return functools.partial(gym.make, env_id, **kwargs), spec


def _id_hint(env_id: str, backend: str | None) -> str:
    """What to try for an id gymnasium does not know: the ``module:ENV_ID`` form, or EnvPool's task list."""
    if ":" in env_id:
        return ""
    if backend == "envpool":
        return " (nor is it an EnvPool task: see envpool.list_all_envs())"
    return f" (if a module registers it when imported, name the module: vcollect collect MODULE:{env_id})"


class VectorSource(NamedTuple):
    """What ``make_vector`` is given for an ``ENV_ID``: an env id (or envpool task id), or an env factory."""

    env: str | Callable[[], gym.Env]
    env_kwargs: dict[str, Any]


def vector_source(
    env_id: str, backend: str, env_kwargs: Mapping[str, Any] | None = None, *, in_this_process: bool = True
) -> VectorSource:
    """How to hand ``ENV_ID`` to ``make_vector`` so it builds what ``make_vector(id, ...)`` builds in Python.

    A registered id goes as the id (so the gymnasium backend uses the env's vector entry point). A
    ``module:ENV_ID`` goes as the bare id where the env is built in this process by a backend that takes
    ids (``resolve_env`` imported the module here), else as a factory calling ``gym.make("module:ENV_ID")``,
    so worker processes import the module themselves. Envpool always takes the bare id (its own task id).
    """
    from vcollect.envs.factory import FROM_ENV_ID

    kwargs = dict(env_kwargs or {})
    _, sep, bare_id = env_id.rpartition(":")
    if not sep or backend == "envpool" or (in_this_process and backend in FROM_ENV_ID):
        return VectorSource(bare_id, kwargs)
    return VectorSource(functools.partial(gym.make, env_id), kwargs)


def make_envs(env_id: str, num_envs: int, backend: str, env_kwargs: Mapping[str, Any] | None = None) -> VectorEnv:
    """The vector env ``vcollect collect ENV_ID --backend B --num-envs N`` collects from: built by
    ``make_vector`` from ``vector_source``, as Python's ``make_vector(ENV_ID, N, backend=B)`` builds it."""
    from vcollect.envs import make_vector

    resolve_env(env_id, env_kwargs, backend)  # imports the module of a module:ENV_ID; UsageError for an unknown id
    source = vector_source(env_id, backend, env_kwargs)
    return make_vector(source.env, num_envs, backend=backend, env_kwargs=source.env_kwargs)


def load_policy_factory(spec: str) -> Callable[[gym.Space, gym.Space], Any]:
    """Import ``module:callable``, a factory called as ``factory(observation_space, action_space)``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--policy must be 'random' or 'module:callable', got {spec!r}")
    try:
        module = import_from_cwd(module_name)
    except Exception as exc:  # ImportError, or the module raising while it is imported
        raise UsageError(f"cannot import policy module {module_name!r}: {type(exc).__name__}: {exc}") from None
    factory = module
    for part in attr.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise UsageError(f"module {module_name!r} has no callable {attr!r} (from --policy {spec!r})")
    return factory  # type: ignore[no-any-return]

