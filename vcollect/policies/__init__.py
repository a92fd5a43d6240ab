"""Policies: the protocol the collectors call, RandomPolicy, EpsilonGreedy and (lazily) TorchPolicy.

Importing this package never imports torch; ``TorchPolicy`` is loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vcollect.policies.base import Policy, SupportsExplorationNoise, SupportsResetState
from vcollect.policies.exploration import EpsilonGreedy
from vcollect.policies.random import RandomPolicy

if TYPE_CHECKING:
    from vcollect.policies.torch_policy import TorchPolicy

__all__ = [
    "EpsilonGreedy",
    "Policy",
    "RandomPolicy",
    "SupportsExplorationNoise",
    "SupportsResetState",
    "TorchPolicy",
]


def __getattr__(name: str) -> Any:
    """Import TorchPolicy (and torch) only when it is asked for."""
    if name == "TorchPolicy":
        from vcollect.policies.torch_policy import TorchPolicy

        return TorchPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
