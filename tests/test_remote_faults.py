"""Remote storage faults against real local servers: each a specific error, nothing published half, and a
resume after a server killed mid-transfer gives the exact dataset."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs
from remote_servers import S3_OPTIONS, CutProxy, gcs_server_fixture, remote_url, s3_server_fixture  # noqa: F401 - fixtures
from small_datasets import make_dataset

import vcollect
from vcollect.errors import (
    BucketNotFoundError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteAccessError,
    RemoteDatasetNotFoundError,
    RemoteIntegrityError,
    RemoteTransferError,
    UnknownRemoteError,
)
from vcollect.remote import list_remote_datasets, transfer
from vcollect.store import EpisodeStore, load_dataset

ID = "f/data-v0"


def episodes(dataset: Any) -> list[tuple[Any, ...]]:
    return [(e.observations.tobytes(), e.actions.tobytes(), e.rewards.tobytes()) for e in dataset.iterate_episodes()]


@pytest.fixture
def uploaded(s3_server: Any, tmp_path: Path) -> tuple[str, Path]:
    url = remote_url("s3", s3_server, None, tmp_path)
    make_dataset(tmp_path / "src", ID, [30, 31, 32, 33, 34, 35], episodes_per_shard=2)
    vcollect.upload_dataset(ID, url, root=tmp_path / "src")
    return url, tmp_path / "src"


def test_bad_remotes_and_ids(s3_server: Any, gcs_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UnknownRemoteError, match="unknown scheme 'ftp'"):
        list_remote_datasets("ftp://host/x")
    monkeypatch.delenv("VCOLLECT_REMOTE", raising=False)
    with pytest.raises(UnknownRemoteError, match="VCOLLECT_REMOTE"):
        vcollect.download_dataset(ID)
    for url in ("s3://no-such-bucket-here/p", "gs://no-such-bucket-here", f"file://{tmp_path}/absent"):
        with pytest.raises(BucketNotFoundError, match="does not exist"):
            vcollect.download_dataset(ID, url, root=tmp_path / "dst")
        with pytest.raises(BucketNotFoundError):
            list_remote_datasets(url)
    url = remote_url("gs", None, gcs_server, tmp_path)
    with pytest.raises(RemoteDatasetNotFoundError, match=f"no dataset '{ID}' on remote"):
        vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    for bad in ("../escape-v0", "/abs/x-v0", "a/../../x-v0"):
        with pytest.raises(InvalidDatasetIdError):
            vcollect.download_dataset(bad, url, root=tmp_path / "dst")
    with pytest.raises(DatasetNotFoundError):
        vcollect.upload_dataset("not/here-v0", url, root=tmp_path / "dst")
    assert not (tmp_path / "dst").exists() or not any((tmp_path / "dst").rglob("*.h5"))


def test_no_credentials_is_an_access_error(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(RemoteAccessError, match="no credentials"):
        list_remote_datasets(url, storage_options=S3_OPTIONS)


def _object(url: str, *parts: str) -> str:
    return "/".join([url.removeprefix("s3://"), *parts])


@pytest.mark.parametrize("damage", ["tampered", "truncated", "extended"])
def test_altered_remote_shard_is_refused_and_named(uploaded: tuple[str, Path], tmp_path: Path, damage: str) -> None:
    url, _ = uploaded
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    shard = sorted(fs.ls(_object(url, ID, "shards")))[1]
    data = bytearray(fs.cat_file(shard))
    if damage == "tampered":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncated":
        del data[-100:]
    else:
        data += b"\0" * 100
    fs.pipe_file(shard, bytes(data))
    with pytest.raises(RemoteIntegrityError, match=shard.rsplit("/", 1)[-1]):
        vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    assert not (tmp_path / "dst" / "f" / "data-v0").exists()  # nothing published


@pytest.fixture
def s3_proxy(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[CutProxy]:
    """The S3 server reached through a CutProxy (AWS_ENDPOINT_URL points at it for the test)."""
    proxy = CutProxy(s3_server.port)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    yield proxy
    proxy.close()


class KillAfter:
    """A TransferProgress that has the server cut off once ``limit`` bytes of its responses have passed after
    the download announced its shards (in the middle of a shard's response)."""

    def __init__(self, proxy: CutProxy, limit: int) -> None:
        self.proxy, self.limit, self.total = proxy, limit, 0

    def add_total(self, files: int, nbytes: int) -> None:
        self.total = nbytes
        self.proxy.cut_after(self.limit)

    def advance(self, nbytes: int) -> None:
        pass

    def file_done(self) -> None:
        pass


def test_server_killed_mid_download_then_resume_is_exact(
    s3_proxy: CutProxy, uploaded: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, src = uploaded
    monkeypatch.setattr(transfer, "CHUNK_BYTES", 4096)  # the resumed shards take several ranged reads each
    kill = KillAfter(s3_proxy, 20_000)  # the shards' responses: 3 of ~13.5 kB, fetched at once
    try:
        with pytest.raises(RemoteTransferError, match="run it again to resume"):
            vcollect.download_dataset(ID, url, root=tmp_path / "dst", progress=kill, storage_options=S3_OPTIONS)
    finally:
        s3_proxy.restore()
    assert s3_proxy.cuts == 1 and not (tmp_path / "dst" / "f" / "data-v0").exists()
    resumed = vcollect.download_dataset(ID, url, root=tmp_path / "dst", storage_options=S3_OPTIONS)
    assert 0 < resumed.bytes <= kill.total - 10_000 + 4096  # what the first run fetched was kept
    copy = load_dataset(ID, tmp_path / "dst")
    assert episodes(copy) == episodes(load_dataset(ID, src)) and copy.verify() == []


def test_server_killed_mid_upload_then_resume_is_exact(s3_server: Any, tmp_path: Path) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    make_dataset(tmp_path / "src", ID, [30, 31, 32, 33, 34, 35], episodes_per_shard=2)

    class KillOnSecondFile:
        files = 0

        def add_total(self, files: int, nbytes: int) -> None:
            pass

        def advance(self, nbytes: int) -> None:
            pass

        def file_done(self) -> None:
            self.files += 1
            if self.files == 2:
                s3_server.stop()

    try:
        with pytest.raises(RemoteTransferError):
            vcollect.upload_dataset(ID, url, root=tmp_path / "src", progress=KillOnSecondFile(),
                                    storage_options=S3_OPTIONS)
    finally:
        s3_server.restart()
    assert ID not in list_remote_datasets(url)  # no dataset.json yet: readers see nothing half
    resumed = vcollect.upload_dataset(ID, url, root=tmp_path / "src")
    assert (resumed.shards, resumed.shards_kept) == (1, 2)
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    assert episodes(load_dataset(ID, tmp_path / "dst")) == episodes(load_dataset(ID, tmp_path / "src"))


def test_crafted_manifest_cannot_write_outside_the_root(uploaded: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = uploaded
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    manifest = fs.ls(_object(url, ID, "manifest"))[0]
    line = fs.cat_file(manifest).split(b"\n")[0]
    evil = line.replace(line.split(b'"shard":"')[1].split(b'"')[0], b"../../../../evil.h5")
    fs.pipe_file(manifest, fs.cat_file(manifest) + evil + b"\n")
    fs.pipe_file(_object(url, ID, "shards", "../../../../evil.h5"), b"x")
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    assert not list(tmp_path.rglob("evil.h5"))
    assert load_dataset(ID, tmp_path / "dst").total_episodes == 6


def test_two_uploads_at_once_leave_one_whole_dataset(s3_server: Any, tmp_path: Path) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    make_dataset(tmp_path / "src", ID, [20] * 8, episodes_per_shard=2)
    errors: list[BaseException] = []

    def upload() -> None:
        try:
            vcollect.upload_dataset(ID, url, root=tmp_path / "src")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=upload) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    copy = load_dataset(ID, tmp_path / "dst")
    assert episodes(copy) == episodes(load_dataset(ID, tmp_path / "src")) and copy.verify() == []


def test_upload_while_a_writer_appends_sends_only_committed_shards(s3_server: Any, tmp_path: Path) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    make_dataset(tmp_path / "src", ID, [10, 11, 12, 13], episodes_per_shard=2)
    store = EpisodeStore.open(ID, root=tmp_path / "src")
    rng = np.random.default_rng(0)

    def write_episode() -> None:
        store.write_episode(rng.uniform(-1, 1, (6, 3)).astype(np.float32), rng.integers(0, 2, 5), np.ones(5),
                            np.eye(1, 5, 4, dtype=bool)[0], np.zeros(5, dtype=bool), seed=1, env_id=0)

    class CommitDuringUpload:
        def add_total(self, files: int, nbytes: int) -> None:
            pass

        def advance(self, nbytes: int) -> None:
            pass

        def file_done(self) -> None:
            write_episode()  # one pending episode, then a commit: the writer goes on meanwhile
            store.flush()

    write_episode()  # pending, not committed: never uploaded
    sent = vcollect.upload_dataset(ID, url, root=tmp_path / "src", progress=CommitDuringUpload())
    assert sent.shards == 2
    assert list_remote_datasets(url)[ID]["total_episodes"] == 4
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    copy = load_dataset(ID, tmp_path / "dst")
    assert copy.total_episodes == 4 and copy.verify() == []
    store.close()
    assert vcollect.upload_dataset(ID, url, root=tmp_path / "src").shards == 2  # the two committed meanwhile
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    assert episodes(load_dataset(ID, tmp_path / "dst")) == episodes(load_dataset(ID, tmp_path / "src"))


_FULL_DISK = """
import resource, signal, sys
from vcollect.errors import DiskFullError
import vcollect
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), int(sys.argv[3])))
try:
    vcollect.download_dataset(sys.argv[1], sys.argv[2], root=sys.argv[4])
except DiskFullError as exc:
    print("DiskFullError:", exc)
    sys.exit(3)
"""


def test_disk_full_during_download_publishes_nothing_and_resumes(
    uploaded: tuple[str, Path], tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    url, src = uploaded
    dst = tmp_path / "dst"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    shard = min(p.stat().st_size for p in (src / "f" / "data-v0" / "shards").iterdir())
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, ID, url, str(shard // 2), str(dst)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "free space and run it again to resume" in done.stdout
    assert not (dst / "f" / "data-v0").exists()  # nothing published
    vcollect.download_dataset(ID, url, root=dst)
    assert episodes(load_dataset(ID, dst)) == episodes(load_dataset(ID, src))
