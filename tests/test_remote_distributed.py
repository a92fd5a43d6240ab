"""Collection straight to a remote: Ray workers each write a dataset of their own and upload every shard
they commit (moto's S3 server); the driver publishes the dataset's metadata at the end."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from remote_servers import block_lists_and_shards, remote_url, s3_server_fixture  # noqa: F401 - fixtures

import vcollect
from tests.envs import CountingEnv, ExitOnceEnv
from vcollect.distributed import DistributedCollector
from vcollect.remote import list_remote_datasets
from vcollect.store import EpisodeStore, load_dataset

ID = "test/remote-counting-v0"


@pytest.fixture
def ray_ready(ray_local: Any) -> Any:
    """The session's Ray, with this module sent to workers by value (they cannot import it by name)."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_local


def s3_options() -> dict[str, Any]:
    """What the workers' client needs to reach the test server (Ray's workers predate its variables)."""
    return {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "key": "testing", "secret": "testing"}


def test_workers_upload_their_shards_and_the_driver_publishes_at_the_end(
    ray_ready: Any, s3_server: Any, tmp_path: Path
) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    options = s3_options()
    driver_root = tmp_path / "driver"
    EpisodeStore.create(ID, CountingEnv().observation_space, CountingEnv().action_space, root=driver_root).close()
    with DistributedCollector(
        CountingEnv, None, num_workers=2, envs_per_worker=2, store=ID, root=driver_root, seed=1,
        env_kwargs={"episode_length": 5}, flush_every_call=True, remote=url, remote_options=options,
    ) as dc:
        first = dc.collect(n_step=23, random=True)
        second = dc.collect(n_episode=6, random=True)
        assert ID not in list_remote_datasets(url)  # no metadata yet: readers see nothing half
    assert not list((driver_root / "test" / "remote-counting-v0" / "shards").iterdir())  # no shared filesystem
    listed = list_remote_datasets(url)[ID]
    episodes = first.n_collected_episodes + second.n_collected_episodes
    assert listed["total_episodes"] == episodes
    lists, shards = block_lists_and_shards(url, ID)
    assert lists == shards  # each worker's upload wrote its shards' block lists
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    ds = load_dataset(ID, tmp_path / "dst")
    assert ds.total_episodes == episodes and ds.total_steps == int(first.lens.sum() + second.lens.sum())
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False)  # read in place, block by block
    rows = np.arange(ds.total_steps)
    for key, value in ds.steps_at(rows, cache_bytes=0).items():
        np.testing.assert_array_equal(streamed.steps_at(rows, cache_bytes=0)[key], value, err_msg=key)
    assert set(np.unique([ep.env_id for ep in ds]).tolist()) == {0, 1, 2, 3}
    assert ds.verify() == []


@pytest.mark.slow  # starts, kills and replaces real Ray actors
def test_a_dying_worker_leaves_whole_shards_and_totals_stay_exact(
    ray_ready: Any, s3_server: Any, tmp_path: Path
) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    driver_root = tmp_path / "driver"
    EpisodeStore.create(ID, CountingEnv().observation_space, CountingEnv().action_space, root=driver_root).close()
    with DistributedCollector(
        ExitOnceEnv, None, num_workers=2, envs_per_worker=2, store=ID, root=driver_root, seed=0,
        env_kwargs={"flag": str(tmp_path / "fault"), "at": 100, "episode_length": 2},
        store_kwargs={"shard_steps": 10}, max_worker_restarts=1, unfinished="truncate",
        remote=url, remote_options=s3_options(),
    ) as dc:
        first = dc.collect(n_step=22, random=True)
        stats = dc.collect(n_step=400, random=True)  # one env's process exits at its 100th step
        assert stats.n_collected_steps == 400 and sum(dc.restarts) == 1
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    final = load_dataset(ID, tmp_path / "dst")
    # every reported step is stored once: what the dead worker uploaded counted, the rest collected again
    assert final.total_steps == first.n_collected_steps + 400
    assert final.verify() == []


def test_remote_needs_a_store() -> None:
    with pytest.raises(ValueError, match="remote= needs store="):
        DistributedCollector(CountingEnv, None, num_workers=1, envs_per_worker=1, remote="file:///tmp")


def test_cli_collect_on_ray_workers_to_a_remote(ray_ready: Any, tmp_path: Path) -> None:
    from vcollect.cli import main

    url = remote_url("file", None, None, tmp_path)  # the session's Ray workers predate the S3 server's variables
    assert main(["collect", "CartPole-v1", "--num-envs", "2", "--episodes", "6", "--dataset", ID, "--root",
                 str(tmp_path / "driver"), "--ray-workers", "2", "--remote", url, "--no-progress"]) == 0
    assert main(["collect", "CartPole-v1", "--episodes", "2", "--remote", url]) == 2  # without --ray-workers
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    assert load_dataset(ID, tmp_path / "dst").total_episodes == 6
    lists, shards = block_lists_and_shards(url, ID)
    assert lists == shards  # `vcollect collect --ray-workers --remote`: block lists beside every shard
