"""ResetSeeds: the seed of every reset, drawn from one stream per env id.

Env i's k-th reset gets the k-th seed of env i's own stream, whatever the other envs do in between.
That makes a reset's seed known before the env finishes its episode (a backend can restart the env
inside the step that ended it) and makes it the same on every backend and in any interleaving of envs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SEED_HIGH = 2**31 - 1
"""Reset seeds lie in [0, SEED_HIGH): every gymnasium env accepts them."""

BLOCK = 64
"""Seeds drawn per numpy call for one env (a per-episode scalar draw would cost a microsecond or two)."""


class ResetSeeds:
    """Per-env streams of reset seeds, all derived from one ``seed`` (None: fresh entropy)."""

    def __init__(self, num_envs: int, seed: int | np.random.SeedSequence | None) -> None:
        root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        self._streams = [np.random.default_rng(child) for child in root.spawn(num_envs)]
        # Each env's upcoming seeds, the next one last (so taking it is a list pop).
        self._upcoming: list[list[int]] = [[] for _ in range(num_envs)]

    def _refill(self, env_id: int) -> list[int]:
        upcoming = self._upcoming[env_id]
        if not upcoming:
            upcoming.extend(self._streams[env_id].integers(0, SEED_HIGH, size=BLOCK).tolist()[::-1])
        return upcoming

    def peek(self, env_ids: Sequence[int]) -> list[int]:
        """The seed each env id's next reset will get, without using it up."""
        upcoming = self._upcoming
        return [(upcoming[i] or self._refill(i))[-1] for i in env_ids]

    def take(self, env_ids: Sequence[int]) -> list[int]:
        """The seed of each env id's next reset, used up (the env's following reset gets the next one)."""
        upcoming = self._upcoming
        return [(upcoming[i] or self._refill(i)).pop() for i in env_ids]
