"""The Zstandard chunk reader against plain numpy indexing: ranges decoded as streams across the gaps HDF5
leaves between chunks and across chunks stored unfiltered, rows in any order into any places, chunks of one
and of several rows; the shard split sample_steps uses; sampling without reopening HDF5 files."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest
import zstandard
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from vcollect import EpisodeStore, load_dataset
from vcollect.errors import CorruptShardError
from vcollect.store.read.dataset_index import RowGroups
from vcollect.store.read.reader import StoredDataset
from vcollect.store.read.shards import chunk_reader, shard_reader
from vcollect.store.read.shards.chunk_reader import ChunkTable, StackedChunkTables
from vcollect.store.read.shards.zstd_frames import StretchBatch, StretchError

ROWS = 150
POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-decode")
RAW_ROWS = (0, 1, 40, 41, 42, 99, ROWS - 1)  # chunks written as they are, HDF5's filter mask saying so


def column(path: Path, rows_per_chunk: int) -> np.ndarray:
    """Write a Zstandard column of ROWS rows of (3, 20, 20) uint8 to ``path`` and return its rows; the chunks
    holding RAW_ROWS are rewritten unfiltered (filter mask 1), as HDF5 keeps a chunk its filter failed on."""
    rng = np.random.default_rng(rows_per_chunk)
    data = np.repeat(rng.integers(0, 4, (ROWS, 1, 20, 20), dtype=np.uint8) * 60, 3, axis=1)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("col", data=data, chunks=(rows_per_chunk, 3, 20, 20), **hdf5plugin.Zstd(clevel=1))
        for row in RAW_ROWS:
            first = row - row % rows_per_chunk
            chunk = np.zeros((rows_per_chunk, 3, 20, 20), np.uint8)
            chunk[: min(rows_per_chunk, ROWS - first)] = data[first : first + rows_per_chunk]
            ds.id.write_direct_chunk((first, 0, 0, 0), chunk.tobytes(), filter_mask=1)
        first = 70 - 70 % rows_per_chunk  # rewritten 4 bytes longer (a checksum): HDF5 moves it, leaving a gap
        frame = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(
            np.ascontiguousarray(data[first : first + rows_per_chunk]).tobytes())
        ds.id.write_direct_chunk((first, 0, 0, 0), frame)
    return data


@pytest.fixture(scope="module", autouse=True, params=["libzstd", "stream reader"])
def decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test twice: stretches of frames decoded by libzstd's one-shot call, and by python-zstandard's
    stream reader, as where libzstd does not load."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "stream reader":
            for module in (chunk_reader, shard_reader):
                patch.setattr(module, "library", lambda: None)
        elif chunk_reader.library() is None:
            pytest.skip("libzstd does not load here")
        yield request.param


@pytest.fixture(scope="module", params=[1, 4], ids=["one-row-chunks", "four-row-chunks"])
def table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ChunkTable, mmap.mmap, np.ndarray]]:
    path = tmp_path_factory.mktemp("chunks") / "c.h5"
    data = column(path, request.param)
    with h5py.File(path, "r") as f:
        t = ChunkTable(f["col"])
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    yield t, mapped, data
    mapped.close()


def test_the_column_has_gaps_and_unfiltered_chunks(table: tuple[ChunkTable, mmap.mmap, np.ndarray]) -> None:
    t, _, _ = table
    assert t.stored_raw.sum() >= 4 and (~t.stored_raw).sum() >= 10
    filtered_neighbours = ~t.stored_raw[:-1] & ~t.stored_raw[1:]
    assert (t.breaks[:-1] & filtered_neighbours).any(), "no gap in the file between two Zstandard chunks"
    assert (~t.breaks[:-1]).any(), "no chunks back to back"


@settings(max_examples=60, deadline=None)
@given(bounds=st.tuples(st.integers(0, ROWS), st.integers(0, ROWS)))
def test_a_range_reads_exactly_its_rows(table: tuple[ChunkTable, mmap.mmap, np.ndarray], bounds: tuple[int, int]) -> None:
    t, mapped, data = table
    lo, hi = min(bounds), max(bounds)
    got = t.read_range(mapped, lo, hi)
    assert got.shape == data[lo:hi].shape and got.dtype == data.dtype
    np.testing.assert_array_equal(got, data[lo:hi])


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.integers(0, ROWS - 1), max_size=40), seed=st.integers(0, 2**16))
def test_rows_in_any_order_land_in_any_places(table: tuple[ChunkTable, mmap.mmap, np.ndarray], rows: list[int],
                                              seed: int) -> None:
    t, mapped, data = table
    want = np.asarray(rows, dtype=np.int64)
    np.testing.assert_array_equal(t.read_rows(mapped, want), data[want])
    if t.rows_per_chunk == 1:
        places = np.random.default_rng(seed).permutation(len(want) + 3)[: len(want)]
        out = np.zeros((len(want) + 3, *data.shape[1:]), np.uint8)
        t.decode_into(mapped, want, out, places)
        expected = np.zeros_like(out)
        expected[places] = data[want]
        np.testing.assert_array_equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, ROWS - 1), st.integers(0, 30)), max_size=8), seed=st.integers(0, 2**16))
def test_runs_of_rows_land_in_their_places(table: tuple[ChunkTable, mmap.mmap, np.ndarray],
                                           runs: list[tuple[int, int]], seed: int) -> None:
    """Runs of consecutive rows (across gaps, unfiltered chunks and the column's last, padded chunk) each
    decoded into its own place; the rows around the places are left as they were."""
    t, mapped, data = table
    lows = np.asarray([lo for lo, _ in runs], dtype=np.int64)
    counts = np.asarray([min(n, ROWS - lo) for lo, n in runs], dtype=np.int64)
    slots = np.random.default_rng(seed).permutation(len(runs))
    places = slots * 32 + 1
    out = np.full((len(runs) * 32 + 2, *data.shape[1:]), 7, np.uint8)
    t.read_runs(mapped, lows, counts, out, places)
    expected = np.full_like(out, 7)
    for lo, n, place in zip(lows, counts, places):
        expected[place : place + n] = data[lo : lo + n]
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, ROWS - 1), st.integers(0, 30)), max_size=8), seed=st.integers(0, 2**16))
def test_runs_decoded_straight_into_their_margins(table: tuple[ChunkTable, mmap.mmap, np.ndarray],
                                                   runs: list[tuple[int, int]], seed: int) -> None:
    """With a margin of one chunk less one row, whole chunks are decoded around each run's place: the run's
    rows are exact, the margins hold whatever (the rest of the run's first and last chunks), and nothing
    outside the margins is touched."""
    t, mapped, data = table
    margin = t.rows_per_chunk - 1
    lows = np.asarray([lo for lo, _ in runs], dtype=np.int64)
    counts = np.asarray([min(n, ROWS - lo) for lo, n in runs], dtype=np.int64)
    slot = 32 + 2 * margin
    places = np.random.default_rng(seed).permutation(len(runs)) * (slot + 1) + margin + 1
    for threads in (1, 3):  # 3: the streams shared with two pool threads, however few bytes
        out = np.full((len(runs) * (slot + 1) + 2, *data.shape[1:]), 7, np.uint8)
        t.read_runs(mapped, lows, counts, out, places, margin, POOL, threads, parallel_bytes=0)
        free = np.zeros(len(out), dtype=bool)
        for lo, n, place in zip(lows, counts, places):
            np.testing.assert_array_equal(out[place : place + n], data[lo : lo + n])
            free[place - margin : place + n + margin] = n > 0
        assert (out[~free] == 7).all()
    if t.rows_per_chunk > 1:  # a margin the output has no room for is refused
        with pytest.raises(ValueError, match="margin"):
            t.read_runs(mapped, np.array([1]), np.array([2]), out[:2], np.array([0]), margin)


@pytest.mark.parametrize("decoder", ["libzstd"], indirect=True)  # stacked tables are planned for libzstd only
@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, 2), st.integers(0, ROWS - 1), st.integers(0, 30)), max_size=10),
       seed=st.integers(0, 2**16))
def test_runs_of_several_shards_planned_at_once(table: tuple[ChunkTable, mmap.mmap, np.ndarray],
                                                runs: list[tuple[int, int, int]], seed: int) -> None:
    """Stacked tables (the column as three shards' one after the other) plan runs in any of them at once:
    whole chunks decoded around each run's place (across gaps and unfiltered chunks, never from one shard's
    file into the next), exact rows, nothing outside the margins touched; each run read from its own map."""
    t, mapped, data = table
    stacked = StackedChunkTables.of([t, t, t])
    assert stacked is not None and stacked.base.tolist() == [0, t.offsets.size, 2 * t.offsets.size, 3 * t.offsets.size]
    margin = t.rows_per_chunk - 1
    tables = np.asarray([s for s, _, _ in runs], dtype=np.int64)
    lows = np.asarray([lo for _, lo, _ in runs], dtype=np.int64)
    counts = np.asarray([min(n, ROWS - lo) for _, lo, n in runs], dtype=np.int64)
    slot = 32 + 2 * margin
    places = np.random.default_rng(seed).permutation(len(runs)) * (slot + 1) + margin + 1
    out = np.full((len(runs) * (slot + 1) + 2, *data.shape[1:]), 7, np.uint8)
    with memoryview(mapped) as second:
        maps = [mapped, second, mapped]  # one buffer per shard
        batch = StretchBatch(out.reshape(-1), chunk_reader.library(), POOL, 2)
        try:
            stacked.add_runs(maps, ["a", "b", "c"], tables, tables, lows, counts, places, batch)
            batch.run()
        finally:
            batch.close()
    free = np.zeros(len(out), dtype=bool)
    for lo, n, place in zip(lows, counts, places):
        np.testing.assert_array_equal(out[place : place + n], data[lo : lo + n])
        free[place - margin : place + n + margin] = n > 0
    assert (out[~free] == 7).all()
    with pytest.raises(IndexError, match="outside its shard"):  # a run past its shard's rows, not into the next
        stacked.add_runs(maps, ["a", "b", "c"], np.array([0]), np.array([0]), np.array([ROWS - 1]), np.array([2]),
                         np.array([margin]), StretchBatch(out.reshape(-1), chunk_reader.library()))


@pytest.mark.parametrize("decoder", ["libzstd"], indirect=True)  # stacked tables are planned for libzstd only
def test_a_stacked_stretch_outside_its_file_names_the_shard(table: tuple[ChunkTable, mmap.mmap, np.ndarray]) -> None:
    """A run whose chunks lie past the end of its shard's map is refused before any decoding, naming that
    shard (its label), not another one's."""
    t, mapped, data = table
    stacked = StackedChunkTables.of([t, t])
    assert stacked is not None
    out = np.zeros((40, *data.shape[1:]), np.uint8)
    batch = StretchBatch(out.reshape(-1), chunk_reader.library())
    lows = np.array([2, 12 * t.rows_per_chunk], dtype=np.int64)
    with memoryview(mapped) as whole, whole[: int(t.offsets[5])] as short:  # the second file cut before chunk 5
        try:  # caught here, so that its traceback (which holds the buffers) is gone before they are released
            stacked.add_runs([mapped, short], ["first", "second"], np.array([0, 1]), np.array([0, 1]), lows,
                             np.array([3, 3]), np.array([t.rows_per_chunk, 20]), batch)
        except StretchError as exc:
            label, message = exc.label, str(exc)
        else:
            pytest.fail("a stretch past the end of its file was added")
        batch.close()
    assert label == "second" and "outside the file" in message
    assert (out == 0).all()


def test_a_damaged_frame_in_a_range_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    data = column(path, 1)
    with h5py.File(path, "r") as f:
        t = ChunkTable(f["col"])
    k = int(np.flatnonzero(~t.stored_raw & ~t.breaks)[3])  # a Zstandard frame inside a stretch of them
    with open(path, "r+b") as f:
        f.seek(int(t.offsets[k]))
        f.write(b"\x00\x00\x00\x00")  # its magic number
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    with pytest.raises(Exception, match="(?i)zstd|frame|decoded"):
        t.read_range(mapped, k - 1, k + 2)
    # decoded by a pool thread (four one-chunk runs in three shares by bytes, the damaged one in the last,
    # a pool thread's): its error is this call's
    good = [int(r) for r in np.flatnonzero(~t.stored_raw) if abs(r - k) > 1][:3]
    out = np.zeros((4, *data.shape[1:]), np.uint8)
    with pytest.raises(Exception, match="(?i)zstd|frame|decoded"):
        t.read_runs(mapped, np.array([*good, k]), np.ones(4, dtype=np.int64), out, np.arange(4), 0, POOL, 3,
                    parallel_bytes=0)
    t.read_runs(mapped, np.array(good), np.ones(3, dtype=np.int64), out, np.arange(3), 0, POOL, 3, parallel_bytes=0)
    np.testing.assert_array_equal(out[:3], data[good])
    good = np.flatnonzero(~t.stored_raw)[-3:]  # the table's decoder still decodes after the failure
    np.testing.assert_array_equal(t.read_rows(mapped, good), data[good])
    mapped.close()


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5), picks=st.lists(st.integers(0, 10**6), max_size=30))
def test_row_groups_split_rows_by_shard_in_file_order(sizes: list[int], picks: list[int]) -> None:
    base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(base[-1])
    rows = np.asarray([p % total for p in picks] if total else [], dtype=np.int64)
    groups = RowGroups(rows, base)
    seen = []
    for s, where, local in groups.parts:
        assert len(where) == len(local) > 0
        np.testing.assert_array_equal(base[s] + local, rows[where])
        assert ((local >= 0) & (local < sizes[s])).all() and (np.diff(local) >= 0).all()
        seen += where.tolist()
    assert sorted(seen) == list(range(len(rows)))
    assert [s for s, _, _ in groups.parts] == sorted({int(np.searchsorted(base, r, "right") - 1) for r in rows})


def test_sampling_many_shards_opens_no_hdf5_file_again(tmp_path: Path) -> None:
    """Once a shard's chunk tables are read, its rows need only the file's map: with more shards than half the
    open-file limit an HDF5 handle per shard per call would be reopened otherwise."""
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with EpisodeStore.create("c/many-v0", space, spaces.Discrete(3), root=tmp_path, shard_steps=20) as store:
        for e in range(6):
            obs = np.full((21, 4, 84, 84), e, np.uint8)
            store.write_episode(obs, np.zeros(20, np.int64), np.full(20, float(e)), np.r_[np.zeros(19, bool), True],
                                np.zeros(20, bool), seed=None, env_id=0)
    data = load_dataset("c/many-v0", root=tmp_path, max_open_files=4)
    assert len(StoredDataset(data).shard_paths) == 6
    first = data.sample_steps(64, cache_bytes=0)  # reads the chunk tables
    batch = data.sample_steps(64, cache_bytes=0)
    assert all(kind == "map" for _, kind in data._index.files._open), "an HDF5 file was reopened to sample"
    for b in (first, batch):
        np.testing.assert_array_equal(b["observations"][:, 0, 0, 0], b["rewards"])
        np.testing.assert_array_equal(b["next_observations"][:, 0, 0, 0], b["rewards"])


def test_a_damaged_chunk_read_by_an_episode_names_the_shard(tmp_path: Path) -> None:
    space = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with EpisodeStore.create("c/bad-v0", space, spaces.Discrete(3), root=tmp_path) as store:
        obs = np.repeat(np.arange(21, dtype=np.uint8)[:, None, None, None], 4 * 84 * 84, axis=1).reshape(21, 4, 84, 84)
        store.write_episode(obs, np.zeros(20, np.int64), np.zeros(20), np.r_[np.zeros(19, bool), True],
                            np.zeros(20, bool), seed=None, env_id=0)
    data = load_dataset("c/bad-v0", root=tmp_path)
    np.testing.assert_array_equal(data[0].observations, obs)
    t = data._index.files._tables[(0, "observations")]
    assert isinstance(t, ChunkTable)
    data.close()
    with open(StoredDataset(data).shard_paths[0], "r+b") as f:
        f.seek(int(t.offsets[7]) + int(t.sizes[7]) // 2)
        f.write(b"\xff" * 16)
    with pytest.raises(CorruptShardError, match=StoredDataset(data).shard_paths[0].name):
        load_dataset("c/bad-v0", root=tmp_path)[0]


def _crafted_first_chunk(root: Path, compression: str | int) -> Path:
    """A dataset of one (8, 8) frame episode whose first observation chunk is replaced by a "bomb": a Zstandard
    frame declaring 256 GiB, or a deflate stream inflating to 64 MiB; its manifest is gone (as if lost), so
    the shard is opened and read."""
    import shutil
    import zlib

    space = spaces.Box(0, 255, (8, 8), np.uint8)
    with EpisodeStore.create("c/bomb-v0", space, spaces.Discrete(3), root=root, compression=compression) as store:
        store.write_episode(np.zeros((11, 8, 8), np.uint8), np.zeros(10, np.int64), np.zeros(10),
                            np.arange(10) == 9, np.zeros(10, bool), seed=None, env_id=0)
    (shard,) = store.shards_written
    if compression == "zstd":
        frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"\0" * 64)
        assert frame[4] == 0x20  # single segment, a one-byte content size: rewritten as an eight-byte one
        data = frame[:4] + bytes([0xE0]) + (1 << 38).to_bytes(8, "little") + frame[6:]
    elif compression == "lz4":  # its header's decoded size (8 bytes, big-endian) rewritten
        with h5py.File(shard, "r") as f:
            _, chunk = f["observations"].id.read_direct_chunk((0, 0, 0))
        assert int.from_bytes(chunk[:8], "big") == 704  # 11 frames of 8x8 in the first chunk
        data = (1 << 38).to_bytes(8, "big") + chunk[8:]
    else:
        data = zlib.compress(b"\0" * (64 << 20), 9)
    with h5py.File(shard, "r+") as f:
        f["observations"].id.write_direct_chunk((0, 0, 0), data)
    shutil.rmtree(root / "c" / "bomb-v0" / "manifest")
    return shard


@pytest.mark.parametrize("compression", ["zstd", 6, "lz4"])
def test_a_chunk_decoding_past_its_size_is_a_corrupt_shard_never_memory_or_silence(
    tmp_path: Path, compression: str | int
) -> None:
    shard = _crafted_first_chunk(tmp_path, compression)
    data = load_dataset("c/bomb-v0", root=tmp_path)
    why = ("inflates to more than its 704 bytes" if compression == 6
           else f"declares 274877906944 decoded bytes{', more than its 704' if compression == 'lz4' else ''}")
    for read in (lambda: data.steps_at(np.arange(4), cache_bytes=0), lambda: data[0],
                 lambda: data.sample_steps(8, cache_bytes=2**30)):
        with pytest.raises(CorruptShardError, match=f"{shard.name}.*chunk 0 {why}"):
            read()
    assert any(why in p for p in data.verify())


def test_an_lz4_episode_table_chunk_declaring_too_much_is_damage_naming_the_shard(tmp_path: Path) -> None:
    """The episodes/ table is decoded by HDF5 while a shard is opened: its chunks are held to their size too."""
    import shutil

    space = spaces.Box(0, 255, (8, 8), np.uint8)
    with EpisodeStore.create("c/table-v0", space, spaces.Discrete(3), root=tmp_path, compression="lz4") as store:
        for seed in range(2):
            store.write_episode(np.zeros((11, 8, 8), np.uint8), np.zeros(10, np.int64), np.zeros(10),
                                np.arange(10) == 9, np.zeros(10, bool), seed=seed, env_id=0)
    (shard,) = store.shards_written
    with h5py.File(shard, "r+") as f:
        column = f["episodes/length"]
        assert column.id.get_create_plist().get_filter(0)[0] == 32004  # HDF5's LZ4 filter
        _, chunk = column.id.read_direct_chunk((0,))
        column.id.write_direct_chunk((0,), (1 << 40).to_bytes(8, "big") + chunk[8:])
    shutil.rmtree(tmp_path / "c" / "table-v0" / "manifest")  # as if lost: the shard is opened and its table read
    with pytest.raises(CorruptShardError, match=f"{shard.name}.*episodes/length.*chunk 0 declares 1099511627776 "
                       "decoded bytes, more than its 16"):
        load_dataset("c/table-v0", root=tmp_path)


def test_a_deflate_chunk_cut_short_is_an_error(tmp_path: Path) -> None:
    import zlib

    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("col", data=np.ones((8, 16), np.uint8), chunks=(4, 16), compression="gzip")
        ds.id.write_direct_chunk((4, 0), zlib.compress(b"\1" * 40))
    with h5py.File(path, "r") as f:
        t = ChunkTable(f["col"])
    assert t.codec == "gzip"
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    np.testing.assert_array_equal(t.read_range(mapped, 0, 4), np.ones((4, 16), np.uint8))
    with pytest.raises(ValueError, match="chunk 1 decoded to 40 bytes, expected at least 64"):
        t.read_rows(mapped, np.array([5]))
    mapped.close()


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=5),
       picks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=12), window=st.integers(2, 4))
def test_row_groups_of_windows_keep_each_window_together(sizes: list[int], picks: list[tuple[int, int]],
                                                         window: int) -> None:
    """Windows of rows (each inside one shard, rows repeated where a window is clamped) split by shard: every
    row once, in its shard's part, the windows ordered by their first row, each window's rows together."""
    base = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    shards = [p % len(sizes) for p, _ in picks]
    starts = [int(base[s]) + q % sizes[s] for s, (_, q) in zip(shards, picks)]
    rows = np.asarray([[min(a + i, int(base[s + 1]) - 1) for i in range(window)] for s, a in zip(shards, starts)],
                      dtype=np.int64).reshape(-1)
    groups = RowGroups(rows, base, window)
    seen = []
    for s, where, local in groups.parts:
        np.testing.assert_array_equal(base[s] + local, rows[where])
        assert ((local >= 0) & (local < sizes[s])).all()
        assert (np.diff(where.reshape(-1, window), axis=1) == 1).all() and (where.reshape(-1, window)[:, 0] % window == 0).all()
        assert (np.diff(rows[where][::window]) >= 0).all()
        seen += where.tolist()
    assert sorted(seen) == list(range(len(rows)))
    assert [s for s, _, _ in groups.parts] == sorted(set(shards))
