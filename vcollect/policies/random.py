"""RandomPolicy: uniformly random actions for a whole batch at once, one numpy call per leaf.

Samplers are compiled once per action space, so a call for Discrete(2) and 8 envs costs a couple of
microseconds. Box coordinates follow gymnasium's ``Box.sample``: uniform on [low, high], shifted
exponential when bounded on one side only, standard normal when unbounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vcollect.text_leaves import text_dtype

Sampler = Callable[[int], Any]

BLOCK_ROWS = 1024
"""Rows a single-leaf RandomPolicy draws per numpy call, handed out a batch at a time."""

# Integers on [low, high] are drawn as low + floor(u * count) with u = j * 2**-53 in [0, 1): for
# count <= 2**52 the product rounds to at most count - 1, and it is about twice as fast as
# Generator.integers for small batches (which dominate per-step calls). Larger ranges use integers.
_FLOAT_DRAW_MAX_N = 2**52


def batch_size_of(batch: Any) -> int:
    """Number of rows of a batched nested value (the length of its first leaf)."""
    while True:
        if isinstance(batch, np.ndarray):
            if batch.ndim == 0:
                raise ValueError("a batch needs a leading batch axis; got a 0-d array")
            return int(batch.shape[0])
        if isinstance(batch, dict):
            if not batch:
                raise ValueError("cannot tell the batch size of an empty dict")
            batch = next(iter(batch.values()))
        elif isinstance(batch, tuple):
            if not batch:
                raise ValueError("cannot tell the batch size of an empty tuple")
            batch = batch[0]
        else:
            return len(batch)


class RandomPolicy:
    """Samples a batch of uniformly random actions from ``action_space``; ignores observations and state.

    Deterministic for a given ``seed``. Supports Box, Discrete, MultiDiscrete, MultiBinary, Text and
    Dict/Tuple of them; actions come in batched nested form with the space's dtypes (Discrete: int64). Its actions
    lie in ``action_space`` by construction (``actions_in_space``), so a collector need not check them.

    Args:
        action_space: The space to sample from.
        seed: Seeds the generator.
    """

    actions_in_space = True
    reads_observations = False  # only their batch size (vcollect.policies.base)

    def __init__(
        self, action_space: gym.Space[Any], seed: int | np.random.SeedSequence | None = None
    ) -> None:
        self.action_space = action_space
        self._rng = np.random.default_rng(seed)
        sampler = _compile(action_space, self._rng)
        nested = isinstance(action_space, (spaces.Dict, spaces.Tuple))
        self._sample = sampler if nested else _blocked(sampler)

    def __call__(self, obs: Any, state: Any = None) -> tuple[Any, None]:
        """Return one random action per row of ``obs`` and no state.

        Args:
            obs: A batch of observations (only its size is read).
            state: Ignored.

        Returns:
            The actions, batched, and None.
        """
        k = len(obs) if type(obs) is np.ndarray and obs.ndim else batch_size_of(obs)
        return self._sample(k), None

    def sample(self, batch_size: int) -> Any:
        """Draw random actions.

        Args:
            batch_size: How many.

        Returns:
            The actions, in batched nested form.
        """
        return self._sample(batch_size)


def _compile(space: gym.Space[Any], rng: np.random.Generator) -> Sampler:
    """Build a function ``k -> batch of k samples`` for ``space`` (recursively for Dict/Tuple)."""
    if isinstance(space, spaces.Discrete):
        return _discrete_sampler(space, rng)
    if isinstance(space, spaces.Box):
        return _box_sampler(space, rng)
    if isinstance(space, spaces.MultiDiscrete):
        return _multi_discrete_sampler(space, rng)
    if isinstance(space, spaces.MultiBinary):
        return _multi_binary_sampler(space, rng)
    if isinstance(space, spaces.Text):
        return _text_sampler(space, rng)
    if isinstance(space, spaces.Dict):
        subs = [(key, _compile(sub, rng)) for key, sub in space.spaces.items()]
        return lambda k: {key: sample(k) for key, sample in subs}
    if isinstance(space, spaces.Tuple):
        tuple_subs = [_compile(sub, rng) for sub in space.spaces]
        return lambda k: tuple(sample(k) for sample in tuple_subs)
    raise TypeError(
        f"RandomPolicy cannot sample {space!r}: supported spaces are Box, Discrete, MultiDiscrete, "
        "MultiBinary, Text, and Dict/Tuple of them"
    )


def _text_sampler(space: spaces.Text, rng: np.random.Generator) -> Sampler:
    """Strings as ``Text.sample`` draws them (a uniform length in [min_length, max_length], then uniform
    characters of the charset), a batch at once as code points viewed as vcollect's Text leaf dtype."""
    chars = np.fromiter((ord(c) for c in space.characters), dtype=np.uint32, count=len(space.characters))
    low, high = int(space.min_length), int(space.max_length)
    dtype = text_dtype(space)
    width = dtype.itemsize // 4
    positions = np.arange(high)

    def sample(k: int) -> np.ndarray:
        codes = np.zeros((k, width), dtype=np.uint32)
        if high and chars.size:
            lengths = rng.integers(low, high + 1, size=k)
            drawn = chars[rng.integers(0, chars.size, size=(k, high))]
            codes[:, :high] = np.where(positions < lengths[:, None], drawn, 0)
        return codes.view(dtype).reshape(k)

    return sample


def _blocked(sample: Sampler) -> Sampler:
    """Hand out rows of blocks of BLOCK_ROWS samples: one numpy call per block, not per batch.

    A leaf's rows come from its generator stream in order, so the rows are those that per-batch draws
    would give (exactly so for the uniform samplers). Batches are copies, never views of the block.
    """
    block = sample(0)
    pos = 0

    def take(k: int) -> Any:
        nonlocal block, pos
        if pos + k > len(block):
            fresh = sample(max(BLOCK_ROWS, k))
            block = np.concatenate([block[pos:], fresh]) if pos < len(block) else fresh
            pos = 0
        rows = block[pos : pos + k].copy()
        pos += k
        return rows

    return take


def _scalar_if_constant(values: np.ndarray) -> float | int | np.ndarray:
    """A Python scalar when every entry is the same (numpy ops on scalars are cheaper), else the array."""
    if values.size and np.all(values == values.flat[0]):
        return values.flat[0].item()  # type: ignore[no-any-return]
    return values


def _uniform_integers(
    rng: np.random.Generator, low: np.ndarray, high: np.ndarray, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> Sampler:
    """Uniform integers on [low, high] (arrays of ``shape``), returned as ``dtype`` arrays (k, *shape)."""
    low_int = [int(v) for v in low.flat]
    high_int = [int(v) for v in high.flat]
    span_max = max((h - lo for lo, h in zip(low_int, high_int)), default=0)
    fits_int64 = all(-(2**63) <= v < 2**63 for v in low_int + high_int)
    if span_max + 1 > _FLOAT_DRAW_MAX_N or not fits_int64:
        integers = rng.integers
        return lambda k: integers(low, high, size=(k, *shape), dtype=dtype, endpoint=True)
    if dtype.itemsize <= 2 and len(low_int) >= 64 and len(set(low_int)) == 1 and len(set(high_int)) == 1:
        # large narrow arrays (images): numpy's buffered 8/16-bit generator beats the float draw
        lo, hi = low_int[0], high_int[0]
        integers = rng.integers
        return lambda k: integers(lo, hi, size=(k, *shape), dtype=dtype, endpoint=True)
    counts = np.array([h - lo + 1 for lo, h in zip(low_int, high_int)], dtype=np.float64)
    count = _scalar_if_constant(counts.reshape(shape))
    offset = _scalar_if_constant(np.array(low_int, dtype=np.int64).reshape(shape))
    random = rng.random
    int64 = np.int64
    if isinstance(offset, int) and offset == 0:
        if dtype == np.int64:
            return lambda k: (random((k, *shape)) * count).astype(int64)
        return lambda k: (random((k, *shape)) * count).astype(dtype)
    if dtype == np.int64:
        return lambda k: (random((k, *shape)) * count).astype(int64) + offset
    return lambda k: ((random((k, *shape)) * count).astype(int64) + offset).astype(dtype)


def _discrete_sampler(space: spaces.Discrete, rng: np.random.Generator) -> Sampler:
    """Discrete(n, start): int64 array of shape (k,)."""
    start = np.array(int(space.start), dtype=np.int64)
    end = np.array(int(space.start) + int(space.n) - 1, dtype=np.int64)
    return _uniform_integers(rng, start, end, (), np.dtype(np.int64))


def _multi_discrete_sampler(space: spaces.MultiDiscrete, rng: np.random.Generator) -> Sampler:
    """MultiDiscrete: (k, *nvec.shape) array of the space dtype, entry i in [start_i, start_i + nvec_i)."""
    low = np.broadcast_to(np.asarray(space.start, dtype=space.dtype), space.nvec.shape)
    high = (space.start + (space.nvec - 1)).astype(space.dtype)
    return _uniform_integers(rng, low, high, tuple(space.shape), space.dtype)


def _multi_binary_sampler(space: spaces.MultiBinary, rng: np.random.Generator) -> Sampler:
    """MultiBinary: (k, *shape) array of 0/1 in the space dtype (int8)."""
    shape = tuple(space.shape)
    dtype = space.dtype
    random = rng.random
    if dtype == np.int8:
        int8 = np.int8
        return lambda k: (random((k, *shape)) < 0.5).view(int8)
    return lambda k: (random((k, *shape)) < 0.5).astype(dtype)


def _box_sampler(space: spaces.Box, rng: np.random.Generator) -> Sampler:
    """Box: per coordinate uniform / shifted exponential / normal by boundedness, like gymnasium."""
    shape = space.shape
    dtype = space.dtype
    size = int(np.prod(shape, dtype=np.int64))
    below = np.broadcast_to(space.bounded_below, shape).reshape(size)
    above = np.broadcast_to(space.bounded_above, shape).reshape(size)
    low = space.low.reshape(size)
    high = space.high.reshape(size)
    if dtype.kind == "f":
        return _float_box_sampler(rng, shape, dtype, size, low, high, below, above)
    if dtype.kind == "b":
        bits = _uniform_integers(
            rng,
            low.astype(np.int64).reshape(shape),
            high.astype(np.int64).reshape(shape),
            shape,
            np.dtype(np.int8),
        )
        return lambda k: bits(k).view(np.bool_)
    if below.all() and above.all():
        return _uniform_integers(rng, low.reshape(shape), high.reshape(shape), shape, dtype)
    return _integer_box_sampler(rng, shape, dtype, size, low, high, below, above)


def _float_box_sampler(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    size: int,
    low: np.ndarray,
    high: np.ndarray,
    below: np.ndarray,
    above: np.ndarray,
) -> Sampler:
    """Float Box: draw in float64, keep inside [low, high] despite rounding, cast to the space dtype."""
    low64 = low.astype(np.float64)
    high64 = high.astype(np.float64)
    random = rng.random
    minimum = np.minimum
    clip = np.clip
    if below.all() and above.all():
        with np.errstate(over="ignore"):
            span64 = high64 - low64
        if np.all(np.isfinite(span64)):
            # low + span * u >= low always; rounding can only overshoot high
            low_c = _scalar_if_constant(low64.reshape(shape))
            high_c = _scalar_if_constant(high64.reshape(shape))
            span_c = _scalar_if_constant(span64.reshape(shape))

            def bounded(k: int) -> np.ndarray:
                draw = random((k, *shape))
                draw *= span_c
                draw += low_c
                return minimum(draw, high_c, out=draw).astype(dtype, copy=False)

            return bounded
        # high - low overflows float64: draw around the midpoint instead
        mid = (low64 / 2 + high64 / 2).reshape(shape)
        half = (high64 / 2 - low64 / 2).reshape(shape)
        low_s = low64.reshape(shape)
        high_s = high64.reshape(shape)

        def wide(k: int) -> np.ndarray:
            draw = mid + half * (2.0 * random((k, *shape)) - 1.0)
            return clip(draw, low_s, high_s, out=draw).astype(dtype, copy=False)

        return wide

    both = np.flatnonzero(below & above)
    only_low = np.flatnonzero(below & ~above)
    only_high = np.flatnonzero(~below & above)
    neither = np.flatnonzero(~below & ~above)
    mid = low64[both] / 2 + high64[both] / 2
    half = high64[both] / 2 - low64[both] / 2
    low_of_low = low64[only_low]
    high_of_high = high64[only_high]

    def mixed(k: int) -> np.ndarray:
        out = np.empty((k, size), dtype=np.float64)
        if both.size:
            out[:, both] = mid + half * (2.0 * random((k, both.size)) - 1.0)
        if only_low.size:
            out[:, only_low] = low_of_low + rng.standard_exponential((k, only_low.size))
        if only_high.size:
            out[:, only_high] = high_of_high - rng.standard_exponential((k, only_high.size))
        if neither.size:
            out[:, neither] = rng.standard_normal((k, neither.size))
        clip(out, low64, high64, out=out)
        return out.astype(dtype, copy=False).reshape(k, *shape)

    return mixed


def _integer_box_sampler(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    size: int,
    low: np.ndarray,
    high: np.ndarray,
    below: np.ndarray,
    above: np.ndarray,
) -> Sampler:
    """Integer Box with unbounded coordinates: uniform where bounded, floored exponential/normal elsewhere."""
    # Offsets from the finite bound are computed in a 64-bit dtype wide enough for the sum.
    work = np.dtype(np.uint64) if dtype == np.uint64 else np.dtype(np.int64)
    both = np.flatnonzero(below & above)
    only_low = np.flatnonzero(below & ~above)
    only_high = np.flatnonzero(~below & above)
    neither = np.flatnonzero(~below & ~above)
    # span of each coordinate, capped to fit int64 (exponential offsets never get near the cap)
    span_low = np.array([min(2**62, int(high[i]) - int(low[i])) for i in only_low], dtype=np.int64)
    span_high = np.array([min(2**62, int(high[i]) - int(low[i])) for i in only_high], dtype=np.int64)
    low_of_low = low[only_low].astype(work)
    high_of_high = high[only_high].astype(work)
    sample_both = _uniform_integers(rng, low[both], high[both], (both.size,), dtype)
    low_neither = low[neither].astype(np.int64)
    high_neither = high[neither].astype(np.int64)

    def mixed(k: int) -> np.ndarray:
        out = np.empty((k, size), dtype=dtype)
        if both.size:
            out[:, both] = sample_both(k)
        if only_low.size:
            draw = np.floor(rng.standard_exponential((k, only_low.size))).astype(np.int64)
            out[:, only_low] = low_of_low + np.minimum(draw, span_low).astype(work)
        if only_high.size:
            draw = np.floor(rng.standard_exponential((k, only_high.size))).astype(np.int64)
            out[:, only_high] = high_of_high - np.minimum(draw, span_high).astype(work)
        if neither.size:
            draw = np.floor(rng.standard_normal((k, neither.size))).astype(np.int64)
            out[:, neither] = np.clip(draw, low_neither, high_neither)
        return out.reshape(k, *shape)

    return mixed
