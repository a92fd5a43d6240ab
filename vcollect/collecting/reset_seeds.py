"""ResetSeeds: the seed of every reset, drawn from one stream per env id.

Env i's k-th reset gets the k-th seed of env i's own stream, whatever the other envs do in between.
That makes a reset's seed known before the env finishes its episode (a backend can restart the env
inside the step that ended it) and makes it the same on every backend and in any interleaving of envs.
With ``every_reset=False`` only each env's first reset is seeded (the first seed of its stream); later
resets get None and the env's own generator carries on, as Tianshou and Minari reset by default; with
``first_reset=False`` too, no reset is seeded at all (each env carries on the generator its caller seeded).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

SEED_HIGH = 2**31 - 1
"""Reset seeds lie in [0, SEED_HIGH): every gymnasium env accepts them."""

BLOCK = 64
"""Seeds drawn per numpy call for one env (a per-episode scalar draw would cost a microsecond or two)."""


class ResetSeeds:
    """Per-env streams of reset seeds, all derived from one ``seed`` (None: fresh entropy).

    ``every_reset=False``: an env's resets after its first get None; ``first_reset=False`` as well: every reset
    gets None (see the module docstring).
    """

    def __init__(
        self,
        num_envs: int,
        seed: int | np.random.SeedSequence | None,
        *,
        every_reset: bool = True,
        first_reset: bool = True,
    ) -> None:
        root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        self._streams = [np.random.default_rng(child) for child in root.spawn(num_envs)]
        # Each env's upcoming seeds, the next one last (so taking it is a list pop).
        self._upcoming: list[list[int]] = [[] for _ in range(num_envs)]
        # every_reset=False: envs whose first seed was taken (their later resets are unseeded)
        self._seeded: list[bool] | None = None if every_reset else [not first_reset] * num_envs

    def _refill(self, env_id: int) -> list[int]:
        upcoming = self._upcoming[env_id]
        if not upcoming:
            upcoming.extend(self._streams[env_id].integers(0, SEED_HIGH, size=BLOCK).tolist()[::-1])
        return upcoming

    def peek(self, env_ids: Sequence[int]) -> list[int | None]:
        """The seed each env id's next reset will get, without using it up."""
        upcoming, seeded = self._upcoming, self._seeded
        if seeded is not None:
            return [None if seeded[i] else (upcoming[i] or self._refill(i))[-1] for i in env_ids]
        return [(upcoming[i] or self._refill(i))[-1] for i in env_ids]

    def upcoming(self, env_ids: Sequence[int]) -> Sequence[int | None]:
        """Like :meth:`peek`, as a sequence that looks a seed up only when it is read: a backend that
        restarts only the envs that end reads one or two of them per step, not all."""
        return _Upcoming(self, env_ids)

    def take(self, env_ids: Sequence[int]) -> list[int | None]:
        """The seed of each env id's next reset, used up (the env's following reset gets the next one)."""
        upcoming, seeded = self._upcoming, self._seeded
        if seeded is None:
            return [(upcoming[i] or self._refill(i)).pop() for i in env_ids]
        taken: list[int | None] = []
        for i in env_ids:
            taken.append(None if seeded[i] else (upcoming[i] or self._refill(i)).pop())
            seeded[i] = True
        return taken


class _Upcoming(Sequence[int | None]):
    """The next reset seed of each of ``env_ids`` (see ResetSeeds.upcoming), read on demand."""

    def __init__(self, seeds: ResetSeeds, env_ids: Sequence[int]) -> None:
        self._seeds = seeds
        self._env_ids = env_ids

    def __len__(self) -> int:
        return len(self._env_ids)

    def __iter__(self) -> Iterator[int | None]:
        return iter(self._seeds.peek(self._env_ids))

    @overload
    def __getitem__(self, index: int) -> int | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[int | None]: ...

    def __getitem__(self, index: int | slice) -> int | None | list[int | None]:
        if isinstance(index, slice):
            return self._seeds.peek(self._env_ids[index])
        return self._seeds.peek((self._env_ids[index],))[0]
