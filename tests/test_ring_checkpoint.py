"""Ring checkpoints: save/load give the same ring back (rows, running episodes, write positions, sampling
generator, priorities), collection goes on exactly as without the checkpoint, bad input is refused with
specific errors, and a save killed mid-write leaves the previous checkpoint whole."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vcollect
from vcollect.buffers import PrioritizedVectorRingBuffer, VectorRingBuffer
from vcollect.buffers.ring import RingWriter, ring_columns
from vcollect.errors import CheckpointExistsError, CheckpointMismatchError, CorruptCheckpointError

REPO = Path(__file__).resolve().parents[1]
OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def make_ring(prioritized: bool, **kwargs: Any) -> VectorRingBuffer:
    if prioritized:
        return PrioritizedVectorRingBuffer(3, 40, OBS, ACT, alpha=0.6, beta=0.4, seed=5, **kwargs)
    return VectorRingBuffer(3, 40, OBS, ACT, seed=5, **kwargs)


def drive(ring: VectorRingBuffer, rng: np.random.Generator, steps: int) -> None:
    """Random steps on every env, episodes ending at random (some longer than the ring)."""
    for _ in range(steps):
        env_ids = np.flatnonzero(~ring_columns(ring).has_episode)
        if env_ids.size:
            ring.start_episodes(env_ids, rng.standard_normal((env_ids.size, 3)).astype(np.float32))
        ids = np.arange(3)
        done = rng.random(3) < np.array([0.05, 0.0, 0.05])  # env 1 runs one long episode
        ring.add(ids, rng.integers(0, 2, 3), rng.standard_normal(3), done, np.zeros(3, bool),
                 rng.standard_normal((3, 3)).astype(np.float32))
        ended = np.flatnonzero(done)
        if ended.size:
            ring.start_episodes(ended, rng.standard_normal((ended.size, 3)).astype(np.float32))


def assert_same_ring(a: VectorRingBuffer, b: VectorRingBuffer) -> None:
    assert type(a) is type(b)
    if isinstance(a, PrioritizedVectorRingBuffer) and isinstance(b, PrioritizedVectorRingBuffer):
        a._sync()  # the rows written since the last sample given their priority (a save does this first)
        b._sync()
    arrays_a, arrays_b = a._checkpoint_arrays(), b._checkpoint_arrays()
    assert sorted(arrays_a) == sorted(arrays_b)
    for name, value in arrays_a.items():
        assert value.dtype == arrays_b[name].dtype, name
        np.testing.assert_array_equal(value, arrays_b[name], err_msg=name)
    assert a._headroom == b._headroom
    assert a.extras.keys() == b.extras.keys()
    assert np.array_equal(a.unfinished(), b.unfinished())
    assert a._rng.bit_generator.state == b._rng.bit_generator.state
    if isinstance(a, PrioritizedVectorRingBuffer):
        assert isinstance(b, PrioritizedVectorRingBuffer)
        np.testing.assert_array_equal(a._tree.leaves(), b._tree.leaves())
        assert a._tree.total == b._tree.total and a.max_priority == b.max_priority


@pytest.mark.parametrize("prioritized", [False, True])
def test_running_episodes_go_on_after_load_exactly_as_without_the_checkpoint(tmp_path: Path, prioritized: bool) -> None:
    ring = make_ring(prioritized, keep_overflow=True)  # episodes longer than the ring spill their rows aside
    drive(ring, np.random.default_rng(0), 150)
    RingWriter(ring).set_episode_extras(0, {"mc": np.arange(int(ring.episode_lengths[0]), dtype=np.float32)})
    if isinstance(ring, PrioritizedVectorRingBuffer):
        batch = ring.sample(16)
        ring.update_weight(batch["indices"], np.linspace(0.1, 3.0, 16))
    assert ring.unfinished().size and ring._overflow  # episodes are running at the save, one spilled
    ring.save(tmp_path / "ring.h5")
    loaded = type(ring).load(tmp_path / "ring.h5")
    assert_same_ring(ring, loaded)
    for env in range(3):
        whole, back = ring.episode(env), loaded.episode(env)
        np.testing.assert_array_equal(whole.observations, back.observations)
        np.testing.assert_array_equal(whole.rewards, back.rewards)
    # the same steps written to both: the same rings, the same samples
    drive(ring, np.random.default_rng(1), 120)
    drive(loaded, np.random.default_rng(1), 120)
    assert_same_ring(ring, loaded)
    x, y = ring.sample(32, n_step=3, gamma=0.9), loaded.sample(32, n_step=3, gamma=0.9)
    for key in ("indices", "observations", "rewards", "n_step_returns"):
        np.testing.assert_array_equal(x[key], y[key])
    if prioritized:
        np.testing.assert_array_equal(x["weights"], y["weights"])


@pytest.mark.parametrize("prioritized", [False, True])
def test_collector_resumed_on_a_loaded_ring_fills_it_as_an_uninterrupted_run(tmp_path: Path, prioritized: bool) -> None:
    def ring() -> VectorRingBuffer:
        if prioritized:
            return PrioritizedVectorRingBuffer(4, 150, alpha=0.6, beta=0.4, seed=3)
        return VectorRingBuffer(4, 150, seed=3)

    def collector(buffer: VectorRingBuffer) -> vcollect.Collector:
        return vcollect.Collector(None, vcollect.make_vector("CartPole-v1", 4, backend="dummy"), buffer=buffer, seed=0)

    whole = ring()
    with collector(whole) as c:
        c.reset()
        c.collect(n_step=700, random=True)
        c.reset_env(seed=1)  # the resumed process's envs start afresh, from their own seeds
        c.collect(n_step=500, random=True)

    first = ring()
    with collector(first) as c:
        c.reset()
        c.collect(n_step=700, random=True)
    first.save(tmp_path / "ring.h5")
    resumed = type(first).load(tmp_path / "ring.h5", num_envs=4, capacity=150)
    with collector(resumed) as c:
        c.reset_env(seed=1)
        c.collect(n_step=500, random=True)
    assert_same_ring(whole, resumed)


def test_bad_checkpoints_and_paths_are_refused_saying_what_is_wrong(tmp_path: Path) -> None:
    ring = make_ring(False)
    drive(ring, np.random.default_rng(0), 30)
    path = ring.save(tmp_path / "ring.h5")
    with pytest.raises(CheckpointExistsError, match="overwrite=True"):
        ring.save(path)
    drive(ring, np.random.default_rng(1), 5)
    ring.save(path, overwrite=True)  # replaced whole
    assert_same_ring(ring, VectorRingBuffer.load(path))
    with pytest.raises(CheckpointMismatchError, match="holds a VectorRingBuffer.*PrioritizedVectorRingBuffer|"
                       "VectorRingBuffer, not a PrioritizedVectorRingBuffer"):
        PrioritizedVectorRingBuffer.load(path)
    with pytest.raises(CheckpointMismatchError, match=r"its capacity is 40, 64 was asked for"):
        VectorRingBuffer.load(path, capacity=64)
    with pytest.raises(CheckpointMismatchError, match=r"its action_space is Discrete\(2\), Discrete\(3\) was asked"):
        VectorRingBuffer.load(path, action_space=gym.spaces.Discrete(3), observation_space=OBS)
    with pytest.raises(CheckpointMismatchError, match="num_envs is 3, 2 was asked for"):
        VectorRingBuffer.load(path, num_envs=2)
    data = path.read_bytes()
    (tmp_path / "cut.h5").write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        VectorRingBuffer.load(tmp_path / "cut.h5")
    obs_at = data.index(ring_columns(ring).obs[0][:4].tobytes())  # flip a bit inside the observations
    flipped = bytearray(data)
    flipped[obs_at + 5] ^= 0x10
    (tmp_path / "flipped.h5").write_bytes(bytes(flipped))
    with pytest.raises(CorruptCheckpointError, match="'obs/0' fails the checksum"):
        VectorRingBuffer.load(tmp_path / "flipped.h5")
    (tmp_path / "other.h5").write_bytes(b"not a checkpoint" * 100)
    with pytest.raises(CorruptCheckpointError, match="not a readable ring checkpoint"):
        VectorRingBuffer.load(tmp_path / "other.h5")
    with pytest.raises(FileNotFoundError):
        VectorRingBuffer.load(tmp_path / "missing.h5")


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import gymnasium as gym
    import vcollect.buffers.checkpoint as checkpoint
    from vcollect.buffers import VectorRingBuffer
    from vcollect.buffers.ring import ring_columns

    ring = VectorRingBuffer(2, 1_000_000, gym.spaces.Box(-1, 1, (8,), np.float32), gym.spaces.Discrete(2))
    ring_columns(ring).obs[0][:] = 0.5  # 64 MB of observations
    write_array = checkpoint._write_array

    def write_then_wait(f, name, arr):
        write_array(f, name, arr)
        if name == "obs/0":  # mid-save: the observations are in the temporary file, the rest is not
            f.flush()
            sys.stdout.write("mid-save\\n")
            sys.stdout.flush()
            sys.stdin.readline()  # held here until killed

    checkpoint._write_array = write_then_wait
    ring.save(sys.argv[1], overwrite=True)
    sys.stdout.write("saved\\n")
""")


@pytest.mark.slow
def test_a_save_killed_mid_write_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    path = tmp_path / "ring.h5"
    previous = make_ring(True)
    drive(previous, np.random.default_rng(0), 60)
    previous.save(path)
    before = path.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "the child never reached the middle of its save"
        assert proc.stdout is not None and proc.stdout.readline() == b"mid-save\n"
        leftovers = [p for p in tmp_path.iterdir() if p.name.startswith("ring.h5.") and p.name.endswith(".tmp")]
        assert len(leftovers) == 1 and leftovers[0].stat().st_size > 60_000_000  # half a save on disk
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert path.read_bytes() == before
    assert_same_ring(previous, PrioritizedVectorRingBuffer.load(path))
    previous.save(path, overwrite=True)  # the next save removes the dead writer's half file
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("prioritized", [False, True])
def test_arrays_of_many_chunks_read_by_threads_come_back_exactly_and_a_bad_chunk_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prioritized: bool
) -> None:
    from vcollect.buffers import checkpoint

    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", 84)  # obs/0: 7 rows of 12 B a chunk, 18 chunks, the last partial
    monkeypatch.setattr(checkpoint, "READ_THREADS", 3)
    ring = make_ring(prioritized, keep_overflow=True)
    drive(ring, np.random.default_rng(2), 150)
    path = ring.save(tmp_path / "ring.h5")
    with checkpoint.CheckpointReader(path) as ckpt:
        obs = ckpt._file["data/obs/0"]
        assert obs.chunks == (7, 3) and obs.id.get_num_chunks() == 18
    loaded = type(ring).load(path)
    assert_same_ring(ring, loaded)
    data = path.read_bytes()
    for row in (0, 7 * 6 + 3, 119):  # the first chunk, a middle one, the partial last one
        at = data.index(ring_columns(ring).obs[0][row].tobytes())
        flipped = bytearray(data)
        flipped[at + 2] ^= 0x01
        (tmp_path / "flipped.h5").write_bytes(bytes(flipped))
        with pytest.raises(CorruptCheckpointError, match=f"'obs/0' fails the checksum of its chunk {row // 7};"):
            type(ring).load(tmp_path / "flipped.h5")


def test_a_chunk_read_past_the_end_of_the_file_says_so(tmp_path: Path) -> None:
    from vcollect.buffers import checkpoint

    path = tmp_path / "short.bin"
    path.write_bytes(bytes(range(10)))
    out = bytearray(16)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert checkpoint._read_chunk(fd, memoryview(out), 0) == "the file ends 10 bytes into it, 16 expected"
        assert checkpoint._read_chunk(fd, memoryview(out)[:8], 2) == zlib.crc32(bytes(range(2, 10)))
    finally:
        os.close(fd)
    assert bytes(out[:8]) == bytes(range(2, 10))
