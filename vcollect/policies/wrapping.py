"""as_policy: what a collector calls for the policy it is given (a Tianshou policy wrapped, else as it is).

TianshouPolicy (torch, tianshou) is imported only for a Tianshou policy, which means Tianshou is imported
already; recognising one imports nothing (vcollect.policies.tianshou_types).
"""

from __future__ import annotations

from typing import Any

from vcollect.policies.tianshou_types import is_tianshou_policy

__all__ = ["as_policy"]


def as_policy(policy: Any, exploration_noise: bool = False) -> Any:
    """What a collector calls.

    Args:
        policy: The policy given to a collector.
        exploration_noise: The collector's ``exploration_noise``: a Tianshou policy wrapped with it explores
            in every call, as in Tianshou's training step (TianshouPolicy's ``exploration_noise``).

    Returns:
        A Tianshou Policy or Algorithm wrapped in TianshouPolicy; anything else as it is.
    """
    if is_tianshou_policy(policy):
        from vcollect.policies.tianshou_policy import TianshouPolicy

        return TianshouPolicy(policy, exploration_noise=exploration_noise)
    return policy
