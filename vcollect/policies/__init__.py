"""Policies: the protocol the collectors call, RandomPolicy, EpsilonGreedy and (lazily) TorchPolicy and
TianshouPolicy.

Importing this package never imports torch or tianshou; ``TorchPolicy`` and ``TianshouPolicy`` are loaded
on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vcollect.policies.base import (
    Policy,
    SupportsExplorationNoise,
    SupportsInfos,
    SupportsMapAction,
    SupportsResetState,
)
from vcollect.policies.exploration import EpsilonGreedy
from vcollect.policies.random import RandomPolicy

if TYPE_CHECKING:
    from vcollect.policies.tianshou_policy import TianshouPolicy
    from vcollect.policies.torch_policy import TorchPolicy

__all__ = [
    "EpsilonGreedy",
    "Policy",
    "RandomPolicy",
    "SupportsExplorationNoise",
    "SupportsInfos",
    "SupportsMapAction",
    "SupportsResetState",
    "TianshouPolicy",
    "TorchPolicy",
]


def __getattr__(name: str) -> Any:
    """Import TorchPolicy (torch) and TianshouPolicy (torch, tianshou) only when they are asked for."""
    if name == "TorchPolicy":
        try:
            from vcollect.policies.torch_policy import TorchPolicy
        except ModuleNotFoundError as exc:
            raise _missing_extra(name, "torch", exc) from exc
        return TorchPolicy
    if name == "TianshouPolicy":
        try:
            from vcollect.policies.tianshou_policy import TianshouPolicy
        except ModuleNotFoundError as exc:
            raise _missing_extra(name, "tianshou", exc) from exc
        return TianshouPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _missing_extra(name: str, extra: str, exc: ModuleNotFoundError) -> ModuleNotFoundError:
    """The error for ``name`` when a package its extra installs (torch, tianshou) is missing: one line naming
    the extra. Any other missing module is ``exc`` itself."""
    missing = (exc.name or "").split(".")[0]
    if missing not in ("torch", "tianshou"):
        return exc
    return ModuleNotFoundError(
        f"vcollect.policies.{name} needs {missing}, which is not installed: pip install 'vcollect[{extra}]'",
        name=exc.name,
    )
