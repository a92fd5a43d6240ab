"""Reading and writing an attribute of one env, wherever it runs (this process, a worker, a Ray actor).

``get_env_attr`` / ``set_env_attr`` of every backend end here. Reading looks through the env's wrappers
down to the base env (gymnasium's ``get_wrapper_attr``, as gymnasium's vector envs do); writing sets the
attribute on the outermost layer that has it (``set_wrapper_attr(force=False)``), and on the base env when
none has it, as Tianshou's ``set_env_attr`` does (``setattr(env.unwrapped, ...)``). Failures come back as
messages, so each backend raises one EnvAttributeError naming the attribute and the env ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from vcollect.errors import EnvAttributeError

__all__ = ["AttrReply", "attr_error", "check_attr_name", "read_attr", "values_or_raise", "write_attr"]

AttrReply = tuple[bool, Any]
"""(True, value) or (False, what went wrong): one env's answer to a read or write."""


def check_attr_name(name: Any) -> str:
    """The attribute name, or TypeError/ValueError when it is not a non-empty string."""
    if not isinstance(name, str):
        raise TypeError(f"an env attribute name is a str, got {type(name).__name__}")
    if not name:
        raise ValueError("an env attribute name cannot be empty")
    return name


def read_attr(env: gym.Env, name: str) -> AttrReply:
    """``(True, value)`` of ``name`` on the env or a wrapper of it, else ``(False, reason)``."""
    try:
        return True, env.get_wrapper_attr(name)
    except AttributeError:
        return False, f"{type(env.unwrapped).__name__} has no attribute {name!r}"
    except Exception as exc:  # a property that raised
        return False, f"reading {name!r} raised {exc!r}"


def write_attr(env: gym.Env, name: str, value: Any) -> AttrReply:
    """Set ``name``: on the outermost layer that has it, else on the base env. ``(True, None)`` or
    ``(False, reason)`` (a read-only property, a setter that raised)."""
    try:
        if not env.set_wrapper_attr(name, value, force=False):
            setattr(env.unwrapped, name, value)
    except Exception as exc:
        return False, f"setting {name!r} raised {exc!r}"
    return True, None


def attr_error(what: str, name: str, replies: Sequence[tuple[int, AttrReply]]) -> EnvAttributeError | None:
    """One EnvAttributeError for the failed ``(env id, reply)`` pairs (None when all succeeded)."""
    failed = [(env_id, reply[1]) for env_id, reply in replies if not reply[0]]
    if not failed:
        return None
    ids = [env_id for env_id, _ in failed]
    first_id, reason = failed[0]
    others = f" (and env ids {ids[1:]})" if len(ids) > 1 else ""
    return EnvAttributeError(
        f"{what} {name!r} failed for env {first_id}{others}: {reason}; check the attribute name (it is looked "
        "up through the env's wrappers) or the value",
        ids,
    )


def values_or_raise(what: str, name: str, env_ids: Sequence[int], replies: Sequence[AttrReply]) -> list[Any]:
    """The replies' values in env_ids order, or the EnvAttributeError of those that failed."""
    error = attr_error(what, name, list(zip(env_ids, replies)))
    if error is not None:
        raise error
    return [reply[1] for reply in replies]
