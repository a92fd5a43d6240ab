"""Resuming and sharing fetches against real local servers: the GCS emulator cut off mid-download and
mid-upload (then the exact dataset), a partly fetched object continued by ranged reads on S3 and GCS, two
processes fetching one object into one folder, and an interrupted download's leftovers kept out of the
namespaces, and what killed downloads left removed once no download holds it (a running one's and a recent
one's kept)."""

from __future__ import annotations

import hashlib
import os
import select
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gcsfs.retry
import pytest
from remote_servers import CutProxy, gcs_server_fixture, remote_url, s3_server_fixture  # noqa: F401 - fixtures
from small_datasets import make_dataset

import vcollect
from vcollect.errors import RemoteIntegrityError, RemoteTransferError
from vcollect.remote import download, list_remote_datasets, open_remote, resume, transfer
from vcollect.remote.transfer import NoProgress
from vcollect.store import (
    create_namespace,
    delete_dataset,
    delete_namespace,
    list_local_namespaces,
    load_dataset,
)

ID = "f/data-v0"
LENGTHS = [30, 31, 32, 33, 34, 35]  # 3 shards of ~13.5 kB


def episodes(dataset: Any) -> list[tuple[Any, ...]]:
    return [(e.observations.tobytes(), e.actions.tobytes(), e.rewards.tobytes()) for e in dataset.iterate_episodes()]


async def _no_wait(_: float) -> None:
    return None


@pytest.fixture
def gcs_proxy(gcs_server: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[CutProxy]:
    """The GCS emulator reached through a CutProxy (STORAGE_EMULATOR_HOST points at it for the test). gcsfs
    backs off ~30 s between its retries and takes no setting for it, so its backoff runs without the waits
    here (the retries themselves still run, against a server that is gone)."""
    proxy = CutProxy(gcs_server.port)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setattr(gcsfs.retry, "asyncio", types.SimpleNamespace(sleep=_no_wait))
    yield proxy
    proxy.close()


class CutAfter:
    """A TransferProgress that has the server cut off once ``limit`` bytes of its responses have passed after
    the download announced its shards, or when the ``on_file``-th file is done."""

    def __init__(self, proxy: CutProxy, limit: int | None = None, on_file: int | None = None) -> None:
        self.proxy, self.limit, self.on_file, self.total, self.files = proxy, limit, on_file, 0, 0

    def add_total(self, files: int, nbytes: int) -> None:
        self.total = nbytes
        if self.limit is not None:
            self.proxy.cut_after(self.limit)

    def advance(self, nbytes: int) -> None:
        pass

    def file_done(self) -> None:
        self.files += 1
        if self.files == self.on_file:
            self.proxy.cut()


def test_gcs_server_killed_mid_download_then_resume_is_exact(
    gcs_server: Any, gcs_proxy: CutProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = remote_url("gs", None, gcs_server, tmp_path)
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_dataset(src, ID, LENGTHS, episodes_per_shard=2)
    vcollect.upload_dataset(ID, url, root=src)
    monkeypatch.setattr(download, "FETCH_THREADS", 1)  # one shard at a time: the cut lands in the second
    cut = CutAfter(gcs_proxy, limit=20_000)
    try:
        with pytest.raises(RemoteTransferError, match="run it again to resume"):
            vcollect.download_dataset(ID, url, root=dst, progress=cut)
    finally:
        gcs_proxy.restore()
    assert gcs_proxy.cuts == 1 and not (dst / "f" / "data-v0").exists()  # nothing published
    resumed = vcollect.download_dataset(ID, url, root=dst)
    first_shard = min(p.stat().st_size for p in (src / "f" / "data-v0" / "shards").iterdir())
    assert 0 < resumed.bytes <= cut.total - first_shard  # the shard fetched before the cut was kept
    copy = load_dataset(ID, dst)
    assert episodes(copy) == episodes(load_dataset(ID, src)) and copy.verify() == []
    assert not (dst / resume.RESUME_DIR).exists()  # the resume folder went with the publish


def test_gcs_server_killed_mid_upload_then_resume_is_exact(
    gcs_server: Any, gcs_proxy: CutProxy, tmp_path: Path
) -> None:
    url = remote_url("gs", None, gcs_server, tmp_path)
    make_dataset(tmp_path / "src", ID, LENGTHS, episodes_per_shard=2)
    try:
        with pytest.raises(RemoteTransferError):
            vcollect.upload_dataset(ID, url, root=tmp_path / "src", progress=CutAfter(gcs_proxy, on_file=2))
    finally:
        gcs_proxy.restore()
    assert gcs_proxy.cuts == 1 and ID not in list_remote_datasets(url)  # no dataset.json yet
    resumed = vcollect.upload_dataset(ID, url, root=tmp_path / "src")
    assert (resumed.shards, resumed.shards_kept) == (1, 2)
    vcollect.download_dataset(ID, url, root=tmp_path / "dst")
    assert episodes(load_dataset(ID, tmp_path / "dst")) == episodes(load_dataset(ID, tmp_path / "src"))


@pytest.fixture(params=["s3", "gs"])
def shard_object(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Any, str, bytes]:
    """(the remote, the path of one uploaded shard object on it, its bytes)."""
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    gcs = request.getfixturevalue("gcs_server") if request.param == "gs" else None
    url = remote_url(request.param, s3, gcs, tmp_path)
    make_dataset(tmp_path / "src", ID, LENGTHS, episodes_per_shard=2)
    vcollect.upload_dataset(ID, url, root=tmp_path / "src")
    shard = sorted((tmp_path / "src" / "f" / "data-v0" / "shards").iterdir())[0]
    remote = open_remote(url)
    return remote, remote.path(ID, "shards", shard.name), shard.read_bytes()


def test_a_partly_fetched_object_is_continued_by_ranged_reads(
    shard_object: tuple[Any, str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, path, data = shard_object
    monkeypatch.setattr(transfer, "CHUNK_BYTES", 1000)  # several ranged reads
    sha = hashlib.sha256(data).hexdigest()
    final = tmp_path / "got.h5"
    part = final.with_name(final.name + transfer.PART_SUFFIX)
    part.write_bytes(data[:5000])
    fetched = transfer.fetch_object(remote, path, final, size=len(data), sha256=sha, progress=NoProgress(), what="x")
    assert fetched == len(data) - 5000 and final.read_bytes() == data and not part.exists()
    part.write_bytes(data + b"stale")  # longer than the object: fetched again from the start
    fetched = transfer.fetch_object(remote, path, final, size=len(data), sha256=sha, progress=NoProgress(), what="x")
    assert fetched == len(data) and final.read_bytes() == data
    for held in (b"\0" * 5000, b"\0" * len(data)):  # not the object's bytes (a client sizes its file first)
        part.write_bytes(held)
        fetched = transfer.fetch_object(remote, path, final, size=len(data), sha256=sha, progress=NoProgress(),
                                        what="x")
        assert fetched == len(data) and final.read_bytes() == data and not part.exists()
    with pytest.raises(RemoteIntegrityError, match="x on remote .* does not match the manifest"):
        transfer.fetch_object(remote, path, final, size=len(data), sha256="0" * 64, progress=NoProgress(), what="x")
    assert not part.exists()


_FETCH = """
import os, sys, time
from pathlib import Path
from vcollect.remote import open_remote, transfer

url, path, final, size, sha, hold = sys.argv[1:7]


class Hold:
    '''Stops the fetch at its first bytes (the .part partly written) until the file <final>.go appears.'''

    def add_total(self, files, nbytes):
        pass

    def advance(self, nbytes):
        if hold == "hold" and nbytes > 0 and not os.path.exists(final + ".held"):
            Path(final + ".held").touch()
            deadline = time.monotonic() + 60
            while not os.path.exists(final + ".go"):
                if time.monotonic() > deadline:
                    sys.exit("never told to go on")
                time.sleep(0.01)

    def file_done(self):
        pass


transfer.CHUNK_BYTES = 1000
print(transfer.fetch_object(open_remote(url), path, Path(final), size=int(size), sha256=sha, progress=Hold(), what="x"))
"""


def _blocked_flock_on(path: Path) -> bool:
    """Whether some process waits for a flock on the file at ``path`` (Linux's /proc/locks)."""
    inode = f":{os.stat(path).st_ino} "
    with open("/proc/locks", encoding="ascii") as locks:
        return any("->" in line and "FLOCK" in line and inode in line for line in locks)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks")
def test_two_processes_fetching_one_object_never_write_it_together(
    s3_server: Any, tmp_path: Path
) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    make_dataset(tmp_path / "src", ID, LENGTHS, episodes_per_shard=2)
    vcollect.upload_dataset(ID, url, root=tmp_path / "src")
    shard = sorted((tmp_path / "src" / "f" / "data-v0" / "shards").iterdir())[0]
    data = shard.read_bytes()
    final = tmp_path / "cache" / "blob"
    final.parent.mkdir()
    part = final.with_name(final.name + transfer.PART_SUFFIX)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    args = [url, open_remote(url).path(ID, "shards", shard.name), str(final), str(len(data)),
            hashlib.sha256(data).hexdigest()]
    first = subprocess.Popen([sys.executable, "-c", _FETCH, *args, "hold"], env=env, stdout=subprocess.PIPE, text=True)
    second = None
    try:
        deadline = time.monotonic() + 60
        while not (final.parent / "blob.held").exists():  # the first holds the .part, partly written
            assert first.poll() is None and time.monotonic() < deadline, "the first fetch never started"
            time.sleep(0.01)
        second = subprocess.Popen([sys.executable, "-c", _FETCH, *args, "run"], env=env, stdout=subprocess.PIPE,
                                  text=True)
        while not _blocked_flock_on(part):  # the second waits for the first: it does not resume its .part
            assert second.poll() is None, "the second fetch did not wait for the first"
            assert time.monotonic() < deadline, "the second fetch never waited for the first"
            time.sleep(0.01)
        (final.parent / "blob.go").touch()
        out_first, _ = first.communicate(timeout=60)
        out_second, _ = second.communicate(timeout=60)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    assert (first.returncode, second.returncode) == (0, 0)
    assert (int(out_first), int(out_second)) == (len(data), 0)  # the second found the first's file
    assert final.read_bytes() == data and not part.exists()


def test_an_interrupted_download_leaves_nothing_in_its_namespace(s3_server: Any, tmp_path: Path) -> None:
    url = remote_url("s3", s3_server, None, tmp_path)
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_dataset(src, ID, LENGTHS, episodes_per_shard=2)
    vcollect.upload_dataset(ID, url, root=src)
    create_namespace("f", root=dst)
    make_dataset(dst, "f/other-v0", [5, 6])
    remote = open_remote(url)
    shards = sorted(p.name for p in (src / "f" / "data-v0" / "shards").iterdir())
    damaged = remote.path(ID, "shards", shards[-1])
    good = remote.fs.cat_file(damaged)
    remote.fs.pipe_file(damaged, good[:-1] + bytes([good[-1] ^ 0xFF]))
    with pytest.raises(RemoteIntegrityError):
        vcollect.download_dataset(ID, url, root=dst)  # the other shards are fetched and kept for a resume
    delete_dataset("f/other-v0", root=dst)
    delete_namespace("f", root=dst)
    assert "f" not in list_local_namespaces(dst) and not (dst / "f").exists()
    remote.fs.pipe_file(damaged, good)
    resumed = vcollect.download_dataset(ID, url, root=dst)
    assert resumed.shards == 1  # the shards kept from the interrupted download were not fetched again
    assert episodes(load_dataset(ID, dst)) == episodes(load_dataset(ID, src))
    assert not (dst / resume.RESUME_DIR).exists()


_HOLD_RESUME = """
import sys
from pathlib import Path
from vcollect.remote.resume import held_resume

with held_resume(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


def _make_left(folder: Path, names: list[str], age_s: float) -> None:
    """A resume folder holding files ``names`` (a few bytes each), it and they last touched ``age_s`` ago."""
    folder.mkdir(parents=True, exist_ok=True)
    when = time.time() - age_s
    for name in names:
        (folder / name).write_bytes(b"partly fetched")
        os.utime(folder / name, (when, when))
    os.utime(folder, (when, when))


def test_a_download_removes_what_killed_downloads_left_but_not_a_running_or_recent_one(tmp_path: Path) -> None:
    url = remote_url("file", None, None, tmp_path)
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_dataset(src, ID, LENGTHS, episodes_per_shard=2)
    vcollect.upload_dataset(ID, url, root=src)
    downloads = dst / resume.RESUME_DIR
    two_days = 2 * 24 * 3600.0
    killed, running, recent = downloads / "g" / "killed-v0", downloads / "g" / "running-v0", downloads / "h" / "recent-v0"
    _make_left(killed, ["00000000000000000001-w1x1-0.h5", "00000000000000000002-w1x1-1.h5.part"], two_days)
    _make_left(recent, ["00000000000000000003-w1x1-0.h5.part"], 60.0)  # stopped a minute ago: kept to resume
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_RESUME, str(running)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], 60)
        assert ready and holder.stdout.readline() == "held\n", "the running download never held its folder"
        # the running download's folder looks as old as the killed one's: only its lock keeps it
        _make_left(running, ["00000000000000000004-w1x1-0.h5.part"], two_days)
        vcollect.download_dataset(ID, url, root=dst)
        assert episodes(load_dataset(ID, dst)) == episodes(load_dataset(ID, src))
        assert not killed.exists()
        assert [p.name for p in running.iterdir()] == ["00000000000000000004-w1x1-0.h5.part"]
        assert [p.name for p in recent.iterdir()] == ["00000000000000000003-w1x1-0.h5.part"]
        assert not (downloads / "f").exists()  # the download's own folder went with its publish
    finally:
        holder.communicate(input="\n", timeout=60)
    assert holder.returncode == 0
    # once its process ended, the abandoned folder goes with the next clean-up; the recent one still stays
    assert resume.remove_stale_resumes(dst) == [running]
    assert not (downloads / "g").exists() and [p.name for p in recent.iterdir()] == ["00000000000000000003-w1x1-0.h5.part"]


_SHARE_RESUME = """
import sys
from pathlib import Path
from vcollect.remote.resume import held_resume

with held_resume(Path(sys.argv[1])) as hold:
    (Path(sys.argv[1]) / "00000000000000000009-w1x1-0.h5.part").write_bytes(b"being fetched")
    print("held", flush=True)
    sys.stdin.readline()
    print("removed" if hold.remove(Path(sys.argv[2])) else "kept", flush=True)
"""


def test_a_finished_download_keeps_the_resume_folder_another_download_still_uses(tmp_path: Path) -> None:
    # Another process downloading the same dataset holds its resume folder (and a .part in it) while this
    # process's download of it finishes: the folder and the other's file stay. The other, finishing last and
    # holding it alone, removes it.
    url = remote_url("file", None, None, tmp_path)
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_dataset(src, ID, LENGTHS, episodes_per_shard=2)
    vcollect.upload_dataset(ID, url, root=src)
    folder = resume.resume_dir(dst / "f" / "data-v0", dst)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    other = subprocess.Popen([sys.executable, "-c", _SHARE_RESUME, str(folder), str(dst)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdin is not None
        ready, _, _ = select.select([other.stdout], [], [], 60)
        assert ready and other.stdout.readline() == "held\n", "the other download never held its folder"
        report = vcollect.download_dataset(ID, url, root=dst)
        assert report.shards >= 1
        assert episodes(load_dataset(ID, dst)) == episodes(load_dataset(ID, src))
        assert folder.is_dir(), "the finished download removed the folder another download still holds"
        assert (folder / "00000000000000000009-w1x1-0.h5.part").read_bytes() == b"being fetched"
        other.stdin.write("\n")
        other.stdin.flush()
        ready, _, _ = select.select([other.stdout], [], [], 60)
        assert ready and other.stdout.readline() == "removed\n"
    finally:
        other.communicate(timeout=60)
    assert other.returncode == 0
    assert not folder.exists() and not (dst / resume.RESUME_DIR).exists()
