"""The shared info flattener: one key rule for the env wrapper, the recorder and the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from vcollect.envs.info_recording import stack_episode_infos
from vcollect.errors import InfoStructureError
from vcollect.infos import flatten_info, info_name, nest_info, stack_rows
from vcollect.minari.recorder import DataCollector
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.layout.schema import json_default, to_json


def test_flatten_and_nest_invert_each_other_in_key_order() -> None:
    tree = {"b": 1, "a": {"y": np.zeros(2), "x": {"deep": "s"}}, "c": [1, 2]}
    flat = flatten_info(tree)
    assert list(flat) == [("b",), ("a", "y"), ("a", "x", "deep"), ("c",)]
    assert [info_name(p) for p in flat] == ["b", "a/y", "a/x/deep", "c"]
    back = nest_info(flat)
    assert list(back) == ["b", "a", "c"] and back["a"]["x"] == {"deep": "s"} and back["c"] == [1, 2]
    assert back["a"]["y"] is tree["a"]["y"]  # leaves are passed through, not copied


@pytest.mark.parametrize("bad", ["a/b", "", 3])
def test_a_bad_key_is_named_the_same_way_everywhere(bad: Any, tmp_path: Path) -> None:
    where = rf"key {bad!r} under 'outer' cannot be stored: keys must be non-empty str without '/'"
    with pytest.raises(InfoStructureError, match=where):
        flatten_info({"outer": {bad: 1}}, "info")
    with pytest.raises(InfoStructureError, match=where):  # the Collector's record_infos path
        stack_episode_infos([{"outer": {bad: 1}}, {"outer": {bad: 2}}])
    with EpisodeStore.create("ns/keys-v0", gym.spaces.Discrete(2), gym.spaces.Discrete(2), root=tmp_path) as store:
        with pytest.raises(InfoStructureError, match=where):
            store.write_episode([0, 1], [0], [1.0], [True], [False], seed=None, env_id=0,
                                infos={"outer": {bad: np.zeros(2)}})
        assert store.pending_episodes == 0


class _OuterInfoEnv(gym.Env[np.ndarray, int]):
    """One-step episodes whose info holds ``{"outer": {key: 1}}``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, key: Any) -> None:
        self.key = key

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {"outer": {self.key: 1}}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(1, np.float32), 1.0, True, False, {"outer": {self.key: 1}}


def test_recorder_refuses_a_bad_info_key_at_reset_and_records_good_ones(tmp_path: Path) -> None:
    collector = DataCollector(_OuterInfoEnv("a/b"), record_infos=True, root=tmp_path)
    with pytest.raises(InfoStructureError, match=r"info key 'a/b' under 'outer' cannot be stored"):
        collector.reset(seed=1)
    collector.close()
    good = DataCollector(_OuterInfoEnv("ok"), record_infos=True, root=tmp_path)
    good.reset(seed=1)
    good.step(0)
    ds = good.create_dataset("ns/good-v0")
    good.close()
    assert load_dataset("ns/good-v0", root=tmp_path)[0].infos["outer"]["ok"].tolist() == [1, 1]
    assert ds.total_episodes == 1


def test_one_json_conversion_for_options_and_metadata(tmp_path: Path) -> None:
    assert to_json({"a": np.int64(3), "b": np.arange(2), "p": Path("/x")}, "options") == '{"a": 3, "b": [0, 1], "p": "/x"}'
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        json_default(object())
    collector = DataCollector(_OuterInfoEnv("ok"), root=tmp_path)
    with pytest.raises(ValueError, match="reset options \\(to be recorded\\) must be JSON-serializable"):
        collector.reset(options={"bad": object()})
    collector.close()


def test_values_that_do_not_stack_are_named() -> None:
    assert stack_rows([np.zeros(2), np.ones(2)], "x").shape == (2, 2)
    with pytest.raises(InfoStructureError, match=r"info\['d/x'\] values of one episode do not stack"):
        stack_episode_infos([{"d": {"x": np.zeros(2)}}, {"d": {"x": np.zeros(3)}}])
