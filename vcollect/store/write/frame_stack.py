"""Frame-stacked observations stored once: the layout, the write-time check and the read-time rebuild.

A `FrameStack(k)` observation (gymnasium's `FrameStackObservation`: each observation is the previous one
shifted by one frame along axis 0, the new frame last) is stored as ONE frame per observation row, its
newest, so an episode keeps T+1 rows of frames instead of T+1 rows of k frames. The first observation of
an episode must be the padded reset stack gymnasium builds (`padding="reset"`: k copies of the reset
frame, gymnasium's default; `padding="zero"`: k-1 zero frames then the reset frame). Why this and not
T+k rows (the first stack whole): the row count per episode stays T+1, so every observation offset in
the shard's episode table, the manifest and the samplers is unchanged; the only arithmetic new to the
store is `stack_rows`, here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from vcollect.errors import ObservationError
from vcollect.spaces import Leaf
from vcollect.store.write.shard import EpisodeRows

Padding = Literal["reset", "zero"]


@dataclass(frozen=True)
class FrameStack:
    """k frames per observation along axis 0, stored once each; `padding` as gymnasium's `padding_type`."""

    k: int
    padding: Padding = "reset"

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 2:
            raise ValueError(f"FrameStack(k={self.k!r}): k must be an int >= 2 (the frames per observation)")
        if self.padding not in ("reset", "zero"):
            raise ValueError(
                f"FrameStack(padding={self.padding!r}): use 'reset' or 'zero' (gymnasium's padding_type); "
                "a custom padding observation cannot be stored once"
            )

    def check_shape(self, shape: tuple[int, ...], what: str = "observation space") -> None:
        """ValueError unless a stacked observation of `shape` has k frames on its first axis."""
        if len(shape) < 2 or shape[0] != self.k:
            raise ValueError(
                f"frame_stack={self.k}: the {what} has shape {shape}, but a frame stack needs its first "
                f"axis to be {self.k} (gymnasium's FrameStackObservation(env, {self.k})); pass the "
                "stack size the wrapper used, or no frame_stack"
            )

    def to_json(self) -> dict[str, Any]:
        """The layout as recorded in dataset.json and the shard attributes."""
        return {"k": self.k, "padding": self.padding}

    @classmethod
    def from_json(cls, data: Any) -> FrameStack | None:
        """The inverse of `to_json` (None for a dataset without frame stacks)."""
        if data is None:
            return None
        return cls(int(data["k"]), data.get("padding", "reset"))


def stack_rows(rows: np.ndarray, starts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame rows of the stacks at observation `rows` whose episodes begin at `starts` (same shape).

    Returns (idx, padded): idx[i, j] is the stored frame row of frame j of stack i (oldest first),
    clamped to the episode's first row; padded[i, j] says frame j lies before the episode began.
    """
    offsets = np.arange(1 - k, 1, dtype=np.int64)
    want = np.asarray(rows, dtype=np.int64)[:, None] + offsets
    first = np.asarray(starts, dtype=np.int64)[:, None]
    return np.maximum(want, first), want < first


def rebuild(frames: np.ndarray, rows: np.ndarray, starts: np.ndarray, stack: FrameStack) -> np.ndarray:
    """The stacked observations at `rows` from the stored single `frames` (indexed by frame row)."""
    idx, padded = stack_rows(rows, starts, stack.k)
    out = frames[idx]
    if stack.padding == "zero" and padded.any():
        out[padded] = 0
    return out


def rebuild_episode(frames: np.ndarray, stack: FrameStack) -> np.ndarray:
    """All T+1 stacked observations of one episode from its T+1 stored frames."""
    n = len(frames)
    return rebuild(frames, np.arange(n), np.zeros(n, dtype=np.int64), stack)


def newest_frames(stacks: np.ndarray, stack: FrameStack, episode: int) -> np.ndarray:
    """The frames to store for one episode's T+1 stacks; ObservationError if they are not a frame stack.

    `episode` names the episode in the message (its index in the write call). Nothing is stored on error.
    """
    stacks = np.asarray(stacks)
    frames = np.ascontiguousarray(stacks[:, -1])
    expected = rebuild_episode(frames, stack)
    if not np.array_equal(expected, stacks):
        bad = np.flatnonzero((expected != stacks).reshape(len(stacks), -1).any(axis=1))
        step = int(bad[0])
        why = (
            f"the first observation is not the padded reset stack (padding={stack.padding!r})"
            if step == 0
            else f"observation {step} is not observation {step - 1} shifted by one frame"
        )
        raise ObservationError(
            f"frame_stack={stack.k}: episode {episode} refused: {why}; nothing of that episode was written. "
            "Store it without frame_stack, or check the env uses FrameStackObservation with this stack size "
            "and padding"
        )
    return frames


def frame_stack_of(frame_stack: int | FrameStack | None, observation_space: Any) -> FrameStack | None:
    """The FrameStack `create(frame_stack=...)` asks for, checked against a Box observation space."""
    import gymnasium.spaces as gs

    if frame_stack is None:
        return None
    stack = frame_stack if isinstance(frame_stack, FrameStack) else FrameStack(frame_stack)
    if not isinstance(observation_space, gs.Box):
        raise ValueError(
            f"frame_stack={stack.k} needs a Box observation space (k frames on the first axis), got "
            f"{type(observation_space).__name__}; store a Dict/Tuple space without frame_stack"
        )
    stack.check_shape(tuple(observation_space.shape))
    return stack


def frame_leaves(obs_leaves: list[Leaf], stack: FrameStack | None) -> list[Leaf]:
    """The observation leaves as stored: one frame per row instead of a stack (unchanged without a stack)."""
    if stack is None:
        return obs_leaves
    return [dataclasses.replace(leaf, shape=leaf.shape[1:]) for leaf in obs_leaves]


def batch_frames(obs: list[np.ndarray], lengths: list[int], stack: FrameStack | None, first: int = 0) -> list[np.ndarray]:
    """The frames to store for episodes concatenated in `obs` (lengths[i] + 1 rows each); checks each one.

    `first` numbers the first episode in error messages. Without a stack `obs` is returned as is.
    """
    if stack is None:
        return obs
    out = []
    for arr in obs:
        bounds = np.cumsum([0, *(n + 1 for n in lengths)])
        parts = [newest_frames(arr[a:b], stack, first + i) for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
        out.append(np.concatenate(parts) if parts else arr[:, -1])
    return out


def rows_as_frames(rows: EpisodeRows, stack: FrameStack | None, first: int) -> EpisodeRows:
    """`rows` with each observation leaf replaced by its checked frames (see `batch_frames`)."""
    if stack is None:
        return rows
    return dataclasses.replace(rows, obs=batch_frames(rows.obs, rows.lengths, stack, first))
