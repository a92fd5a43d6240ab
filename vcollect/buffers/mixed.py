"""MixedSampler: one batch drawn from an online ring and an offline dataset at a set ratio (offline-to-online).

Each call splits the batch between the two sources, draws each part with that source's own sampler and
joins them row-wise under the ring's keys, with a ``source`` column saying where each row came from. The
split, the ring's draws and the dataset's step positions all come from the sampler's one generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from vcollect.buffers.preload import check_same_spaces
from vcollect.buffers.sampling import check_count
from vcollect.spaces import flatten_batch

if TYPE_CHECKING:
    from vcollect.buffers.ring import VectorRingBuffer

__all__ = ["MixedSampler", "StepSource"]

#: ``source`` of a row drawn from the ring / from the dataset.
ONLINE, OFFLINE = 0, 1


@runtime_checkable
class StepSource(Protocol):
    """What the offline half is drawn from: spaces, a step count, transitions at step positions and slices (a
    vcollect ``Dataset``)."""

    @property
    def observation_space(self) -> gym.Space[Any]: ...
    @property
    def action_space(self) -> gym.Space[Any]: ...
    @property
    def total_steps(self) -> int: ...
    def steps_at(self, positions: Any, **kwargs: Any) -> dict[str, Any]: ...
    def sample_slices(self, batch_size: int, length: int, **kwargs: Any) -> dict[str, Any]: ...


def _join(online: Any, offline: Any) -> Any:
    """Two batches of the same structure, row-wise (dicts and tuples of arrays, nested)."""
    if isinstance(online, dict):
        return {key: _join(value, offline[key]) for key, value in online.items()}
    if isinstance(online, tuple):
        return tuple(_join(a, b) for a, b in zip(online, offline))
    return np.concatenate([online, offline])


def _head(batch: Any, rows: int) -> Any:
    """The first ``rows`` rows of every array of a batch."""
    if isinstance(batch, dict):
        return {key: _head(value, rows) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_head(value, rows) for value in batch)
    return batch[:rows]


class MixedSampler:
    """Draw batches mixing an online ring and an offline dataset: RLPD's symmetric sampling at ``ratio=0.5``.

    Each row of a batch comes from the dataset with probability ``ratio`` (the offline rows of a batch of B
    are Binomial(B, ratio); ``exact=True`` takes ``round(B * ratio)`` every time, RLPD's fixed split). The
    ring's rows come first, then the dataset's, under the keys ``ring.sample`` gives, plus ``source`` (uint8:
    0 online, 1 offline). A dataset row has ``indices`` -1 (it is no ring row: give ``update_weight`` the
    online rows only, ``batch["indices"][batch["source"] == 0]``) and, from a prioritized ring, ``weights`` 1.
    :meth:`sample_slices` splits windows the same way.

    Args:
        ring: The online rings (a VectorRingBuffer or PrioritizedVectorRingBuffer).
        dataset: The offline data (a vcollect ``Dataset`` or a view of one), of the ring's spaces.
        ratio: The share of rows drawn from the dataset, in [0, 1].
        exact: Take exactly ``round(batch_size * ratio)`` offline rows per batch instead of a binomial count.
        seed: Seeds the generator behind the split and both sources' draws.

    Raises:
        SpaceMismatchError: The dataset's spaces differ from the ring's (the message names both).
        ValueError: ``ratio`` outside [0, 1].
        TypeError: ``dataset`` is not a vcollect Dataset.
    """

    def __init__(self, ring: VectorRingBuffer, dataset: StepSource, ratio: float = 0.5, *, exact: bool = False,
                 seed: int | np.random.SeedSequence | None = None) -> None:
        if not isinstance(dataset, StepSource):
            raise TypeError(f"MixedSampler's offline source is a vcollect Dataset, got {type(dataset).__name__}")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float, np.floating)) or not 0.0 <= ratio <= 1.0:
            raise ValueError(f"ratio is the share of offline rows, a number in [0, 1] (RLPD: 0.5), got {ratio!r}")
        if ring.has_spaces:
            check_same_spaces(ring.observation_space, ring.action_space, dataset,
                              ": mix a dataset collected from the ring's envs")
        self.ring = ring
        self.dataset = dataset
        self.ratio = float(ratio)
        self.exact = bool(exact)
        self._rng = np.random.default_rng(seed)

    def _split(self, batch_size: int) -> int:
        """How many of ``batch_size`` rows come from the dataset."""
        if self.exact:
            return round(batch_size * self.ratio)
        return int(self._rng.binomial(batch_size, self.ratio))

    def _offline_positions(self, count: int) -> np.ndarray:
        total = int(self.dataset.total_steps)
        if total == 0:
            raise ValueError("the offline dataset has no steps to sample")
        return self._rng.integers(0, total, size=count)

    def _mix(self, batch_size: int, online: Callable[[int], dict[str, Any]],
             offline: Callable[[int], dict[str, Any]], lowest: int) -> dict[str, Any]:
        """One batch of ``batch_size`` (>= ``lowest``) rows: ``online(k)`` and ``offline(k)`` draw k rows of a
        source, the dataset's completed to the ring's keys (``dones``, ``indices`` -1, no ``extras``, ``weights``
        1 where the ring gives weights)."""
        batch_size = check_count("batch_size", batch_size, lowest)
        n_offline = self._split(batch_size)
        n_online = batch_size - n_offline
        ring_part = online(n_online)
        data_part = offline(n_offline)
        if ring_part.get("extras"):
            raise ValueError(
                f"the ring holds episode-hook columns {sorted(ring_part['extras'])} that the dataset's rows have no "
                "values for; mix a ring without episode-done hooks"
            )
        data_part["dones"] = data_part["terminations"] | data_part["truncations"]
        data_part["indices"] = np.full(data_part["rewards"].shape, -1, dtype=ring_part["indices"].dtype)
        data_part["extras"] = {}
        if "weights" in ring_part:
            data_part["weights"] = np.ones(n_offline, dtype=ring_part["weights"].dtype)
        if ring_part.keys() != data_part.keys():
            raise ValueError(
                f"the two sources give different keys: ring only {sorted(ring_part.keys() - data_part.keys())}, "
                f"dataset only {sorted(data_part.keys() - ring_part.keys())}"
            )
        batch = _join(ring_part, {key: data_part[key] for key in ring_part})
        batch["source"] = np.repeat(np.array([ONLINE, OFFLINE], dtype=np.uint8), [n_online, n_offline])
        return batch  # type: ignore[no-any-return]

    def sample(self, batch_size: int, **kwargs: Any) -> dict[str, Any]:
        """Draw ``batch_size`` transitions: ``ring.sample`` for the online rows, ``dataset.steps_at`` at uniform
        step positions for the offline ones (uniform over the dataset's steps, as ``sample_steps``).

        Args:
            batch_size: How many rows (>= 1).
            **kwargs: Passed to both sources: those both take, such as ``n_step`` and ``gamma``.

        Returns:
            ``ring.sample``'s keys over all rows, and ``source``.

        Raises:
            ValueError: ``batch_size < 1``, a source holds nothing to draw, or the ring holds episode-hook columns.
            TypeError: A keyword one of the sources does not take.
        """
        # ``ring.sample(0)`` means every row: a source given no rows draws one, kept for the batch's structure
        return self._mix(
            batch_size,
            lambda count: _head(self.ring.sample(max(count, 1), self._rng, **kwargs), count),
            lambda count: _head(self.dataset.steps_at(self._offline_positions(max(count, 1)), **kwargs), count),
            1,
        )

    def sample_slices(self, batch_size: int, length: int, **kwargs: Any) -> dict[str, Any]:
        """Draw ``batch_size`` windows of ``length`` steps (slices), split between the sources as :meth:`sample`
        splits rows: ``ring.sample_slices`` for the online windows, ``dataset.sample_slices`` for the offline
        ones, both drawn with the sampler's generator.

        Args:
            batch_size: How many windows (0: an empty batch of the right shapes).
            length: Steps per window.
            **kwargs: Passed to both sources: those both take, ``pad``, ``by``, ``gamma`` and ``stacks``.

        Returns:
            ``ring.sample_slices``' keys over all windows (each (batch, length, ...), ``weights`` and the
            per-window keys (batch,)), and ``source`` (one per window). A window's ``episode_ids`` is a flat
            ring row where ``source`` is 0 and a dataset episode id where it is 1; a dataset window's
            ``indices`` are -1. With ``stacks="view"`` each source reads its windows' rows once (the cheap part
            for a dataset: its frames decoded once), but the two parts are joined into arrays of their own
            (a ring's stacks and a dataset's frames share no memory to be viewed together): ``observations``
            and ``next_observations`` are then materialised, read-only as views are.

        Raises:
            SliceLengthError: A source given windows holds no episode of ``length`` steps with ``pad="none"``.
            ValueError: A bad argument, or the ring holds episode-hook columns.
            TypeError: A keyword one of the sources does not take.
        """
        batch = self._mix(
            batch_size,
            lambda count: self.ring.sample_slices(count, length, rng=self._rng, **kwargs),
            lambda count: self.dataset.sample_slices(count, length, rng=self._rng, **kwargs),
            0,
        )
        if kwargs.get("stacks") == "view":
            for key in ("observations", "next_observations"):
                for leaf in flatten_batch(self.ring.observation_space, batch[key]) if key in batch else []:
                    leaf.flags.writeable = False
        return batch
