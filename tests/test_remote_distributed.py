"""Collection straight to a remote: Ray workers each write a dataset of their own and upload every shard
they commit (moto's S3 server); the driver publishes the dataset's metadata at the end."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from remote_servers import remote_url, s3_server_fixture  # noqa: F401 - fixtures

import vcollect
from tests.envs import CountingEnv
from vcollect.distributed import DistributedCollector
from vcollect.remote import list_remote_datasets
from vcollect.store import EpisodeStore, load_dataset

ID = "test/remote-counting-v0"


def test_workers_upload_their_shards_and_the_driver_publishes_at_the_end(
    ray_local: Any, s3_server: Any, tmp_path: Path
) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    options = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "key": "testing", "secret": "testing"}
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
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    ds = load_dataset(ID, tmp_path / "dst")
    assert ds.total_episodes == episodes and ds.total_steps == int(first.lens.sum() + second.lens.sum())
    assert set(np.unique([ep.env_id for ep in ds]).tolist()) == {0, 1, 2, 3}
    assert ds.verify() == []


def test_remote_needs_a_store() -> None:
    with pytest.raises(ValueError, match="remote= needs store="):
        DistributedCollector(CountingEnv, None, num_workers=1, envs_per_worker=1, remote="file:///tmp")
