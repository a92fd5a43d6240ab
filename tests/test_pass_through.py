"""PassThroughVectorEnv forwards every call a backend offers once, with the per-batch hooks a wrapper overrides:
``to_envs`` on each action batch, ``on_step`` and ``on_reset`` on each result's infos (a step_reset's restarts
included, in one call and split in two)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tests.tianshou_envs import MoveToRightEnv
from vcollect.envs import DummyVectorEnv, SubprocVectorEnv
from vcollect.envs.pass_through import PassThroughVectorEnv


class Watching(PassThroughVectorEnv):
    """Turns every action into 1 on the way to the envs and notes what its hooks are told."""

    def __init__(self, envs: Any) -> None:
        super().__init__(envs)
        self.told: list[tuple[str, list[int], list[int]]] = []  # (hook, env ids, the infos' positions)

    def to_envs(self, actions: Any) -> Any:
        return np.ones_like(actions)

    def on_step(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        self.told.append(("step", env_ids.tolist(), [int(info["position"]) for info in infos]))

    def on_reset(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        self.told.append(("reset", env_ids.tolist(), [int(info["position"]) for info in infos]))


class PositionedWalk(MoveToRightEnv):
    """MoveToRightEnv with its position in each info."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"position": self.index}

    def step(self, action: Any) -> Any:
        obs, reward, term, trunc, _ = super().step(action)
        return obs, reward, term, trunc, {"position": self.index}


def test_step_reset_maps_actions_and_tells_the_hooks_of_the_step_and_its_restarts() -> None:
    envs = Watching(DummyVectorEnv([functools.partial(PositionedWalk, size) for size in (1, 2)]))
    try:
        assert envs.capabilities == envs.envs.capabilities
        # the calls beyond the protocol exactly where the capabilities declare them, as a backend has them
        assert [name for name in ("step_reset", "send_step_reset", "recv_step_reset", "recv_any", "step_all",
                                  "step_into") if callable(getattr(envs, name, None))] == ["step_reset"]
        envs.reset(seeds=[0, 1])
        # actions 0 would leave both walks at 0; mapped to 1, env 0 reaches its end and restarts in the step
        result = envs.step_reset(np.zeros(2, dtype=np.int64), None, reset_seeds=[2, 3])
        assert result.reset_ids.tolist() == [0]
        assert envs.told == [("reset", [0, 1], [0, 0]), ("step", [0, 1], [1, 1]), ("reset", [0], [0])]
    finally:
        envs.close()


def test_split_step_reset_maps_actions_and_tells_the_hooks_of_the_step_and_its_restarts() -> None:
    inner = SubprocVectorEnv([functools.partial(PositionedWalk, size) for size in (2, 1)], num_workers=1, overlap_steps=True)
    envs = Watching(inner)
    try:
        assert envs.capabilities.split_step_reset
        envs.reset(seeds=[0, 1])
        envs.send_step_reset(np.zeros(2, dtype=np.int64), reset_seeds=[2, 3])
        result = envs.recv_step_reset()
        assert result.reset_ids.tolist() == [1]
        assert envs.told == [("reset", [0, 1], [0, 0]), ("step", [0, 1], [1, 1]), ("reset", [1], [0])]
        assert envs.take_restarts() == []
    finally:
        envs.close()
