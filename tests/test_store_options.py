"""StoreOptions: one object for how a store writes, reaching the store on every entry point (create/open and
their staging-folder forms, the CLI's flags, a DistributedCollector's real Ray workers); keywords override its
fields, and a keyword that is no field is refused by name."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import numpy as np
import pytest

from vcollect.cli import main
from vcollect.store import EpisodeStore, StoreOptions, dataset_path, load_dataset

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def write_one(store: EpisodeStore, steps: int = 4) -> None:
    store.write_episode(np.zeros((steps + 1, 3), np.float32), np.zeros(steps, np.int64), np.ones(steps),
                        np.zeros(steps, bool), np.ones(steps, bool), seed=0, env_id=0)


def test_create_and_open_take_options_and_keywords_override_them(tmp_path: Path) -> None:
    options = StoreOptions(shard_steps=4, compression="gzip", background_commits=True)
    with EpisodeStore.create("opt/a-v0", OBS, ACT, root=tmp_path, options=options) as store:
        assert store.options == options
        assert (store.shard_steps, store.compression, store.env_id_offset) == (4, "gzip", 0)
        write_one(store)  # 4 steps pending: shard_steps from the options commits a shard
        store.flush()
        assert len(store.shards_written) == 1
        with h5py.File(store.shards_written[0], "r") as f:
            assert f["rewards"].compression == "gzip"
    with EpisodeStore.open("opt/a-v0", tmp_path, options=options, env_id_offset=5, shard_steps=100) as store:
        assert store.options == StoreOptions(shard_steps=100, compression="gzip", background_commits=True,
                                             env_id_offset=5)
        assert options.shard_steps == 4  # the caller's object is not changed
        write_one(store)
        assert store.pending_episodes == 1  # 4 < 100 steps: nothing committed yet
    assert [e.env_id for e in load_dataset("opt/a-v0", tmp_path)] == [0, 5]
    # keywords alone, as before; defaults without any
    with EpisodeStore.open("opt/a-v0", tmp_path, shard_steps=7, compression=None) as store:
        assert store.options == StoreOptions(shard_steps=7, compression="none")
    path = dataset_path("opt/a-v0", tmp_path)
    with EpisodeStore.open_at(path, "opt/a-v0", tmp_path, options=options) as store:
        assert store.options == options
    with EpisodeStore.create_at(tmp_path / "staged", "opt/b-v0", OBS, ACT, options=options,
                                background_commits=False) as store:
        assert store.options == StoreOptions(shard_steps=4, compression="gzip")


def test_unknown_keywords_and_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"EpisodeStore\.create\(\) got unexpected keyword argument 'shard_step'"):
        EpisodeStore.create("opt/a-v0", OBS, ACT, root=tmp_path, shard_step=5)
    assert not dataset_path("opt/a-v0", tmp_path).exists()
    EpisodeStore.create("opt/a-v0", OBS, ACT, root=tmp_path).close()
    with pytest.raises(TypeError, match=r"EpisodeStore\.open\(\) got unexpected keyword arguments 'validate', 'x'"):
        EpisodeStore.open("opt/a-v0", tmp_path, validate=True, x=1)
    with pytest.raises(TypeError, match="options must be a StoreOptions, got dict"):
        EpisodeStore.open("opt/a-v0", tmp_path, options={"shard_steps": 5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"EpisodeStore\.open_at\(\) got unexpected keyword argument 'comp'"):
        EpisodeStore.open_at(dataset_path("opt/a-v0", tmp_path), "opt/a-v0", tmp_path, comp="gzip")
    for bad, message in (({"shard_steps": 0}, "shard_steps must be >= 1"), ({"shard_bytes": 0}, "shard_bytes must be"),
                         ({"env_id_offset": -1}, "env_id_offset must be an integer >= 0"),
                         ({"compression": "brotli"}, "unknown compression")):
        with pytest.raises(ValueError, match=message):
            StoreOptions(**bad)
        with pytest.raises(ValueError, match=message):
            EpisodeStore.open("opt/a-v0", tmp_path, **bad)
    with pytest.raises(AttributeError):
        StoreOptions().shard_steps = 3  # type: ignore[misc]  # frozen


def test_cli_flags_reach_the_store_as_one_store_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path))
    made: list[StoreOptions] = []
    init = EpisodeStore.__init__

    def spied(self: EpisodeStore, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self.options)

    monkeypatch.setattr(EpisodeStore, "__init__", spied)
    run = ["collect", "CartPole-v1", "--num-envs", "2", "--episodes", "2", "--seed", "0", "--dataset", "cli/opt-v0",
           "--shard-steps", "7", "--compression", "gzip", "--no-progress"]
    assert main(run) == 0
    assert main([*run, "--append"]) == 0
    expected = StoreOptions(shard_steps=7, compression="gzip", background_commits=True)
    assert made == [expected, expected]  # created, then opened for --append


def test_cli_ray_workers_get_the_flags_store_options(ray_local: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from vcollect.distributed import DistributedCollector

    monkeypatch.setenv("VCOLLECT_DATASETS_PATH", str(tmp_path))
    given: list[Any] = []
    init = DistributedCollector.__init__

    def spied(self: DistributedCollector, *args: Any, **kwargs: Any) -> None:
        given.append((kwargs.get("store_options"), kwargs.get("store_kwargs")))
        init(self, *args, **kwargs)

    monkeypatch.setattr(DistributedCollector, "__init__", spied)
    assert main(["collect", "CartPole-v1", "--ray-workers", "1", "--num-envs", "1", "--episodes", "1", "--seed", "0",
                 "--dataset", "cli/ray-opt-v0", "--shard-steps", "11", "--compression", "lzf", "--no-progress"]) == 0
    assert given == [(StoreOptions(shard_steps=11, compression="lzf", background_commits=True), None)]
    shards = sorted((dataset_path("cli/ray-opt-v0", tmp_path) / "shards").glob("*.h5"))
    assert shards
    for shard in shards:
        with h5py.File(shard, "r") as f:
            assert f["rewards"].compression == "lzf"


def _writer_options(worker: Any) -> StoreOptions:
    """The options of a worker actor's own EpisodeStore (run inside the actor by __ray_call__)."""
    return worker.writer.options


def _sink_options(actor: Any) -> list[StoreOptions]:
    """The options of the object-store writer actor's EpisodeStores, one per worker (run inside the actor)."""
    return [store.options for store in actor._stores.values()]


@pytest.mark.parametrize("transport", ["shared_fs", "object_store"])
def test_distributed_workers_write_with_the_store_options(ray_local: Any, tmp_path: Path, transport: str) -> None:
    from vcollect.distributed import DistributedCollector

    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    env = gym.make("CartPole-v1")
    EpisodeStore.create("ray/opt-v0", env.observation_space, env.action_space, root=tmp_path).close()
    env.close()
    options = StoreOptions(shard_steps=9, compression="gzip", background_commits=True)
    with pytest.raises(ValueError, match="store_options cannot set env_id_offset"):
        DistributedCollector("CartPole-v1", None, num_workers=1, envs_per_worker=1, store="ray/opt-v0",
                             root=tmp_path, store_options=StoreOptions(env_id_offset=1))
    with pytest.raises(TypeError, match="store_kwargs got unexpected keyword argument 'shards'"):
        DistributedCollector("CartPole-v1", None, num_workers=1, envs_per_worker=1, store="ray/opt-v0",
                             root=tmp_path, store_kwargs={"shards": 3})
    with DistributedCollector("CartPole-v1", None, num_workers=2, envs_per_worker=2, store="ray/opt-v0",
                              root=tmp_path, seed=0, transport=transport, store_options=options,
                              store_kwargs={"shard_bytes": 2**20}) as dc:
        dc.collect(n_episode=4, random=True)
        if transport == "shared_fs":
            seen = [ray_local.get(worker.__ray_call__.remote(_writer_options)) for worker in dc.workers]
        else:
            seen = sorted(ray_local.get(dc._sink.__ray_call__.remote(_sink_options)), key=lambda o: o.env_id_offset)
    assert seen == [StoreOptions(shard_steps=9, shard_bytes=2**20, compression="gzip", background_commits=True,
                                 env_id_offset=offset) for offset in (0, 2)]
    shards = sorted((dataset_path("ray/opt-v0", tmp_path) / "shards").glob("*.h5"))
    assert shards
    for shard in shards:
        with h5py.File(shard, "r") as f:
            assert f["rewards"].compression == "gzip"
