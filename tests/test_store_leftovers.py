"""Temporary shard files a crashed writer left are removed by the next writer that opens the dataset; a
running writer's are not. The crash is a real writer process SIGKILLed in the middle of a commit."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from vcollect.store import EpisodeStore, list_datasets, load_dataset
from vcollect.store.layout.staging import STALE_AFTER_S, pid_space

REPO = Path(__file__).resolve().parents[1]
OBS = spaces.Box(-1e9, 1e9, shape=(3,), dtype=np.float32)
ACT = spaces.Discrete(5)


def write(store: EpisodeStore, seed: int, steps: int) -> None:
    obs = np.full((steps + 1, 3), seed, np.float32)
    store.write_episode(obs, np.arange(steps) % 5, np.ones(steps), np.arange(steps) == steps - 1,
                        np.zeros(steps, bool), seed=seed, env_id=0)


def read_line(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> str:
    """The child's next stdout line; fails (with its stderr) when none comes within ``timeout`` seconds."""
    assert proc.stdout is not None
    line = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                proc.kill()
                pytest.fail(f"no line from the child within {timeout} s; stderr: {proc.communicate()[1]!r}")
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                pytest.fail(f"the child exited (rc {proc.wait()}); stderr: {proc.communicate()[1]!r}")
            line += chunk
    return line.decode().strip()


# A writer that commits one shard, then starts a second commit and stops inside it: the temporary file is
# written and about to be fsynced when it says "in-commit" and waits (to be killed, or told to go on).
STUCK_WRITER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from vcollect.store import EpisodeStore

    real_fsync = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            print("in-commit", flush=True)
            sys.stdin.readline()
        real_fsync(fd)

    store = EpisodeStore.open("d/x-v0", sys.argv[1])
    for shard in range(2):
        for seed in range(3):
            steps = 4 + seed
            store.write_episode(np.full((steps + 1, 3), 10 * shard + seed, np.float32), np.arange(steps) % 5,
                                np.ones(steps), np.arange(steps) == steps - 1, np.zeros(steps, bool),
                                seed=10 * shard + seed, env_id=0)
        if shard == 0:
            store.flush()
            print("committed", flush=True)
            os.fsync = fsync
    store.flush()
    print("done", flush=True)
    """
)


def spawn(root: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", STUCK_WRITER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def tmp_files(path: Path) -> list[Path]:
    return sorted(p for p in (path / "shards").iterdir() if p.name.endswith(".tmp"))


def test_killed_writers_tmp_removed_running_writers_kept(tmp_path: Path) -> None:
    EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path).close()
    path = tmp_path / "d" / "x-v0"
    killed, running = spawn(tmp_path), spawn(tmp_path)
    try:
        for proc in (killed, running):
            assert read_line(proc) == "committed"
            assert read_line(proc) == "in-commit"
        leftovers = tmp_files(path)
        assert len(leftovers) == 2 and all(p.stat().st_size > 0 for p in leftovers)
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(timeout=30) == -signal.SIGKILL
        killed_tmp = [p for p in leftovers if f"-w{killed.pid}x" in p.name]
        running_tmp = [p for p in leftovers if f"-w{running.pid}x" in p.name]
        assert len(killed_tmp) == len(running_tmp) == 1
        assert list_datasets(tmp_path)["d/x-v0"]["temporary_files"] == [str(p) for p in leftovers]

        with EpisodeStore.open("d/x-v0", tmp_path) as store:  # the next writer
            assert tmp_files(path) == running_tmp  # the dead writer's file is gone, the live one's kept
            write(store, 99, 3)

        assert running.stdin is not None
        running.stdin.write(b"go\n")
        running.stdin.flush()
        assert read_line(running) == "done"  # its commit finishes: its temporary file was still there
        assert running.wait(timeout=30) == 0
    finally:
        for proc in (killed, running):
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert tmp_files(path) == []
    ds = load_dataset("d/x-v0", root=tmp_path)
    # killed: its first shard (3 episodes); running: both (6); the next writer: 1
    assert ds.total_episodes == 10
    assert sorted(e.seed for e in ds) == [0, 0, 1, 1, 2, 2, 10, 11, 12, 99]


def test_leftover_rules_by_owner_and_age(tmp_path: Path) -> None:
    EpisodeStore.create("d/x-v0", OBS, ACT, root=tmp_path).close()
    shards = tmp_path / "d" / "x-v0" / "shards"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here, other = pid_space(), "0123abcd" if pid_space() != "0123abcd" else "fedc4321"

    def tmp(pid: int, space: str, age: float = 0.0) -> Path:
        file = shards / f"{time.time_ns():020d}-w{pid}x0123456789ab-000000.h5.{space}.tmp"
        file.write_bytes(b"half a shard")
        then = time.time() - age
        os.utime(file, (then, then))
        return file

    def old_format(pid: int, age: float) -> Path:  # named by vcollect before the process-id space was added
        file = shards / f"{time.time_ns():020d}-w{pid}x0123456789ab-000000.h5.tmp"
        file.write_bytes(b"half a shard")
        os.utime(file, (time.time() - age, time.time() - age))
        return file

    removed = [
        old_format(dead.pid, STALE_AFTER_S + 60),
        tmp(10**30, here),  # no process has such a pid
        tmp(dead.pid, here),  # this machine, dead writer
        tmp(os.getpid(), here, STALE_AFTER_S + 60),  # live pid (reused?) but untouched for too long
        tmp(os.getpid(), other, STALE_AFTER_S + 60),  # another machine's, untouched for too long
    ]
    kept = [
        old_format(dead.pid, 60),  # its process-id space unknown: kept while recent
        tmp(os.getpid(), here),  # a live writer of this machine
        tmp(dead.pid, other),  # another machine's pid: cannot tell, recent
        shards / "notes.tmp",  # not a shard's temporary name
    ]
    kept[-1].write_text("someone else's")
    json_tmps = []  # dataset.json being rewritten (update_metadata): no process-id space, removed by age only
    for age in (STALE_AFTER_S + 60, 60):
        file = shards.parent / f"dataset.json.{dead.pid}.0123abcd{age:.0f}.tmp"
        file.write_text("{")
        os.utime(file, (time.time() - age, time.time() - age))
        json_tmps.append(file)
    removed.append(json_tmps[0])
    kept.append(json_tmps[1])
    with EpisodeStore.open("d/x-v0", tmp_path):
        pass
    assert [p.exists() for p in removed] == [False] * 6
    assert [p.exists() for p in kept] == [True] * 5
