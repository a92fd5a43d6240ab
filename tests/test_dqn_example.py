"""examples/dqn_cartpole.py on a short budget: the greedy policy learns (random actions average ~22)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

import vcollect

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dqn_cartpole.py"
RANDOM_RETURN = 22.0  # CartPole-v1's mean return under uniformly random actions


def test_dqn_example_learns_on_a_short_budget(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    main = runpy.run_path(str(EXAMPLE), run_name="vcollect_example_dqn_cartpole")["main"]
    result = main(["--total-steps", "7000", "--eval-every", "3000", "--eval-episodes", "6", "--root", str(tmp_path)])
    assert result["steps"] == 1000 + 24 * 256  # 1000 random steps, then 256 per training round: exact counts
    assert result["updates"] == 24 * 128
    final = result["final"]
    assert final.n_collected_episodes == 6
    assert final.returns_stat.mean > 3 * RANDOM_RETURN, result["history"]
    dataset = vcollect.load_dataset("examples/cartpole-dqn-v0", root=tmp_path)
    assert dataset.total_episodes == 6 and dataset.total_steps == int(final.lens.sum())
