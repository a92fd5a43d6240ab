"""StepInfoTap's row counts on a backend that splits its step_reset in two (the subprocess backend with
``overlap_steps``): the Tianshou buffer gives every transition its index even when the rings wrap between
two reads, as on the backend stepping one call at a time."""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("tianshou")

from tests.tianshou_envs import move_right  # noqa: E402
from vcollect.envs import SubprocVectorEnv  # noqa: E402
from vcollect.tianshou import Collector, VectorReplayBuffer  # noqa: E402


class MaxActionPolicy:
    """Always action 1: every episode of move_right(2) is two steps, reward 0 then 1."""

    def __call__(self, obs: np.ndarray, state: object = None) -> tuple[np.ndarray, None]:
        return np.ones(len(obs), dtype=np.int64), None


def test_overlapped_steps_keep_every_transition_when_the_rings_wrap_between_reads() -> None:
    venv = SubprocVectorEnv([functools.partial(move_right, 2)] * 2, num_workers=2, overlap_steps=True)
    assert venv.capabilities.split_step_reset
    collector = Collector(MaxActionPolicy(), venv, VectorReplayBuffer(total_size=20, buffer_num=2))
    try:
        collector.reset()
        collector.collect(n_step=4)
        assert len(collector.buffer) == 4
        # 14 steps per env write 14 step rows and 7 reset rows: more than a ring holds before the next read
        collector.collect(n_step=28)
        buffer = collector.buffer
        assert len(buffer) == 20
        assert buffer.rew.tolist() == [1.0, 0.0] * 10
        assert buffer.obs[:, 0].tolist() == [1.0, 0.0] * 10
        assert buffer.sample_indices(0).tolist() == [3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 13, 14, 15, 16, 17, 18, 19, 10, 11, 12]
    finally:
        collector.close()
