"""Real writer processes: concurrent appends to one dataset, and SIGKILL in the middle of writing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from vcollect.store import EpisodeStore, list_datasets, load_dataset
from vcollect.store.read.reader import StoredDataset

REPO = Path(__file__).resolve().parents[1]
OBS = spaces.Box(-1e9, 1e9, shape=(3,), dtype=np.float32)
ACT = spaces.Discrete(5)

# Shared by the parent (checking) and the children (writing): episode content is a function of
# (writer, seed), so every stored episode can be checked exactly.
EPISODE_SRC = textwrap.dedent(
    """
    import numpy as np

    def episode(writer, seed):
        steps = 1 + (seed * 7 + writer) % 13
        rows = np.arange(steps + 1)
        obs = np.stack([np.full(steps + 1, writer), np.full(steps + 1, seed), rows], axis=1).astype(np.float32)
        return dict(observations=obs, actions=(rows[:-1] + seed) % 5, rewards=rows[:-1] * 0.5 + seed,
                    terminations=rows[:-1] == steps - 1, truncations=np.zeros(steps, dtype=bool),
                    infos={"row": rows.copy()})
    """
)
_ns: dict = {}
exec(EPISODE_SRC, _ns)
episode = _ns["episode"]


def check(got, writer: int, seed: int) -> None:
    want = episode(writer, seed)
    assert got.env_id == writer and got.seed == seed
    for key in ("observations", "actions", "rewards", "terminations", "truncations"):
        np.testing.assert_array_equal(getattr(got, key), want[key])
    np.testing.assert_array_equal(got.infos["row"], want["infos"]["row"])


def spawn(script: str, root: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = EPISODE_SRC + textwrap.dedent(script)
    return subprocess.Popen(
        [sys.executable, "-c", code, str(root), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


CONCURRENT_WRITER = """
import sys
from vcollect.store import EpisodeStore
root, writer, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = EpisodeStore.open("proc/shared-v0", root, shard_steps=30)
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
with store:
    for seed in range(n):
        store.write_episode(**episode(writer, seed), seed=seed, env_id=writer)
print("done", store.committed_episodes, len(store.shards_written), flush=True)
"""


def test_two_processes_append_to_one_dataset_concurrently(tmp_path: Path) -> None:
    EpisodeStore.create("proc/shared-v0", OBS, ACT, root=tmp_path).close()
    n = 300
    procs = [spawn(CONCURRENT_WRITER, tmp_path, str(w), str(n)) for w in (0, 1)]
    try:
        for p in procs:  # both are up and holding an open store before either writes
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr.read()  # type: ignore[union-attr]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.split()[:2] == ["done", str(n)]
    ds = load_dataset("proc/shared-v0", root=tmp_path)
    assert ds.total_episodes == 2 * n
    shard_names = [p.name for p in StoredDataset(ds).shard_paths]
    assert len(set(shard_names)) == len(shard_names) == sum(int(out.split()[2]) for out, _ in outs)
    assert len({name.split("-")[1] for name in shard_names}) == 2  # two distinct writer names
    per_writer: dict[int, list[int]] = {0: [], 1: []}
    for got in ds:
        check(got, got.env_id, got.seed)
        per_writer[got.env_id].append(got.seed)
    assert per_writer == {0: list(range(n)), 1: list(range(n))}  # each writer's order kept, nothing lost


KILLED_WRITER = """
import sys
from vcollect.store import EpisodeStore
root, mode = sys.argv[1], sys.argv[2]
store = EpisodeStore.open("proc/killed-v0", root, shard_steps=10_000 if mode == "pending" else 40)
seed = 0
if mode == "pending":
    for _ in range(3):
        for _ in range(10):
            store.write_episode(**episode(0, seed), seed=seed, env_id=0)
            seed += 1
        store.flush()
        print("committed", store.committed_episodes, flush=True)
    for _ in range(7):  # written, not committed: lost by design
        store.write_episode(**episode(0, seed), seed=seed, env_id=0)
        seed += 1
    print("pending", store.pending_episodes, flush=True)
    sys.stdin.readline()
else:  # write forever; report every commit; the parent kills us at an arbitrary point
    last = 0
    while True:
        store.write_episode(**episode(0, seed), seed=seed, env_id=0)
        seed += 1
        if store.committed_episodes != last:
            last = store.committed_episodes
            print("committed", last, flush=True)
"""


@pytest.mark.parametrize("mode", ["pending", "anywhere"])
def test_sigkill_keeps_every_committed_episode(tmp_path: Path, mode: str) -> None:
    EpisodeStore.create("proc/killed-v0", OBS, ACT, root=tmp_path).close()
    proc = spawn(KILLED_WRITER, tmp_path, mode)
    committed = 0
    try:
        assert proc.stdout is not None
        for _ in range(3 if mode == "pending" else 25):
            word, count = proc.stdout.readline().split()
            assert word == "committed", proc.stderr.read()  # type: ignore[union-attr]
            committed = int(count)
        if mode == "pending":
            assert proc.stdout.readline().split() == ["pending", "7"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    ds = load_dataset("proc/killed-v0", root=tmp_path)
    if mode == "pending":
        assert ds.total_episodes == committed == 30
    else:
        # Killed at an arbitrary point (maybe mid-commit): at least what was reported, all whole.
        assert ds.total_episodes >= committed > 0
        info = list_datasets(tmp_path)["proc/killed-v0"]
        assert info["total_episodes"] == ds.total_episodes and info["corrupt_shards"] == []
        assert all(p.endswith(".tmp") for p in info["temporary_files"])
    for i, got in enumerate(ds):
        check(got, 0, i)
    batch = ds.sample_steps(128)
    seeds, rows = batch["observations"][:, 1].astype(int), batch["observations"][:, 2].astype(int)
    np.testing.assert_array_equal(batch["next_observations"][:, 2], rows + 1)
    np.testing.assert_array_equal(batch["next_observations"][:, 1], seeds)
