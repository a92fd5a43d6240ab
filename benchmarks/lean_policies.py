"""The CartPole policies the collector benchmarks time: one that leans with the pole, and the same one
declaring that it wants the envs' infos (what handing infos to a policy costs, with nothing read)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def lean_policy(obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
    """Push the cart the way the pole leans (CartPole)."""
    return (obs[:, 2] > 0).astype(np.int64), None


class LeanPolicyWithInfos:
    """lean_policy, handed the envs' infos (which it does not read)."""

    wants_infos = True

    def __call__(
        self, obs: np.ndarray, state: Any = None, *, infos: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[np.ndarray, None]:
        return lean_policy(obs)
