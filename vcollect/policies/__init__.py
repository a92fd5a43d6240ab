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
        from vcollect.policies.torch_policy import TorchPolicy

        return TorchPolicy
    if name == "TianshouPolicy":
        from vcollect.policies.tianshou_policy import TianshouPolicy

        return TianshouPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
