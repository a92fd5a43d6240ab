"""StepBlock, the staged steps an all-env backend writes and the collector records, and the direction of
the dependency between the env side and the rings."""

from __future__ import annotations

import ast
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from vcollect.envs.steps import StepBlock


def test_step_block_rows_keep_restarts_done_and_count():
    space = gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (2,)), "b": gym.spaces.Discrete(3)})
    block = StepBlock(3, 4, space, gym.spaces.Discrete(2))
    restarting = np.array([True, False, False])
    done = block.append_row(
        [np.full((3, 2), 0.5), [0, 1, 2]], [1.0, 2.0, 3.0], [False, True, False], [False, False, True], restarting
    )
    restarting[:] = False  # the caller's array: row 0's restarts were copied
    assert done.tolist() == [False, True, True] and block.count == 1
    block.append_row([np.zeros((3, 2)), [2, 2, 2]], [0.0] * 3, [False] * 3, [False] * 3, done)
    assert block.restarts().tolist() == [[True, False, False], [False, True, True]]
    assert block.transitions() == 6 - 3
    assert block.obs[1].dtype == np.dtype(np.int64) and block.obs[1][:2].tolist() == [[0, 1, 2], [2, 2, 2]]
    assert block.rewards.dtype == np.float64 and block.rewards[0].tolist() == [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(block.obs_row(0)["a"], np.full((3, 2), 0.5, np.float32))
    block.set_actions(1, [np.array([1, 0, 1])])
    assert block.actions[0][1].tolist() == [1, 0, 1]
    with pytest.raises(IndexError, match="row 2 is not staged"):
        block.set_actions(2, [np.zeros(3, np.int64)])


def test_step_block_writes_out_of_order_rows_by_env_id_and_refuses_what_breaks_it():
    block = StepBlock(3, 1, gym.spaces.Box(0.0, 9.0, (1,)), gym.spaces.Discrete(2))
    no_restarts = np.zeros(3, bool)
    order = np.array([2, 0, 1], np.int32)
    done = block.append_row([[[2.0], [0.0], [1.0]]], [2.0, 0.0, 1.0], [True, False, False], [False] * 3, no_restarts, order)
    assert block.obs[0][0, :, 0].tolist() == [0.0, 1.0, 2.0] and block.rewards[0].tolist() == [0.0, 1.0, 2.0]
    assert done.tolist() == [False, False, True]
    with pytest.raises(ValueError, match="full"):
        block.append_row([np.zeros((3, 1))], [0.0] * 3, [False] * 3, [False] * 3, done)
    block.clear()
    with pytest.raises(ValueError, match="each of the 3 env ids once"):
        block.append_row([np.zeros((3, 1))], [0.0] * 3, [False] * 3, [False] * 3, done, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="got 2 observation leaves, the block holds 1"):
        block.append_row([np.zeros((3, 1))] * 2, [0.0] * 3, [False] * 3, [False] * 3, done)
    assert block.count == 0


def test_env_modules_import_nothing_from_the_buffers():
    """The env side hands the collectors its own types (vcollect.envs.steps); the rings depend on it, not
    the other way round."""
    envs_dir = Path(__file__).resolve().parent.parent / "vcollect" / "envs"
    offenders = []
    for path in sorted(envs_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.name}: {name}" for name in names if name.startswith("vcollect.buffers")]
    assert len(list(envs_dir.glob("*.py"))) > 10 and offenders == []
