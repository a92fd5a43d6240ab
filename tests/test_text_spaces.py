"""gymnasium Text spaces: leaves, checks, random actions, collection on the backends, the store on disk."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.text_envs import WIDE, TextEnv, text_action_space, text_obs_space
from vcollect import Collector, RandomPolicy, make_vector
from vcollect.errors import ActionError, ObservationError
from vcollect.spaces import BatchCheck, batch_contains, leaves
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.read.reader import StoredDataset
from vcollect.text_leaves import TextRule

SMALL = spaces.Text(5, min_length=2, charset="ab€")


def test_text_leaves_are_fixed_width_unicode_with_one_spare_character() -> None:
    by_name = {leaf.name: leaf for leaf in leaves(text_obs_space())}
    assert by_name["word"].dtype == np.dtype("<U9") and by_name["word"].shape == ()
    assert by_name["pair/0"].dtype == np.dtype("<U5")
    with pytest.raises(TypeError, match="NUL"):
        leaves(spaces.Text(3, charset="a\x00"))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="ab€c\x00", max_size=8), min_size=1, max_size=6))
def test_batch_check_agrees_with_gymnasium_contains(values: list[str]) -> None:
    """The vectorised check (code points against a table) says what Text.contains says, value by value."""
    batch = np.array(values, dtype="<U9")
    stored = [str(v) for v in batch]  # numpy drops trailing NULs: compare with what the array holds
    expected_ok = all(SMALL.contains(v) for v in stored)
    problem = batch_contains(SMALL, batch)
    assert (problem is None) == expected_ok, (stored, problem)
    assert (BatchCheck(SMALL)(batch) is None) == expected_ok
    if not expected_ok:
        first_bad = next(i for i, v in enumerate(stored) if not SMALL.contains(v))
        assert problem is not None and f"element {first_bad} " in problem
    # large batches take the code-point path (small ones a pass over Python strings): same answers
    rule = TextRule(SMALL)
    large = np.tile(batch, 70)
    assert rule.holds(large) == expected_ok and (BatchCheck(SMALL)(large) is None) == expected_ok
    np.testing.assert_array_equal(rule.bad(batch), [not SMALL.contains(v) for v in stored])


def test_batch_check_messages_name_the_leaf_and_the_problem() -> None:
    space = spaces.Dict({"t": SMALL, "n": spaces.Discrete(2)})
    n = np.zeros(2, np.int64)
    too_long = batch_contains(space, {"t": np.array(["ab", "abababa"]), "n": n})
    assert too_long is not None and "leaf 't'" in too_long and "more than max_length 5" in too_long
    assert "fewer than min_length 2" in str(batch_contains(space, {"t": np.array(["ab", "a"]), "n": n}))
    assert "outside its charset: 'z'" in str(batch_contains(space, {"t": ["ab", "az"], "n": n}))
    assert "dtype int64 does not fit" in str(batch_contains(space, {"t": np.array([1, 2]), "n": n}))


def test_random_policy_samples_text_like_gymnasium() -> None:
    space = spaces.Tuple((spaces.Text(4, min_length=1, charset="xyé"), spaces.Discrete(3)))
    words = RandomPolicy(space, seed=1).sample(2000)[0]
    assert words.dtype == np.dtype("<U5")
    assert all(space[0].contains(str(w)) for w in words)
    assert {len(str(w)) for w in words} == {1, 2, 3, 4} and set("".join(map(str, words))) == set("xyé")
    again = RandomPolicy(space, seed=1).sample(2000)[0]
    np.testing.assert_array_equal(words, again)


def collect_text(tmp_path: Path, backend: str, flat: bool = False, episodes: int = 6, **kwargs: Any) -> Any:
    venv = make_vector(partial(TextEnv, flat=flat), 2, backend=backend, **kwargs)
    dataset_id = f"text/{backend}{int(flat)}-v0"
    store = EpisodeStore.create(dataset_id, venv.single_observation_space, venv.single_action_space, root=tmp_path)
    collector = Collector(None, venv, store=store, seed=11)
    collector.collect(n_episode=episodes, random=True, reset_before_collect=True)
    collector.close()
    store.close()
    venv.close()
    return load_dataset(dataset_id, tmp_path)


def assert_replays_text(episode: Any, flat: bool) -> None:
    """Reset a fresh env with the stored seed and step the stored actions: the same strings come back."""
    env = TextEnv(flat=flat)
    obs, _ = env.reset(seed=episode.seed)
    for t in range(len(episode) + 1):
        if flat:
            assert obs == episode.observations[t]
        else:
            assert obs["word"] == episode.observations["word"][t]
            assert obs["pair"] == (episode.observations["pair"][0][t], episode.observations["pair"][1][t])
            np.testing.assert_array_equal(obs["pos"], episode.observations["pos"][t])
        if t < len(episode):
            action = str(episode.actions[t]) if flat else (str(episode.actions[0][t]), int(episode.actions[1][t]))
            obs, reward, *_ = env.step(action)
            assert reward == episode.rewards[t]


@pytest.mark.filterwarnings("ignore::vcollect.errors.UnfinishedEpisodesWarning")  # gymnasium steps every env
@pytest.mark.parametrize("flat", [False, True], ids=["nested", "flat"])
def test_dummy_and_subproc_collect_the_same_text_episodes_and_they_replay(tmp_path: Path, flat: bool) -> None:
    dummy = collect_text(tmp_path, "dummy", flat)
    subproc = collect_text(tmp_path, "subproc", flat)
    gym_vec = collect_text(tmp_path, "gymnasium", flat, episodes=2)  # envs restart themselves: own data
    assert dummy.observation_space == (TextEnv(flat=flat).observation_space)  # Text survives dataset.json
    assert dummy.total_episodes == subproc.total_episodes == 6
    for a, b in zip(dummy, subproc):
        assert a.seed == b.seed
        if flat:
            np.testing.assert_array_equal(a.observations, b.observations)
            np.testing.assert_array_equal(a.actions, b.actions)
        else:
            for key in ("word", "pos"):
                np.testing.assert_array_equal(a.observations[key], b.observations[key])
            np.testing.assert_array_equal(a.observations["pair"][0], b.observations["pair"][0])
            np.testing.assert_array_equal(a.actions[0], b.actions[0])
        assert_replays_text(a, flat)
    words = np.concatenate([e.observations if flat else e.observations["word"] for e in dummy])
    assert any(len(w.encode()) > len(w) for w in words.tolist())  # multi-byte UTF-8 characters were stored
    assert gym_vec.total_episodes >= 2
    text_space = gym_vec.observation_space if flat else gym_vec.observation_space["word"]
    for episode in gym_vec:
        assert all(text_space.contains(str(w)) for w in (episode.observations if flat else episode.observations["word"]))


def test_ray_backend_collects_text(tmp_path: Path, ray_local: Any) -> None:
    ray_ds = collect_text(tmp_path, "ray", episodes=4)
    dummy = collect_text(tmp_path, "dummy", episodes=4)
    for a, b in zip(ray_ds, dummy):
        np.testing.assert_array_equal(a.observations["word"], b.observations["word"])


def test_text_columns_are_utf8_strings_on_disk_and_sample_back(tmp_path: Path) -> None:
    ds = collect_text(tmp_path, "dummy")
    (shard,) = StoredDataset(ds).shard_paths
    with h5py.File(shard, "r") as f:
        column = f["observations/word"]
        assert h5py.check_string_dtype(column.dtype).encoding == "utf-8"
        stored = [v.decode("utf-8") for v in column[()]]
    assert stored == [w for e in ds for w in e.observations["word"].tolist()]
    batch = ds.sample_steps(64)
    words = batch["observations"]["word"]
    assert words.dtype == np.dtype("<U9") and all(ds.observation_space["word"].contains(str(w)) for w in words)
    assert ds.verify() == []


@pytest.mark.parametrize("backend", ["dummy", "subproc"])
@pytest.mark.parametrize("bad", ["long", "charset", "type"])
def test_env_text_outside_the_space_is_an_observation_error_naming_the_leaf(backend: str, bad: str) -> None:
    venv = make_vector(partial(TextEnv, bad=bad), 1, backend=backend)
    collector = Collector(None, venv, seed=0)
    try:
        with pytest.raises(ObservationError, match="word") as info:
            collector.collect(n_step=10, random=True, reset_before_collect=True)
        expected = {"long": "more than max_length 8", "charset": "outside its charset: 'Q'", "type": "not a str|str, got int"}
        assert any(part in str(info.value) for part in expected[bad].split("|")), str(info.value)
    finally:
        collector.close()
        venv.close()


def test_too_long_text_is_refused_even_without_validation() -> None:
    """validate=False stores out-of-bounds numbers as they are, but a long string cannot be kept whole."""
    venv = make_vector(partial(TextEnv, bad="long"), 1)
    collector = Collector(None, venv, seed=0, validate=False)
    with pytest.raises(ObservationError, match="more than max_length 8"):
        collector.collect(n_step=10, random=True, reset_before_collect=True)
    collector.close()


def test_policy_text_actions_outside_the_space_are_action_errors() -> None:
    for words, message in ((["xy", "xyxy"], "more than max_length 3"), (["xy", "xQ"], "charset"), ([1, 2], "not fit")):
        def policy(obs: Any, state: Any, w: list[Any] = words) -> tuple[Any, None]:
            return (np.array(w), np.zeros(2, np.int64)), None

        collector = Collector(policy, make_vector(TextEnv, 2), seed=0)
        with pytest.raises(ActionError, match=message):
            collector.collect(n_step=2, reset_before_collect=True)
        collector.close()


def text_episode(steps: int = 2) -> dict[str, Any]:
    return {
        "observations": {
            "word": np.array(["a€"] * (steps + 1)),
            "pos": np.zeros((steps + 1, 2), np.float32),
            "pair": (np.array([""] * (steps + 1)), np.zeros(steps + 1, np.int64)),
        },
        "actions": (np.array(["x"] * steps), np.zeros(steps, np.int64)),
        "rewards": np.zeros(steps),
        "terminations": np.array([False] * (steps - 1) + [True]),
        "truncations": np.zeros(steps, bool),
    }


def test_store_refuses_text_that_would_not_be_kept_and_writes_nothing(tmp_path: Path) -> None:
    store = EpisodeStore.create("text/direct-v0", text_obs_space(), text_action_space(), root=tmp_path)
    good = text_episode()
    store.write_episode(**good, seed=1, env_id=0)
    cases = [
        ("observations", "word", np.array(["a" * 9] * 3), ObservationError, "more than max_length 8"),
        ("observations", "word", np.array([1, 2, 3]), ObservationError, "holds strings"),
        ("actions", 0, np.array(["x", "xQ"]), ActionError, "charset"),
    ]
    for group, key, value, error, message in cases:
        bad = text_episode()
        if group == "observations":
            bad["observations"] = {**bad["observations"], key: value}
        else:
            bad["actions"] = (value, bad["actions"][1])
        with pytest.raises(error, match=message):
            store.write_episode(**bad, seed=2, env_id=0)
        assert store.pending_episodes == 1
    store.close()
    (episode,) = list(load_dataset("text/direct-v0", tmp_path))
    assert episode.observations["word"].tolist() == ["a€"] * 3 and episode.observations["pair"][0].tolist() == [""] * 3
    assert set(WIDE) >= set("a€")
