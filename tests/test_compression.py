"""Per-column shard compression: what each codec writes, bit-exact reads through every read path, the CLI
flag, and clear errors for codecs that do not exist or cannot be loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from vcollect import EpisodeStore, load_dataset
from vcollect.errors import CodecUnavailableError, CorruptShardError
from vcollect.store.read.shards.chunk_reader import ChunkTable
from vcollect.store.write import compression as codecs

ZSTD_FILTER, LZ4_FILTER = 32015, 32004  # HDF5's registered filter ids
OBS_SPACE = spaces.Dict({
    "frames": spaces.Box(0, 255, (4, 12, 12), np.uint8),
    "ram": spaces.Box(0, 255, (16,), np.uint8),
    "pos": spaces.Box(-1.0, 1.0, (3,), np.float32),
})
ACT_SPACE = spaces.Discrete(3)


def make_episodes(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Episodes of Atari-like frames: a mostly constant background with a moving bright pixel."""
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(n):
        length = int(rng.integers(5, 40))
        frames = np.full((length + 1, 4, 12, 12), 87, np.uint8)
        frames[np.arange(length + 1), :, rng.integers(0, 12, length + 1), rng.integers(0, 12, length + 1)] = 236
        obs = {"frames": frames, "ram": rng.integers(0, 256, (length + 1, 16), dtype=np.uint8),
               "pos": rng.uniform(-1, 1, (length + 1, 3)).astype(np.float32)}
        episodes.append({
            "observations": obs, "actions": rng.integers(0, 3, length), "rewards": rng.normal(size=length),
            "terminations": np.r_[np.zeros(length - 1, bool), True], "truncations": np.zeros(length, bool),
        })
    return episodes


def write(root: Path, codec: Any, episodes: list[dict[str, Any]], dataset_id: str = "c/frames-v0") -> Path:
    store = EpisodeStore.create(dataset_id, OBS_SPACE, ACT_SPACE, root=root, compression=codec, shard_steps=200)
    for episode in episodes:
        store.write_episode(**episode, seed=None, env_id=0)
    store.close()
    return store.path


def column_filters(dataset_dir: Path, column: str) -> set[int | None]:
    """The first HDF5 filter id of ``column`` in each shard (None: stored raw, contiguous)."""
    found: set[int | None] = set()
    for shard in sorted((dataset_dir / "shards").glob("*.h5")):
        with h5py.File(shard, "r") as f:
            names: list[str] = []
            f.visit(names.append)
            path = next(n for n in names if n.endswith(column) and isinstance(f[n], h5py.Dataset))
            plist = f[path].id.get_create_plist()
            found.add(plist.get_filter(0)[0] if plist.get_nfilters() else None)
    return found


def assert_same_episodes(dataset: Any, episodes: list[dict[str, Any]]) -> None:
    stored = list(dataset.iterate_episodes())
    assert len(stored) == len(episodes)
    for got, want in zip(stored, episodes):
        for key in ("frames", "ram", "pos"):
            np.testing.assert_array_equal(got.observations[key], want["observations"][key])
        np.testing.assert_array_equal(got.actions, want["actions"])
        np.testing.assert_array_equal(got.rewards, want["rewards"])


def test_auto_compresses_frames_with_zstd_and_keeps_the_rest_raw(tmp_path: Path) -> None:
    episodes = make_episodes(12)
    path = write(tmp_path, "auto", episodes)
    assert column_filters(path, "frames") == {ZSTD_FILTER}
    assert column_filters(path, "ram") == {None}, "a 1-D uint8 column is not image-like"
    assert column_filters(path, "pos") == {None}
    raw = write(tmp_path, "none", episodes, "c/raw-v0")
    assert column_filters(raw, "frames") == {None}
    size = lambda p: sum(f.stat().st_size for f in (p / "shards").glob("*.h5"))  # noqa: E731
    assert size(path) * 3 < size(raw), "zstd did not shrink the frames"
    assert_same_episodes(load_dataset("c/frames-v0", root=tmp_path), episodes)


@pytest.mark.parametrize("codec", ["none", "gzip", "lzf", "lz4", "zstd", 1, None])
def test_every_codec_round_trips_bit_exact(codec: Any, tmp_path: Path) -> None:
    episodes = make_episodes(6, seed=1)
    path = write(tmp_path, codec, episodes)
    expected = {"none": None, None: None, "gzip": 1, 1: 1, "lzf": 32000, "lz4": LZ4_FILTER, "zstd": ZSTD_FILTER}
    assert column_filters(path, "pos") == {expected[codec]}, "one named codec applies to every column"
    assert_same_episodes(load_dataset("c/frames-v0", root=tmp_path), episodes)


@pytest.fixture(scope="module")
def gather_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same 30 episodes written once with zstd and once raw, each under a root of its own."""
    roots = {}
    for codec in ("zstd", "none"):
        roots[codec] = tmp_path_factory.mktemp(f"gather-{codec}")
        write(roots[codec], codec, make_episodes(30, seed=2))
    return roots


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, 10_000), min_size=0, max_size=64), codec=st.sampled_from(["zstd", "none"]))
def test_row_gathers_return_exactly_the_asked_rows(rows: list[int], codec: str, gather_roots: dict[str, Path]) -> None:
    """The reader's row gather (sample_steps and episode reads go through it): from a chunked column one range
    read when the rows are dense, per-chunk reads when sparse, from a raw one a memory map; either way exactly
    the stored rows in the asked order, duplicates included."""
    index = load_dataset("c/frames-v0", root=gather_roots[codec])._index
    shard = index.shards[0]
    name = next(n for n in shard.columns if n.endswith("frames"))
    column = index.files.read(0, shard, name, slice(None))
    want = np.asarray(rows, dtype=np.int64) % len(column)
    np.testing.assert_array_equal(index.files.read(0, shard, name, want), column[want])
    np.testing.assert_array_equal(index.files.read(0, shard, name, slice(3, 40)), column[3:40])
    if codec == "zstd":  # and the rows came through the chunk table, not h5py's selection
        assert isinstance(index.files._tables.get((0, name)), ChunkTable)


def test_one_row_chunks_and_a_corrupt_chunk(tmp_path: Path) -> None:
    """Frame stacks of Atari size get a chunk each; a damaged chunk is a CorruptShardError naming the shard."""
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    store = EpisodeStore.create("c/big-v0", space, ACT_SPACE, root=tmp_path)
    rng = np.random.default_rng(4)
    frames = np.repeat(rng.integers(0, 3, (21, 1, 84, 84), dtype=np.uint8) * 80, 4, axis=1)
    store.write_episode(frames, np.zeros(20, np.int64), np.zeros(20), np.r_[np.zeros(19, bool), True],
                        np.zeros(20, bool), seed=None, env_id=0)
    store.close()
    index = load_dataset("c/big-v0", root=tmp_path)._index
    shard = index.shards[0]
    name = next(n for n in shard.columns if n.startswith("observations"))
    rows = np.array([20, 3, 3, 0, 17])
    np.testing.assert_array_equal(index.files.read(0, shard, name, rows), frames[rows])
    table = index.files._tables[(0, name)]
    assert isinstance(table, ChunkTable) and table.rows_per_chunk == 1 and len(table.offsets) == 21
    start, size = int(table.offsets[5]), int(table.sizes[5])
    index.files.close()
    with open(shard.path, "r+b") as f:
        f.seek(start + size // 2)
        f.write(b"\xff" * 16)
    damaged = load_dataset("c/big-v0", root=tmp_path)._index
    with pytest.raises(CorruptShardError, match=str(shard.path.name)):
        damaged.files.read(0, damaged.shards[0], name, np.array([5]))


def test_unknown_codec_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown compression 'snappy'.*auto, none, gzip"):
        EpisodeStore.create("c/bad-v0", OBS_SPACE, ACT_SPACE, root=tmp_path, compression="snappy")
    with pytest.raises(ValueError, match="gzip level is 0-9"):
        EpisodeStore.create("c/bad-v0", OBS_SPACE, ACT_SPACE, root=tmp_path, compression=12)
    assert not (tmp_path / "c").exists()


def test_a_missing_plugin_package_names_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    codecs.import_plugin_filters.cache_clear()
    monkeypatch.setitem(sys.modules, "hdf5plugin", None)  # `import hdf5plugin` now raises ImportError
    try:
        with pytest.raises(CodecUnavailableError, match="pip install hdf5plugin"):
            EpisodeStore.create("c/zstd-v0", OBS_SPACE, ACT_SPACE, root=tmp_path, compression="zstd")
        assert codecs.column_filter("auto", np.zeros((2, 3), np.float32)) == {}, "raw columns need no plugin"
    finally:
        codecs.import_plugin_filters.cache_clear()


def test_cli_compression_flag(tmp_path: Path) -> None:
    env = {"VCOLLECT_DATASETS_PATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    base = [sys.executable, "-m", "vcollect", "collect", "CartPole-v1", "--num-envs", "2", "--episodes", "3",
            "--seed", "0", "--no-progress", "--dataset", "c/cli-v0"]
    ok = subprocess.run([*base, "--compression", "gzip"], capture_output=True, text=True, env=env, timeout=120,
                        cwd=Path(__file__).parents[1])
    assert ok.returncode == 0, ok.stderr
    assert column_filters(tmp_path / "c" / "cli-v0", "observations") == {1}
    bad = subprocess.run([*base, "--overwrite", "--compression", "snappy"], capture_output=True, text=True,
                         env=env, timeout=120, cwd=Path(__file__).parents[1])
    assert bad.returncode == 2 and "unknown compression 'snappy'" in bad.stderr


def test_chunks_hold_whole_rows_of_about_a_mebibyte() -> None:
    frames = np.zeros((5_000, 4, 84, 84), np.uint8)
    kwargs = codecs.column_filter("auto", frames)
    rows = kwargs["chunks"][0]
    assert kwargs["chunks"][1:] == (4, 84, 84)
    assert rows * frames[0].nbytes <= codecs.CHUNK_BYTES < (rows + 1) * frames[0].nbytes
    assert codecs.column_filter("auto", np.zeros((3, 84, 84), np.uint8))["chunks"] == (3, 84, 84)
    assert codecs.is_image_like(np.zeros((3, 84, 84), np.uint8))  # grayscale frames: two axes per step
    assert not codecs.is_image_like(np.zeros((3, 128), np.uint8))  # Atari RAM: one axis, stays raw
    assert not codecs.is_image_like(np.zeros((3, 84, 84), np.float32))


def test_zstd_columns_are_written_at_the_default_level_and_read_back(tmp_path: Path) -> None:
    """The frames' filter records ``ZSTD_LEVEL`` (as HDF5 stores it: a uint32), and the column reads back exactly."""
    assert codecs.ZSTD_LEVEL < 0, "negative levels decode frames fastest"
    episodes = make_episodes(4, seed=2)
    path = write(tmp_path, "auto", episodes)
    levels = set()
    for shard in (path / "shards").glob("*.h5"):
        with h5py.File(shard, "r") as f:
            names: list[str] = []
            f.visit(names.append)
            frames = f[next(n for n in names if n.endswith("frames") and isinstance(f[n], h5py.Dataset))]
            _, _, options, _ = frames.id.get_create_plist().get_filter(0)
            levels.add(int(np.array(options[0], np.uint32).view(np.int32)))
    assert levels == {codecs.ZSTD_LEVEL}
    assert_same_episodes(load_dataset("c/frames-v0", root=tmp_path), episodes)


def test_an_hdf5plugin_without_negative_levels_writes_level_1(monkeypatch: pytest.MonkeyPatch) -> None:
    import hdf5plugin

    real = hdf5plugin.Zstd

    def old_zstd(clevel: int = 3) -> Any:
        if not 1 <= clevel <= 22:
            raise ValueError("clevel must be in the range [1, 22]")
        return real(clevel=clevel)

    monkeypatch.setattr(hdf5plugin, "Zstd", old_zstd)
    codecs.zstd_filter.cache_clear()
    try:
        assert codecs.column_filter("zstd", np.zeros((8, 84, 84), np.uint8))["compression_opts"] == (1,)
    finally:
        codecs.zstd_filter.cache_clear()


PLAIN_READ = """
import sys
from pathlib import Path
from vcollect.store import load_dataset
ds = load_dataset("c/plain-v0", root=sys.argv[1])
print(ds.total_episodes, sum(len(e) for e in ds.iterate_episodes()), len(ds.verify()))
"""


def write_plain(root: Path, codec: str) -> None:
    """Three episodes of 4x4 frames, each filled with its seed, written with ``codec``."""
    obs = spaces.Box(0, 255, (4, 4), np.uint8)
    with EpisodeStore.create("c/plain-v0", obs, spaces.Discrete(2), root=root, compression=codec) as store:
        for seed in range(3):
            store.write_episode(np.full((5, 4, 4), seed, np.uint8), np.zeros(4, np.int64), np.ones(4),
                                np.array([False, False, False, True]), np.zeros(4, bool), seed=seed, env_id=0)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("damage", ["touch", "lost-manifest"])
def test_a_fresh_process_reads_lz4_and_zstd_shards_it_must_reopen(tmp_path: Path, codec: str, damage: str) -> None:
    """A copied or touched dataset (manifest lines no longer match) is read from its shards by a process that
    has not imported hdf5plugin yet: healthy, not corrupt."""
    import os
    import subprocess
    import sys

    write_plain(tmp_path, codec)
    folder = tmp_path / "c" / "plain-v0"
    if damage == "touch":
        for shard in (folder / "shards").iterdir():
            os.utime(shard, (1.0, 1.0))
    else:
        import shutil

        shutil.rmtree(folder / "manifest")
    done = subprocess.run([sys.executable, "-c", PLAIN_READ, str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    episodes, steps, problems = done.stdout.split()
    assert (int(episodes), int(steps)) == (3, 12)
    if damage == "touch":  # the manifest still lists these shards: verify finds nothing wrong
        assert int(problems) == 0, done.stdout
