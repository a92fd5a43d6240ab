"""examples/dqn_cartpole.py on a short budget: the greedy policy learns (random actions average ~22)."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

import vcollect

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dqn_cartpole.py"
RANDOM_RETURN = 22.0  # CartPole-v1's mean return under uniformly random actions


@pytest.mark.slow
def test_dqn_example_learns_on_a_short_budget(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    main = runpy.run_path(str(EXAMPLE), run_name="vcollect_example_dqn_cartpole")["main"]
    # a 64-wide Q-network (the example's default is 256): seeds 1-3 reached 188, 185 and 87 on this budget
    # (256 wide: 96, 500, 104) at ~0.6x the CPU
    result = main(["--total-steps", "7000", "--eval-every", "3000", "--eval-episodes", "6", "--hidden-size", "64",
                   "--root", str(tmp_path)])
    assert result["steps"] == 1000 + 24 * 256  # 1000 random steps, then 256 per training round: exact counts
    assert result["updates"] == 24 * 128
    final = result["final"]
    assert final.n_collected_episodes == 6
    assert final.returns_stat.mean > 3 * RANDOM_RETURN, result["history"]
    dataset = vcollect.load_dataset("examples/cartpole-dqn-v0", root=tmp_path)
    assert dataset.total_episodes == 6 and dataset.total_steps == int(final.lens.sum())


def test_update_with_tianshou_dqns_defaults_is_tianshous_update() -> None:
    """``dqn_update(..., huber=False, max_grad_norm=None)`` is the gradient step Tianshou's DQN makes (double
    Q-learning, 1-step targets, MSE, Adam): from the same weights and transitions both land on the same
    weights, step after step. What benchmarks/bench_dqn_vs_tianshou.py's "same DQN" row relies on."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tianshou")
    import copy

    import gymnasium as gym
    import numpy as np
    from tianshou.algorithm import DQN
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Batch, ReplayBuffer
    from tianshou.utils.net.common import Net
    from tianshou.utils.torch_utils import policy_within_training_step

    dqn_update = runpy.run_path(str(EXAMPLE), run_name="vcollect_example_dqn_cartpole")["dqn_update"]
    torch.manual_seed(0)
    net = Net(state_shape=4, action_shape=2, hidden_sizes=[16, 16])
    ours = copy.deepcopy(net)  # the same weights, before Tianshou's steps change net's

    class Values(torch.nn.Module):  # type: ignore[name-defined,misc]  # Tianshou's Net returns (values, state)
        def __init__(self, net: Any) -> None:
            super().__init__()
            self.net = net

        def forward(self, obs: Any) -> Any:
            return self.net(obs)[0]

    q = Values(ours)
    target = copy.deepcopy(q)
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-2)
    policy = DiscreteQLearningPolicy(model=net, action_space=gym.spaces.Discrete(2))
    algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-2), gamma=0.9, n_step_return_horizon=1,
                    target_update_freq=100)

    rng = np.random.default_rng(0)
    n = 48
    obs, next_obs = rng.normal(size=(n, 4)).astype(np.float32), rng.normal(size=(n, 4)).astype(np.float32)
    actions, rewards = rng.integers(0, 2, n), rng.uniform(-5.0, 5.0, n)  # TD errors past Huber's bend at 1
    terminated, truncated = rng.random(n) < 0.2, rng.random(n) < 0.1
    buffer = ReplayBuffer(n)
    for i in range(n):
        buffer.add(Batch(obs=obs[i], act=actions[i], rew=rewards[i], terminated=terminated[i],
                         truncated=truncated[i], obs_next=next_obs[i], info={}))
    batch = {"observations": obs, "next_observations": next_obs, "actions": actions, "rewards": rewards,
             "terminations": terminated}
    for _ in range(3):
        with policy_within_training_step(policy):
            theirs = algorithm.update(sample_size=0, buffer=buffer).loss  # type: ignore[attr-defined]  # sample_size 0: every stored step
        loss = dqn_update(q, target, optimizer, batch, 0.9, huber=False, max_grad_norm=None)
        assert loss == pytest.approx(theirs, rel=1e-5)
        for mine, tianshou in zip(ours.parameters(), net.parameters(), strict=True):
            torch.testing.assert_close(mine, tianshou, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_dqn_benchmark_runs_every_row_on_both_sides(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/bench_dqn_vs_tianshou.py on a tiny budget: each schedule prints a Tianshou and a vcollect
    row, the latter with its speed-ups (a smoke run; the speeds themselves are in benchmarks/RESULTS.md). It
    runs as its own ``__main__`` in this process, which has imported torch and Tianshou already (a fresh
    interpreter would spend most of the run importing them)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tianshou")
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_dqn_vs_tianshou.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--total-steps", "1100", "--learning-starts", "1000",
                                      "--repeats", "1"])
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        torch.set_num_threads(threads)  # the benchmark runs torch on one thread
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]  # minus the header
    schedules = {line.split(" | ")[0] for line in rows}
    assert len(rows) == 2 * len(schedules) >= 2 * 8, out
    assert sum(" | vcollect | " in line and "x / " in line for line in rows) == len(schedules), out
