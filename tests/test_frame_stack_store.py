"""Frame stacks stored once (issue 18): the index arithmetic and the write-time check against a reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcollect.errors import ObservationError
from vcollect.store.frame_stack import FrameStack, newest_frames, rebuild, rebuild_episode


def reference_stacks(frames: np.ndarray, k: int, padding: str) -> np.ndarray:
    """What gymnasium's FrameStackObservation yields for one episode's frames, built the obvious way."""
    pad = frames[0] if padding == "reset" else np.zeros_like(frames[0])
    queue = [pad] * (k - 1) + [frames[0]]
    out = [np.stack(queue)]
    for frame in frames[1:]:
        queue = queue[1:] + [frame]
        out.append(np.stack(queue))
    return np.stack(out)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6),
    k=st.integers(2, 5),
    padding=st.sampled_from(["reset", "zero"]),
    seed=st.integers(0, 2**16),
)
def test_rebuilt_stacks_equal_reference(lengths: list[int], k: int, padding: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    stack = FrameStack(k, padding)  # type: ignore[arg-type]
    episodes = [rng.integers(1, 256, size=(n + 1, 3, 2), dtype=np.uint8) for n in lengths]
    refs = [reference_stacks(f, k, padding) for f in episodes]
    stored = [newest_frames(r, stack, i) for i, r in enumerate(refs)]
    for f, s in zip(episodes, stored):
        assert np.array_equal(f, s) and s.shape == (len(f), 3, 2)
    # all episodes concatenated as a shard column; random rows across episodes
    column = np.concatenate(stored)
    starts_per_ep = np.cumsum([0] + [len(s) for s in stored])[:-1]
    ep_of_row = np.repeat(np.arange(len(stored)), [len(s) for s in stored])
    rows = rng.integers(0, len(column), size=20)
    got = rebuild(column, rows, starts_per_ep[ep_of_row[rows]], stack)
    want = np.concatenate(refs)[rows]
    assert np.array_equal(got, want)
    for s, r in zip(stored, refs):
        assert np.array_equal(rebuild_episode(s, stack), r)


def test_refuses_non_shifted_observations() -> None:
    stack = FrameStack(4)
    frames = np.arange(1, 7, dtype=np.uint8)[:, None, None] * np.ones((1, 2, 2), np.uint8)
    good = reference_stacks(frames, 4, "reset")
    bad = good.copy()
    bad[3, 1] += 1  # step 3's second frame is not step 2's third
    with pytest.raises(ObservationError, match="episode 7 refused: observation 3 is not observation 2 shifted"):
        newest_frames(bad, stack, 7)
    zero = reference_stacks(frames, 4, "zero")
    with pytest.raises(ObservationError, match="first observation is not the padded reset stack"):
        newest_frames(zero, stack, 0)


def test_bad_descriptions() -> None:
    with pytest.raises(ValueError, match="k must be an int >= 2"):
        FrameStack(1)
    with pytest.raises(ValueError, match="padding"):
        FrameStack(4, "edge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"first axis to be 4"):
        FrameStack(4).check_shape((84, 84, 4))
