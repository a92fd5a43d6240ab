"""Remote datasets end to end against real local servers (moto's S3, the GCS emulator) and a shared folder:
upload, listing, download, incremental transfers both ways, namespaces, load_dataset(download=True), CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from remote_servers import (  # noqa: F401 - fixtures
    block_lists_and_shards,
    gcs_server_fixture,
    remote_url,
    s3_server_fixture,
)
from small_datasets import ACT_SPACE, OBS_SPACE, make_dataset

import vcollect
from vcollect.cli import main
from vcollect.remote import TransferReport, list_remote_datasets
from vcollect.store import create_namespace, get_namespace_metadata, load_dataset

KINDS = ["s3", "gs", "file"]
ID = "team/walk-v0"


@pytest.fixture(params=KINDS)
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    gcs = request.getfixturevalue("gcs_server") if request.param == "gs" else None
    return remote_url(request.param, s3, gcs, tmp_path)


def episodes(dataset: Any) -> list[tuple[Any, ...]]:
    return [(e.observations.tobytes(), e.actions.tobytes(), e.rewards.tobytes(), e.seed)
            for e in dataset.iterate_episodes()]


class Counting:
    """A TransferProgress that counts what it is told."""

    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0
        self.total_bytes = 0

    def add_total(self, files: int, nbytes: int) -> None:
        self.total_bytes += nbytes

    def advance(self, nbytes: int) -> None:
        self.bytes += nbytes

    def file_done(self) -> None:
        self.files += 1


def test_round_trip_is_exact_and_incremental_both_ways(remote: str, tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    create_namespace("team", root=here, description="the team's runs")
    make_dataset(here, ID, [5, 6, 7, 8, 9], episodes_per_shard=2, metadata={"author": "ann"})
    progress = Counting()
    sent = vcollect.upload_dataset(ID, remote, root=here, progress=progress)
    assert (sent.shards, sent.shards_kept) == (3, 0)
    assert progress.files == 3 and progress.bytes == progress.total_bytes > 0
    listed = list_remote_datasets(remote)
    local = vcollect.list_datasets(here)[ID]
    assert list(listed) == [ID]
    for key in ("total_episodes", "total_steps", "num_shards", "author"):
        assert listed[ID][key] == local[key], key
    assert vcollect.upload_dataset(ID, remote, root=here).shards == 0  # nothing new: no shard sent again

    got = vcollect.download_dataset(ID, remote, root=there)
    assert (got.shards, got.shards_kept) == (3, 0)
    copy = load_dataset(ID, there)
    assert episodes(copy) == episodes(load_dataset(ID, here))
    assert copy.verify() == []
    assert get_namespace_metadata("team", there)["description"] == "the team's runs"

    make_dataset_more(here)  # the dataset grows by one shard: only that shard travels, each way
    again = vcollect.upload_dataset(ID, remote, root=here)
    assert (again.shards, again.shards_kept) == (1, 3)
    fetched = vcollect.download_dataset(ID, remote, root=there)
    assert (fetched.shards, fetched.shards_kept) == (1, 3)
    assert episodes(load_dataset(ID, there)) == episodes(load_dataset(ID, here))
    assert vcollect.download_dataset(ID, remote, root=there).shards == 0
    assert not list((there / "team").glob(".*"))  # no staging or resume folder left


def make_dataset_more(root: Path) -> None:
    store = vcollect.EpisodeStore.open(ID, root=root)
    rng = np.random.default_rng(7)
    store.write_episode(rng.uniform(-1, 1, (5, 3)).astype(np.float32), rng.integers(0, 2, 4), np.ones(4),
                        np.eye(1, 4, 3, dtype=bool)[0], np.zeros(4, dtype=bool), seed=1, env_id=0)
    store.close()


def test_load_dataset_downloads_what_is_not_here(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    make_dataset(tmp_path / "a", ID, [4, 4, 4])
    vcollect.upload_dataset(ID, url, root=tmp_path / "a")
    monkeypatch.setenv("VCOLLECT_REMOTE", url)
    with pytest.raises(vcollect.errors.DatasetNotFoundError):
        vcollect.load_dataset(ID, tmp_path / "b")
    loaded = vcollect.load_dataset(ID, tmp_path / "b", download=True)
    assert episodes(loaded) == episodes(load_dataset(ID, tmp_path / "a"))


def test_cli_list_remote_download_upload(s3_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    make_dataset(tmp_path / "a", ID, [4, 5, 6], metadata={"author": "bo"})
    make_dataset(tmp_path / "a", "other/x-v1", [3])
    assert main(["upload", ID, "other/x-v1", "--remote", url, "--root", str(tmp_path / "a"), "--no-progress"]) == 0
    lists, shards = block_lists_and_shards(url, ID)
    assert lists == shards  # the CLI's upload writes every shard's block list (reads in place by ranges)
    capsys.readouterr()
    assert main(["list", "remote", "--remote", url, "--namespace", "team"]) == 0
    out = capsys.readouterr().out
    assert ID in out and "other/x-v1" not in out and "bo" in out and " 15 " in out  # 15 steps
    assert main(["list", "remote", "--remote", url, "--anonymous"]) == 0  # unsigned requests (a public bucket)
    assert ID in capsys.readouterr().out
    assert main(["download", "--namespace", "team", "--remote", url, "--root", str(tmp_path / "b")]) == 0
    assert episodes(load_dataset(ID, tmp_path / "b")) == episodes(load_dataset(ID, tmp_path / "a"))
    assert not (tmp_path / "b" / "other").exists()
    assert main(["verify", ID, "--root", str(tmp_path / "b")]) == 0  # a downloaded dataset verifies as any other
    capsys.readouterr()
    assert main(["download", "team/none-v0", "--remote", url, "--root", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no dataset 'team/none-v0'" in err


def test_report_type() -> None:
    assert TransferReport("a-v0").bytes == 0


def test_reading_in_place_fetches_only_the_shards_touched(s3_server: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    store = vcollect.EpisodeStore.create(ID, OBS_SPACE, ACT_SPACE, root=tmp_path / "a")
    rng = np.random.default_rng(3)
    for steps in [10, 11, 12, 13, 14, 15]:  # one shard each, no option or metadata tables
        store.write_episode(rng.uniform(-1, 1, (steps + 1, 3)).astype(np.float32), rng.integers(0, 2, steps),
                            np.ones(steps), np.eye(1, steps, steps - 1, dtype=bool)[0], np.zeros(steps, dtype=bool),
                            seed=steps, env_id=0)
        store.flush()
    store.close()
    vcollect.upload_dataset(ID, url, root=tmp_path / "a")
    monkeypatch.setenv("VCOLLECT_CACHE", str(tmp_path / "cache"))
    local = load_dataset(ID, tmp_path / "a")
    remote_ds = vcollect.load_dataset(f"{url}/{ID}", prefetch=False)
    cache = remote_ds._index.files.before_open  # noqa: SLF001 - the hook's own counters
    assert remote_ds.total_episodes == 6 and cache.fetched_bytes == 0  # opened from metadata alone
    shard_size = max(line.size for line in cache.lines.values())
    first = remote_ds[2]
    np.testing.assert_array_equal(first.observations, local[2].observations)
    assert 0 < cache.fetched_bytes <= shard_size  # one shard, no more
    streamed = vcollect.load_dataset(ID, remote=url, stream=True, cache_bytes=2 * shard_size)
    assert episodes(streamed) == episodes(local)  # every shard through a cache of two
    hook = streamed._index.files.before_open  # noqa: SLF001
    assert hook.held_bytes() <= 2 * shard_size
    batch = streamed.sample_steps(16)
    assert batch["observations"].shape == (16, 3)
