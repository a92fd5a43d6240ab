"""as_policy: what a collector calls for the policy it is given (a Tianshou policy wrapped, else as it is).

TianshouPolicy (torch, tianshou) is imported only for a Tianshou policy, which means Tianshou is imported
already; recognising one imports nothing (vcollect.policies.tianshou_types).
"""

from __future__ import annotations

from typing import Any

from vcollect.policies.tianshou_types import is_tianshou_policy

__all__ = ["as_policy"]


def as_policy(policy: Any) -> Any:
    """What a collector calls.

    Args:
        policy: The policy given to a collector.

    Returns:
        A Tianshou Policy or Algorithm wrapped in TianshouPolicy; anything else as it is.
    """
    if is_tianshou_policy(policy):
        from vcollect.policies.tianshou_policy import TianshouPolicy

        return TianshouPolicy(policy)
    return policy
