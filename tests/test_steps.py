"""StepBlock, the staged steps an all-env backend writes and the collector records, and the direction of
the dependency between the env side and the rings."""

from __future__ import annotations

import ast
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from vcollect.envs.steps import StepBlock
from vcollect.held_rows import HeldRows


def test_step_block_rows_keep_restarts_done_and_count():
    space = gym.spaces.Dict({"a": gym.spaces.Box(-1.0, 1.0, (2,)), "b": gym.spaces.Discrete(3)})
    block = StepBlock(3, 4, space, gym.spaces.Discrete(2))
    restarting = np.array([True, False, False])
    done = block.append_row(
        [np.full((3, 2), 0.5), [0, 1, 2]], [1.0, 2.0, 3.0], [False, True, False], [False, False, True], restarting
    )
    restarting[:] = False  # the caller's array: row 0's restarts were copied
    assert block.done_rows().tolist() == [[False, True, True]] and block.count == 1
    assert done.tolist() == [False, True, True]  # the row handed back: a view of the done row, now worked out
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
    assert block.done_rows(1).tolist() == [[False, False, True]]
    with pytest.raises(ValueError, match="full"):
        block.append_row([np.zeros((3, 1))], [0.0] * 3, [False] * 3, [False] * 3, done)
    block.clear()
    with pytest.raises(ValueError, match="each of the 3 env ids once"):
        block.append_row([np.zeros((3, 1))], [0.0] * 3, [False] * 3, [False] * 3, done, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="got 2 observation leaves, the block holds 1"):
        block.append_row([np.zeros((3, 1))] * 2, [0.0] * 3, [False] * 3, [False] * 3, done)
    assert block.count == 0


def test_done_rows_are_worked_out_when_read_or_cleared_so_a_backend_can_carry_the_last_one():
    """The done mask append_row hands back is the block's row, filled in when the block's done rows are read
    (done_rows, restarts, restart_row, transitions) or the block is cleared: what a backend carries to the
    next block's row 0 as its restarts is the last step's ``terminations | truncations`` either way."""
    space = gym.spaces.Box(-1.0, 1.0, (1,))
    block = StepBlock(3, 3, space, gym.spaces.Discrete(2))
    restarting = np.zeros(3, bool)
    flags = [([True, False, False], [False, False, False]), ([False, False, False], [False, True, False]),
             ([False, False, True], [False, False, True])]
    for terminations, truncations in flags:
        restarting = block.append_row([np.zeros((3, 1))], [0.0] * 3, terminations, truncations, restarting)
    assert block.restart_row(2).tolist() == [False, True, False]
    assert block.transitions() == 9 - 2
    block.clear()  # not read past row 1 before: the clear works out the rest
    assert restarting.tolist() == [False, False, True]
    for terminations, truncations in flags[:2]:
        restarting = block.append_row([np.zeros((3, 1))], [0.0] * 3, terminations, truncations, restarting)
    assert block.restarts().tolist() == [[False, False, True], [True, False, False]]
    assert block.done_rows().tolist() == [[True, False, False], [False, True, False]]
    with pytest.raises(IndexError, match="rows up to 3 asked for, the block holds 2"):
        block.done_rows(3)
    block.renew()
    assert restarting.tolist() == [False, True, False]


def test_hold_obs_block_keeps_handed_over_arrays_and_copies_anything_else():
    """A hold_obs block keeps the arrays a backend hands over (the very objects: no copy), copies what was
    not handed over, is of another dtype, or comes out of env id order, and serves every observation read
    (rows, joined rows, HeldRows for the rings) from them; clearing it leaves rows handed out intact."""
    space = gym.spaces.Box(0, 255, (2,), np.uint8)
    block = StepBlock(3, 4, space, gym.spaces.Discrete(2), hold_obs=True)
    assert block.obs == [] and block.obs_leaf_count == 1
    no_restarts = np.zeros(3, bool)
    frames = [np.full((3, 2), 10 * j, np.uint8) for j in range(4)]
    block.append_row([frames[0]], [0.0] * 3, [False] * 3, [False] * 3, no_restarts, handed_over=True)
    block.append_row([frames[1]], [0.0] * 3, [False] * 3, [False] * 3, no_restarts)  # not handed over
    block.append_row([frames[2].astype(np.int64)], [0.0] * 3, [False] * 3, [False] * 3, no_restarts, handed_over=True)
    block.append_row([frames[3][::-1]], [0.0] * 3, [False] * 3, [False] * 3, no_restarts, np.array([2, 1, 0]),
                     handed_over=True)
    rows = [block.obs_leaf_row(k)[0] for k in range(4)]
    assert rows[0] is frames[0]
    assert not any(np.shares_memory(rows[k], frames[k]) for k in (1, 2, 3))
    assert all(row.dtype == np.uint8 and row.shape == (3, 2) for row in rows)
    for k in range(4):
        np.testing.assert_array_equal(rows[k], frames[k])
        np.testing.assert_array_equal(block.obs_row(k), frames[k])
    np.testing.assert_array_equal(block.obs_rows(1, 3), np.concatenate(frames[1:3]))
    (held,) = block.obs_leaves(3)
    assert isinstance(held, HeldRows) and held.shape == (3, 3, 2) and len(held) == 3 and held.rows[0] is frames[0]
    np.testing.assert_array_equal(held.reshape(9, 2), np.concatenate(frames[:3]))
    block.clear()
    assert block.count == 0
    block.append_row([np.zeros((3, 2), np.uint8)], [0.0] * 3, [False] * 3, [False] * 3, no_restarts, handed_over=True)
    np.testing.assert_array_equal(rows[0], frames[0])  # a row handed out before is not written over
    with pytest.raises(ValueError, match="at least one row"):
        HeldRows([])


def test_rows_written_through_their_views_land_in_the_arrays_and_renew_leaves_handed_out_rows_alone():
    """Rows are written through views made once (observations, rewards, flags, and the one action leaf's
    ``action_rows``), Fortran-ordered batches included; ``renew`` gives fresh observation arrays whose rows
    are written from then on, a row handed out before keeping its values, while ``clear`` writes over them."""
    space = gym.spaces.Box(-9.0, 9.0, (3,))
    block = StepBlock(2, 3, space, gym.spaces.Discrete(4))
    no_restarts = np.zeros(2, bool)
    batches = [np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * j) for j in range(3)]
    for j, batch in enumerate(batches):
        block.append_row([batch], [j, -j], [j == 1, False], [False, j == 2], no_restarts)
        block.action_rows[j][...] = [j, 3 - j]
    np.testing.assert_array_equal(block.obs[0], np.stack(batches))
    assert block.rewards.tolist() == [[0, 0], [1, -1], [2, -2]]
    assert block.done_rows().tolist() == [[False, False], [True, False], [False, True]]
    assert block.actions[0].tolist() == [[0, 3], [1, 2], [2, 1]]
    handed_out = block.obs_leaf_row(2)[0]
    assert np.shares_memory(handed_out, block.obs[0])
    block.renew()
    block.append_row([batches[0]], [5.0, 5.0], [False] * 2, [False] * 2, no_restarts)
    np.testing.assert_array_equal(handed_out, batches[2])  # the old array's row, as it was
    np.testing.assert_array_equal(block.obs_leaf_row(0)[0], batches[0])
    assert np.shares_memory(block.obs_leaf_row(0)[0], block.obs[0]) and block.rewards[0].tolist() == [5.0, 5.0]
    kept = block.obs_leaf_row(0)[0]
    block.clear()
    block.append_row([batches[1]], [0.0] * 2, [False] * 2, [False] * 2, no_restarts)
    np.testing.assert_array_equal(kept, batches[1])  # cleared, not renewed: the same rows written over


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
