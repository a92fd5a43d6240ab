"""A full disk: commits raise DatasetError, keep the pending episodes and leave no file; flush() after freeing
space commits them. Some tests fill a real small tmpfs (root only), others inject ENOSPC (always run). A Minari
export onto a full disk raises DatasetError too (HDF5 writing into a full disk used to crash the process)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

import vcollect.minari.interop as minari_interop
from vcollect.errors import DatasetError, DiskFullError
from vcollect.minari import export_minari, import_minari
from vcollect.store import EpisodeStore, list_datasets, load_dataset

OBS = spaces.Box(-1e9, 1e9, shape=(3,), dtype=np.float32)
ACT = spaces.Discrete(5)


def write(store: EpisodeStore, seed: int, steps: int) -> None:
    """One episode whose every value is a function of (seed, step)."""
    rows = np.arange(steps + 1, dtype=np.float32)
    obs = np.stack([np.full(steps + 1, seed, np.float32), rows, rows * 0.5], axis=1)
    store.write_episode(obs, (np.arange(steps) + seed) % 5, rows[:-1] + seed, np.arange(steps) == steps - 1,
                        np.zeros(steps, bool), seed=seed, env_id=seed % 3)


def check(got: object, seed: int, steps: int, env_id: int | None = None) -> None:
    rows = np.arange(steps + 1, dtype=np.float32)
    assert got.seed == seed and got.env_id == (seed % 3 if env_id is None else env_id)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got.observations[:, 0], np.full(steps + 1, seed))  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got.observations[:, 1], rows)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got.actions, (np.arange(steps) + seed) % 5)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got.rewards, rows[:-1] + seed)  # type: ignore[attr-defined]


def files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "shards").iterdir())


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 3 MiB tmpfs (needs root and mount permission; skipped otherwise)."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(path: Path) -> int:
    """Write ``path`` until the filesystem is full; returns the bytes written."""
    written = 0
    chunk = b"\xab" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n = f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                if len(chunk) == 1:
                    return written
                chunk = chunk[: len(chunk) // 2]
                continue
            written += n or 0


def test_real_full_disk_keeps_pending_and_flush_retries(small_tmpfs: Path) -> None:
    root = small_tmpfs / "datasets"
    store = EpisodeStore.create("d/full-v0", OBS, ACT, root=root, shard_steps=10**9, shard_bytes=None)
    for seed in range(3):
        write(store, seed, 50)
    store.flush()
    first = files(store.path)
    filler = small_tmpfs / "filler"
    size = fill(filler)
    # A new dataset cannot be created on the full disk: a DatasetError, and no folder left behind.
    with pytest.raises(DiskFullError, match="no space left on device while creating dataset 'new/other-v0'"):
        EpisodeStore.create("new/other-v0", OBS, ACT, root=root)
    assert sorted(p.name for p in root.iterdir()) == ["d"]
    assert list(list_datasets(root)) == ["d/full-v0"]
    # Leave 256 KiB free: the shard (about 1 MiB) starts to be written, then the disk is full.
    os.truncate(filler, size - 256 * 1024)
    for seed in range(3, 23):
        write(store, seed, 3000)
    with pytest.raises(DiskFullError, match="no space left on device while committing shard") as info:
        store.flush()
    text = str(info.value)
    assert "20 pending episodes are kept in memory" in text and "free space and call flush() again" in text
    assert isinstance(info.value, DatasetError)  # DiskFullError is a DatasetError
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert store.pending_episodes == 20 and store.committed_episodes == 3
    assert files(store.path) == first  # no .tmp left behind, the committed shard untouched
    assert load_dataset("d/full-v0", root=root).total_episodes == 3
    with pytest.raises(DiskFullError, match="no space left on device"):
        store.flush()  # still full: the same error, nothing lost

    filler.unlink()
    store.flush()  # the same writer, the same pending episodes
    assert store.pending_episodes == 0 and store.committed_episodes == 23
    store.close()
    ds = load_dataset("d/full-v0", root=root)
    assert ds.total_episodes == 23
    for seed, got in enumerate(ds):
        check(got, seed, 50 if seed < 3 else 3000)
    assert not any(name.endswith(".tmp") for name in files(ds.path))


def test_injected_enospc_mid_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard file's write fails after part of it is on disk, as on a disk that fills mid-write."""
    store = EpisodeStore.create("d/inj-v0", OBS, ACT, root=tmp_path)
    write(store, 0, 7)
    store.flush()
    for seed in (1, 2):
        write(store, seed, 400)
    real_write = os.write
    seen: list[str] = []

    def write_then_fail(fd: int, data: bytes) -> int:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if not target.endswith(".tmp"):
            return real_write(fd, data)
        seen.append(target)
        if len(seen) == 1:
            return real_write(fd, memoryview(data)[:4096])  # a short write: the caller must go on
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write_then_fail)
    with pytest.raises(DiskFullError, match="no space left on device while committing shard") as info:
        store.flush()
    assert "2 pending episodes are kept in memory; free space and call flush() again" in str(info.value)
    assert len(seen) == 2 and Path(seen[0]).parent == store.path / "shards"
    assert not Path(seen[0]).exists()  # the half-written temporary file is removed
    assert files(store.path) == [store.shards_written[0].name]
    assert store.pending_episodes == 2

    monkeypatch.setattr(os, "write", real_write)
    store.close()
    ds = load_dataset("d/inj-v0", root=tmp_path)
    assert [len(e) for e in ds] == [7, 400, 400]
    for seed, got in enumerate(ds):
        check(got, seed, 7 if seed == 0 else 400)


def test_other_write_errors_keep_the_general_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = EpisodeStore.create("d/eio-v0", OBS, ACT, root=tmp_path)
    write(store, 0, 5)

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(DatasetError, match="could not commit shard .*Input/output error") as info:
        store.flush()
    assert "no space" not in str(info.value) and store.pending_episodes == 1
    assert files(store.path) == []
    monkeypatch.undo()
    store.close()
    check(load_dataset("d/eio-v0", root=tmp_path)[0], 0, 5)


def test_export_to_a_full_disk(tmp_path: Path, small_tmpfs: Path) -> None:
    with EpisodeStore.create("d/src-v0", OBS, ACT, root=tmp_path) as store:
        for seed in range(20):
            write(store, seed, 3000)  # about 1 MiB as a Minari file
    minari_root = small_tmpfs / "minari"
    filler = small_tmpfs / "filler"
    size = fill(filler)
    os.truncate(filler, size - 256 * 1024)
    with pytest.raises(DiskFullError, match="no space left on device while writing"):
        export_minari("d/src-v0", "mm/src-v0", minari_root, root=tmp_path)
    assert list(minari_root.iterdir()) == []  # no staging folder, no dataset (nor the namespace it made)
    filler.unlink()
    export_minari("d/src-v0", "mm/src-v0", minari_root, root=tmp_path)
    back = import_minari("mm/src-v0", "d/back-v0", tmp_path, minari_root=minari_root)
    for seed, got in enumerate(back):
        check(got, seed, 3000, env_id=0)  # Minari has no env ids
    assert back.total_episodes == 20


def test_spill_file_keeps_hdf5_alive_on_dev_full(tmp_path: Path) -> None:
    """Every write to /dev/full fails with ENOSPC: HDF5 still closes cleanly and the error is raised after."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with EpisodeStore.create("d/src-v0", OBS, ACT, root=tmp_path) as store:
        for seed in range(3):
            write(store, seed, 10)
    with pytest.raises(DiskFullError, match="no space left on device while writing '/dev/full'") as info:
        minari_interop._write_main_file(load_dataset("d/src-v0", root=tmp_path), Path("/dev/full"))
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC


def test_create_failing_removes_only_the_folders_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vcollect.store.layout.dataset_dir as dataset_dir

    EpisodeStore.create("ns/kept-v0", OBS, ACT, root=tmp_path).close()

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(dataset_dir, "write_json_atomic", refuse)
    with pytest.raises(PermissionError):  # other errors than a full disk keep their type
        EpisodeStore.create("ns/deeper/new-v0", OBS, ACT, root=tmp_path)
    assert sorted(p.name for p in (tmp_path / "ns").iterdir()) == ["kept-v0"]  # ns/deeper/new-v0 removed
    assert list(list_datasets(tmp_path)) == ["ns/kept-v0"]


def test_update_metadata_on_a_full_disk(small_tmpfs: Path) -> None:
    root = small_tmpfs / "datasets"
    store = EpisodeStore.create("d/meta-v0", OBS, ACT, root=root, metadata={"who": "me"})
    write(store, 0, 5)
    store.flush()
    before = (store.path / "dataset.json").read_bytes()
    filler = small_tmpfs / "filler"
    fill(filler)
    with pytest.raises(DiskFullError, match="while updating .*dataset.json.* it is unchanged"):
        store.update_metadata({"note": "x" * 100_000})
    assert (store.path / "dataset.json").read_bytes() == before
    filler.unlink()
    store.update_metadata({"note": "y"})
    store.close()
    assert load_dataset("d/meta-v0", root=root).metadata["note"] == "y"


def test_update_metadata_with_injected_enospc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vcollect.store.layout.dataset_info as dataset_info

    with EpisodeStore.create("d/meta-v0", OBS, ACT, root=tmp_path) as store:
        write(store, 0, 5)

        def full(*args: object, **kwargs: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(dataset_info, "write_json_atomic", full)
        with pytest.raises(DiskFullError, match="it is unchanged"):
            store.update_metadata({"note": "x"})


def test_the_cli_says_what_a_command_can_do_on_a_full_disk() -> None:
    import argparse

    from vcollect.cli.exits import flag_wording

    message = "no space left ...; 20 pending episodes are kept in memory; free space and call flush() again"
    said = flag_wording(message, argparse.Namespace())
    assert "flush()" not in said and "run the command again" in said
