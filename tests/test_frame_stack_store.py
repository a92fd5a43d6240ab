"""Frame stacks stored once: the index arithmetic and the write-time check against a reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcollect.errors import ObservationError
from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.read.reader import StoredDataset
from vcollect.store.write.frame_stack import FrameStack, newest_frames, rebuild, rebuild_episode


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


def _stacked_episodes(rng: np.random.Generator, lengths: list[int], k: int = 4) -> list[np.ndarray]:
    return [reference_stacks(rng.integers(0, 256, size=(n + 1, 6, 5), dtype=np.uint8), k, "reset") for n in lengths]


def _write(store: Any, eps: list[np.ndarray], rng: np.random.Generator) -> None:
    for i, obs in enumerate(eps):
        t = len(obs) - 1
        store.write_episode(obs, rng.integers(0, 3, size=t), np.ones(t), np.eye(1, t, t - 1, dtype=bool)[0],
                            np.zeros(t, bool), seed=i, env_id=0)


def test_store_round_trip_and_sampling(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    space = gym.spaces.Box(0, 255, (4, 6, 5), np.uint8)
    eps = _stacked_episodes(rng, [5, 1, 12, 7])
    store = EpisodeStore.create("fs/synthetic-v0", space, gym.spaces.Discrete(3), root=tmp_path, frame_stack=4,
                                shard_steps=10)
    _write(store, eps[:2], rng)
    store.write_episodes(np.concatenate(eps[2:]), rng.integers(0, 3, size=19), np.ones(19),
                         np.zeros(19, bool), np.eye(1, 19, 18, dtype=bool)[0], [12, 7], seeds=[None, None],
                         env_ids=[1, 1])
    store.close()
    ds = load_dataset("fs/synthetic-v0", root=tmp_path)
    assert ds.observation_space == space
    for i, ep in enumerate(ds.iterate_episodes()):
        assert ep.observations.shape == eps[i].shape and np.array_equal(ep.observations, eps[i])
    # on disk: one (6, 5) frame per observation row, not a (4, 6, 5) stack
    import h5py

    for shard in sorted((tmp_path / "fs" / "synthetic-v0" / "shards").glob("*.h5")):
        with h5py.File(shard) as f:
            assert f["observations"].shape[1:] == (6, 5)
    allobs = np.concatenate([e[:-1] for e in eps])
    allnext = np.concatenate([e[1:] for e in eps])
    pos = rng.integers(0, 25, size=40)
    for cache_bytes in (0, 2**30):  # through the shards and through the in-memory cache
        got = ds.steps_at(pos, cache_bytes=cache_bytes)
        assert np.array_equal(got["observations"], allobs[pos])
        assert np.array_equal(got["next_observations"], allnext[pos])
    assert ds.sample_steps(8)["observations"].shape == (8, 4, 6, 5)


def test_store_refusals(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="first axis to be 4"):
        EpisodeStore.create("fs/a-v0", gym.spaces.Box(0, 255, (6, 5, 4), np.uint8), gym.spaces.Discrete(3),
                            root=tmp_path, frame_stack=4)
    with pytest.raises(ValueError, match="needs a Box"):
        EpisodeStore.create("fs/a-v0", gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (4, 2))}), gym.spaces.Discrete(3),
                            root=tmp_path, frame_stack=4)
    assert not (tmp_path / "fs" / "a-v0").exists()
    store = EpisodeStore.create("fs/b-v0", gym.spaces.Box(0, 255, (4, 6, 5), np.uint8), gym.spaces.Discrete(3),
                                root=tmp_path, frame_stack=4)
    good, bad = _stacked_episodes(rng, [3, 4])
    bad[2, 0] ^= 1
    _write(store, [good], rng)
    with pytest.raises(ObservationError, match="episode 1 refused: observation 2 is not observation 1 shifted"):
        _write(store, [bad], rng)
    store.close()
    ds = load_dataset("fs/b-v0", root=tmp_path)
    assert ds.total_episodes == 1 and np.array_equal(ds[0].observations, good)


def test_copies_verify_torch_and_minari_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import minari

    from vcollect.minari import export_minari
    from vcollect.store import combine_datasets

    rng = np.random.default_rng(2)
    space = gym.spaces.Box(0, 255, (4, 6, 5), np.uint8)
    eps = _stacked_episodes(rng, [4, 6, 2])
    with EpisodeStore.create("fs/src-v0", space, gym.spaces.Discrete(3), root=tmp_path, frame_stack=4) as store:
        _write(store, eps, rng)
    ds = load_dataset("fs/src-v0", root=tmp_path)
    assert ds.verify() == [] and StoredDataset(ds).frame_stack is not None and StoredDataset(ds).frame_stack.k == 4
    both = combine_datasets([ds, ds], "fs/both-v0", root=tmp_path)
    assert StoredDataset(both).frame_stack == StoredDataset(ds).frame_stack
    assert [np.array_equal(e.observations, r) for e, r in zip(both.iterate_episodes(), eps + eps)] == [True] * 6
    items = ds.as_torch_dataset("transitions")
    first = items[0]
    assert np.array_equal(np.asarray(first["observations"]), eps[0][0])
    assert np.array_equal(np.asarray(first["next_observations"]), eps[0][1])
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    export_minari(ds, "fs/exported-v0", tmp_path / "minari")
    theirs = minari.load_dataset("fs/exported-v0")
    assert theirs.observation_space == space
    for ep, ref in zip(theirs.iterate_episodes(), eps):
        assert ep.observations.shape == ref.shape and np.array_equal(ep.observations, ref)


def _pong() -> gym.Env:
    """ALE Pong through AtariPreprocessing (84x84 grayscale) and FrameStackObservation(4), as agents see it."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, max_episode_steps=400)
    return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(env), 4)


def test_pong_collected_with_frame_stacks_round_trips(tmp_path: Path) -> None:
    pytest.importorskip("ale_py")
    from vcollect import Collector
    from vcollect.envs import DummyVectorEnv
    from vcollect.policies import RandomPolicy

    envs = DummyVectorEnv([_pong])
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    store = EpisodeStore.create("atari/pong-fs-v0", obs_space, act_space, root=tmp_path, frame_stack=4,
                                compression="none")
    with Collector(RandomPolicy(act_space, seed=0), envs, store=store, seed=3, unfinished="truncate") as collector:
        collector.reset()
        collector.collect(n_step=150)
    store.close()
    data = load_dataset("atari/pong-fs-v0", root=tmp_path)
    episodes = list(data.iterate_episodes())
    assert len(episodes) == 2  # the TimeLimit (400 ALE frames = 100 steps) ends the first one
    # the stacks the env produces for the stored seed and actions (ALE without sticky actions is deterministic)
    env = _pong()
    produced = []
    for episode in episodes:
        first, _ = env.reset(seed=episode.seed)
        produced.append(np.stack([first] + [env.step(int(a))[0] for a in episode.actions]))
        assert np.array_equal(episode.observations, produced[-1])
    with EpisodeStore.create("atari/pong-plain-v0", obs_space, act_space, root=tmp_path, compression="none") as plain:
        for episode, obs in zip(episodes, produced):
            plain.write_episode(obs, episode.actions, episode.rewards, episode.terminations, episode.truncations,
                                seed=episode.seed, env_id=0)

    def size(name: str) -> int:
        return sum(p.stat().st_size for p in (tmp_path / "atari" / name).rglob("*.h5"))

    ratio = size("pong-fs-v0") / size("pong-plain-v0")
    assert 0.2 < ratio < 0.3, f"frames stored once should take about 1/4 of the stacks, got {ratio:.3f}"
    got = data.steps_at(np.arange(150), cache_bytes=0)
    assert np.array_equal(got["observations"], np.concatenate([p[:-1] for p in produced]))
    assert np.array_equal(got["next_observations"], np.concatenate([p[1:] for p in produced]))


def _stacked_counter() -> gym.Env:
    """A tiny env of (3,) float frames counting steps, stacked 4 deep by gymnasium's FrameStackObservation."""
    from tests.cli_envs import InfoCounterEnv

    return gym.wrappers.FrameStackObservation(InfoCounterEnv(episode_length=6), 4)


if "StackedCounter-v0" not in gym.registry:  # this module may be imported twice (pytest, then the CLI)
    gym.register("StackedCounter-v0", entry_point=_stacked_counter)


def test_cli_frame_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vcollect.cli import main

    args = ["collect", "tests.test_frame_stack_store:StackedCounter-v0", "--num-envs", "2", "--backend", "dummy",
            "--episodes", "4", "--dataset", "fs/cli-v0", "--root", str(tmp_path), "--seed", "0"]
    assert main([*args, "--frame-stack", "4"]) == 0
    data = load_dataset("fs/cli-v0", root=tmp_path)
    assert StoredDataset(data).frame_stack == FrameStack(4) and data.total_episodes == 4
    expected = reference_stacks(np.arange(7, dtype=np.float32)[:, None], 4, "reset")
    for episode in data.iterate_episodes():
        assert np.array_equal(episode.observations, expected)
    assert main([*args[:-4], "--dataset", "fs/cli2-v0", "--root", str(tmp_path), "--frame-stack", "3"]) != 0
    assert "first axis to be 3" in capsys.readouterr().err


def _small_stacked_dataset(root: Path, padding: str = "reset") -> Path:
    rng = np.random.default_rng(3)
    space = gym.spaces.Box(0, 255, (4, 6, 5), np.uint8)
    stack = FrameStack(4, padding)  # type: ignore[arg-type]
    with EpisodeStore.create("fs/layout-v0", space, gym.spaces.Discrete(3), root=root, frame_stack=stack) as store:
        frames = rng.integers(1, 256, size=(6, 6, 5), dtype=np.uint8)
        _write(store, [reference_stacks(frames, 4, padding)], rng)
    return root / "fs" / "layout-v0"


@pytest.mark.parametrize("value", ["4", [4], {"k": "4"}, {"k": True}, {"k": 1}, {"k": 4, "padding": "edge"},
                                   {"k": 4, "pad": "zero"}, {"k": 3}, {"padding": "zero"}])
def test_a_malformed_frame_stack_in_dataset_json_is_a_corrupt_dataset_naming_the_file(
        tmp_path: Path, value: Any) -> None:
    import json

    from vcollect.errors import CorruptDatasetError

    path = _small_stacked_dataset(tmp_path)
    info = json.loads((path / "dataset.json").read_text())
    info["frame_stack"] = value
    (path / "dataset.json").write_text(json.dumps(info))
    file = str(path / "dataset.json")
    with pytest.raises(CorruptDatasetError, match=f"{file}: frame_stack"):
        load_dataset("fs/layout-v0", root=tmp_path)
    with pytest.raises(CorruptDatasetError, match=f"{file}: frame_stack"):
        EpisodeStore.open("fs/layout-v0", root=tmp_path)


def test_the_frame_stack_lives_in_the_shards_and_an_edited_one_is_refused(tmp_path: Path) -> None:
    import json

    import h5py

    from vcollect.errors import CorruptDatasetError
    from vcollect.spaces import space_to_dict

    path = _small_stacked_dataset(tmp_path)
    (shard,) = sorted((path / "shards").glob("*.h5"))
    with h5py.File(shard) as f:
        layout = json.loads(f.attrs["layout"])
    assert layout["frame_stack"] == {"k": 4, "padding": "reset"} and layout["compression"] == "auto"
    assert layout["observations"] == [["", "|u1", [4, 6, 5]]] and layout["actions"] == [["", "<i8", []]]
    info = json.loads((path / "dataset.json").read_text())
    info["frame_stack"]["padding"] = "zero"  # would silently rebuild other stacks
    (path / "dataset.json").write_text(json.dumps(info))
    with pytest.raises(CorruptDatasetError, match="disagrees with the layout all 1 shard.*frame_stack: shard"):
        load_dataset("fs/layout-v0", root=tmp_path)
    info["frame_stack"] = {"k": 2, "padding": "reset"}  # k edited with a space that fits it
    info["observation_space"] = space_to_dict(gym.spaces.Box(0, 255, (2, 6, 5), np.uint8))
    (path / "dataset.json").write_text(json.dumps(info))
    with pytest.raises(CorruptDatasetError, match="dataset.json was changed after they were written"):
        load_dataset("fs/layout-v0", root=tmp_path)
