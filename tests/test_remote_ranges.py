"""Reading a remote dataset in place block by block: block lists written by uploads, reads equal to a local
copy's on every read path and codec, only the blocks a read touches fetched, each block checked, and the
whole-shard fetch where a remote holds no (matching) block list."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from remote_servers import remote_url, s3_server_fixture  # noqa: F401 - fixtures

import vcollect
from vcollect.errors import RemoteIntegrityError
from vcollect.remote.blocks import BLOCK_BYTES, BlockHashes, hash_file
from vcollect.remote.ranged_reads import RangedShard
from vcollect.store import EpisodeStore, load_dataset

ID = "frames-v0"
FRAME = spaces.Box(0, 255, (84, 84), np.uint8)
ACTIONS = spaces.Discrete(6)


def write_frames(root: Path, compression: str, lengths: list[int], per_shard: int = 2) -> None:
    """Episodes of noisy 84x84 frames (many 64 KiB blocks a shard), ``per_shard`` episodes a shard."""
    store = EpisodeStore.create(ID, FRAME, ACTIONS, root=root, compression=compression)
    rng = np.random.default_rng(len(lengths))
    for i, steps in enumerate(lengths):
        frames = rng.integers(0, 32, (steps + 1, 84, 84), dtype=np.uint8)  # compressible, not constant
        store.write_episode(frames, rng.integers(0, 6, steps), rng.normal(size=steps),
                            np.eye(1, steps, steps - 1, dtype=bool)[0], np.zeros(steps, dtype=bool),
                            seed=i, env_id=0)
        if (i + 1) % per_shard == 0:
            store.flush()
    store.close()


def uploaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str, lengths: list[int],
             per_shard: int = 2, url: str | None = None) -> tuple[str, Any]:
    """Frames written under ``tmp_path/a`` and uploaded to ``url`` (default: a fresh folder remote), with the
    cache of datasets read in place under ``tmp_path``: (the remote's URL, the local dataset)."""
    monkeypatch.setenv("VCOLLECT_CACHE", str(tmp_path / "cache"))
    write_frames(tmp_path / "a", compression, lengths, per_shard)
    url = url or remote_url("file", None, None, tmp_path)
    vcollect.upload_dataset(ID, url, root=tmp_path / "a")
    return url, load_dataset(ID, tmp_path / "a")


def remote_folder(url: str) -> Path:
    return Path(url.removeprefix("file://")) / ID


def hook(dataset: Any) -> Any:
    return dataset._index.files.before_open  # noqa: SLF001 - the cache's own counters


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("compression", ["none", "zstd", "gzip", "lz4"])
def test_reads_in_place_equal_the_local_copy_on_every_path(compression: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    url, local = uploaded(tmp_path, monkeypatch, compression, [160, 145, 170, 130])
    blocks = sorted(p.name for p in (remote_folder(url) / "blocks").iterdir())
    shards = sorted(p.name for p in (remote_folder(url) / "shards").iterdir())
    assert blocks == [f"{s}.json" for s in shards]  # a block list beside every shard
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False)
    cache = hook(streamed)
    positions = np.array([5, 400])
    same(streamed.steps_at(positions, cache_bytes=0), local.steps_at(positions, cache_bytes=0))
    total = sum(line.size for line in cache.lines.values())
    # the blocks of 2 rows (and of the chunk index HDF5 reads, for compressed columns), not their shards; an
    # LZ4 column is decoded by HDF5, and every chunk's header is checked before it does: all its blocks
    if compression == "lz4":
        assert cache.fetched_bytes <= total
    else:
        assert 0 < cache.fetched_bytes < total / (2 if compression == "none" else 1)
    local.set_seed(5)
    streamed.set_seed(5)
    same(streamed.sample_slices(3, 8, seed=1, cache_bytes=0), local.sample_slices(3, 8, seed=1, cache_bytes=0))
    same(streamed.sample_slices(3, 8, seed=2, cache_bytes=0, stacks="view"),
         local.sample_slices(3, 8, seed=2, cache_bytes=0, stacks="view"))
    for mine, theirs in zip(streamed.iterate_episodes(), local.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(mine.observations, theirs.observations)
        np.testing.assert_array_equal(mine.actions, theirs.actions)
        np.testing.assert_array_equal(mine.rewards, theirs.rewards)
    read_all = cache.fetched_bytes
    assert total - 3 * BLOCK_BYTES <= read_all <= total  # every block holding rows, once
    same(streamed.steps_at(positions, cache_bytes=0), local.steps_at(positions, cache_bytes=0))
    assert cache.fetched_bytes == read_all


def test_a_sample_fetches_the_blocks_of_its_rows_over_s3(s3_server: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url, local = uploaded(tmp_path, monkeypatch, "none", [150, 150, 150, 150],
                          url=remote_url("s3", s3_server, None, tmp_path))
    streamed = vcollect.load_dataset(ID, remote=url, stream=True, prefetch=False)
    positions = np.array([3, 170, 320, 599])
    same(streamed.steps_at(positions, cache_bytes=0), local.steps_at(positions, cache_bytes=0))
    cache = hook(streamed)
    # 4 observation pairs, actions, rewards and flags: a few blocks a shard, far below the shards' ~4.2 MB
    assert cache.fetched_bytes <= 16 * BLOCK_BYTES < sum(line.size for line in cache.lines.values())


def test_a_block_altered_on_the_remote_is_refused_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, local = uploaded(tmp_path, monkeypatch, "none", [150, 150], per_shard=1)
    first = sorted((remote_folder(url) / "shards").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte in a middle block of the first shard's frames
    first.write_bytes(bytes(data))
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False)
    np.testing.assert_array_equal(streamed[1].observations, local[1].observations)  # the other shard reads
    with pytest.raises(RemoteIntegrityError, match=r"block \d+ .*does not match its SHA-256"):
        for episode in streamed.iterate_episodes([0]):
            episode.observations.sum()


def test_without_a_matching_block_list_the_shard_is_fetched_whole(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    url, local = uploaded(tmp_path, monkeypatch, "none", [150, 150], per_shard=1)
    lists = sorted((remote_folder(url) / "blocks").iterdir())
    lists[0].unlink()  # as a dataset uploaded before block lists existed
    other = BlockHashes.decode(lists[1].read_bytes())
    lists[1].write_bytes(BlockHashes(other.size, "0" * 64, other.block_bytes, other.digests).encode())  # not its shard's
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False)
    cache = hook(streamed)
    sizes = [cache.lines[name].size for name in sorted(cache.lines)]
    same(streamed.steps_at([0], cache_bytes=0), local.steps_at([0], cache_bytes=0))
    assert cache.fetched_bytes == sizes[0]
    same(streamed.steps_at([200], cache_bytes=0), local.steps_at([200], cache_bytes=0))
    assert cache.fetched_bytes == sizes[0] + sizes[1]
    report = vcollect.upload_dataset(ID, url, root=tmp_path / "a")  # adds the missing list, sends no shard
    assert (report.shards, report.shards_kept) == (0, 2)
    assert sorted(p.name for p in (remote_folder(url) / "blocks").iterdir()) == [p.name for p in lists]


def test_the_rest_is_fetched_in_the_background_within_the_cache(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, local = uploaded(tmp_path, monkeypatch, "auto", [150, 150, 150, 150], per_shard=1)
    streamed = vcollect.load_dataset(f"{url}/{ID}")
    cache = hook(streamed)
    same(streamed.steps_at([7], cache_bytes=0), local.steps_at([7], cache_bytes=0))
    assert cache.wait_for_prefetch(60) and cache.prefetch_error is None
    total = sum(line.size for line in cache.lines.values())
    assert cache.fetched_bytes == cache.held_bytes() == total  # every block, once
    copy = pickle.loads(pickle.dumps(cache))
    assert cache.prefetch and not copy.prefetch  # a DataLoader worker's copy reads only what it touches
    for mine, theirs in zip(streamed.iterate_episodes(), local.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(mine.observations, theirs.observations)
    assert cache.fetched_bytes == total
    largest = max(line.size for line in cache.lines.values())
    small = vcollect.load_dataset(f"{url}/{ID}", cache_bytes=2 * largest)
    small.steps_at([7], cache_bytes=0)
    assert hook(small).wait_for_prefetch(60)
    assert 0 < hook(small).held_bytes() <= 2 * largest  # it stops where the cache is full


def test_block_lists_round_trip_and_refuse_malformed_text(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(3 * 1000 + 17))
    blocks = hash_file(path, 1000)
    assert (blocks.size, blocks.num_blocks, blocks.sha256) == (3017, 4, hashlib.sha256(path.read_bytes()).hexdigest())
    assert BlockHashes.decode(blocks.encode()) == blocks
    assert blocks.matches(3, path.read_bytes()[3000:]) and not blocks.matches(3, path.read_bytes()[2999:])
    for bad, message in [(b"{", "not JSON"), (b"[]", "not a block list"),
                         (blocks.encode().replace(b'"size": 3017', b'"size": 5017'), "digests for 6 blocks")]:
        with pytest.raises(ValueError, match=message):
            BlockHashes.decode(bad)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 5000), block=st.integers(1, 700),
       reads=st.lists(st.tuples(st.integers(0, 5200), st.integers(0, 900)), max_size=6), fill=st.integers(1, 3000))
def test_ranged_shard_holds_exactly_what_was_asked_for(tmp_path_factory: pytest.TempPathFactory, size: int, block: int,
                                                       reads: list[tuple[int, int]], fill: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    folder = tmp_path_factory.mktemp("ranged")
    source = folder / "source"
    source.write_bytes(data)
    placeholder = folder / "shard"
    with open(placeholder, "wb") as f:
        f.truncate(size)
    asked: list[tuple[int, int]] = []

    def fetch(starts: list[int], stops: list[int], background: bool) -> list[bytes]:
        asked.extend(zip(starts, stops))
        return [data[a:b] for a, b in zip(starts, stops)]

    shard = RangedShard(placeholder, hash_file(source, block), fetch, "test shard")
    present: set[int] = set()
    for start, length in reads:
        before = len(asked)
        shard.ensure(np.array([start]), np.array([start + length]))
        end = min(start + length, size)
        wanted = set(range(start // block, -(-end // block))) if end > start else set()
        fetched = {i for a, b in asked[before:] for i in range(a // block, -(-b // block))}
        expected: set[int] = set()  # the missing blocks, and those between two of them at most 4 apart
        missing = sorted(wanted - present)
        for i, j in zip(missing, missing[1:]):
            if j - i <= 5:
                expected |= set(range(i, j))
        assert fetched == expected | set(missing)
        present |= fetched
        mapped = shard.open_map() if size else None
        for i in present:
            assert mapped is not None and mapped[i * block : (i + 1) * block] == data[i * block : (i + 1) * block]
    assert shard.held_bytes == sum(min(block, size - i * block) for i in present)
    before = len(asked)
    while shard.fill_some(fill):  # the background fill: the rest, each request from the first missing block
        start, _ = asked[-1]
        assert start // block not in present
        present |= set(range(start // block, -(-asked[-1][1] // block)))
    assert shard.held_bytes == size and shard.missing_bytes == 0
    assert len(asked) - before <= -(-size // max(block, fill // block * block)) + len(reads)
    if size:
        assert shard.open_map()[:] == data



def test_a_shard_evicted_while_its_background_fetch_is_under_way_keeps_nothing_of_it(
        s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The background fetch of shard A has a range under way (held at the server) when a read of shard B evicts A.
    # That range is not written into A's file (the cache no longer counts A), no later background range of A is
    # asked for, and a reader that still holds A open reads its rows as the local copy's, fetching what it needs.
    from vcollect.remote import streaming

    url, local = uploaded(tmp_path, monkeypatch, "none", [150, 150], per_shard=1,
                          url=remote_url("s3", s3_server, None, tmp_path))
    monkeypatch.setattr(streaming, "_PREFETCH_BYTES", 4 * BLOCK_BYTES)  # the background fetch in small steps
    monkeypatch.setattr(streaming, "_PREFETCH_STREAMED_BYTES", 4 * BLOCK_BYTES)
    size = max(p.stat().st_size for p in (tmp_path / "a" / ID / "shards").iterdir())
    streamed = vcollect.load_dataset(ID, remote=url, stream=True, cache_bytes=size)
    cache = hook(streamed)
    first, second = sorted(cache.lines)  # the background fetch takes them in this order
    fs = cache.remote.fs
    cat_ranges = fs.cat_ranges
    under_way, release = threading.Event(), threading.Event()
    background_calls: list[int] = []

    def held_at_the_server(paths: list[str], *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("vcollect-prefetch") and paths[0].endswith(first):
            background_calls.append(len(paths))
            if len(background_calls) == 2:  # A's second background range: held until A is evicted
                under_way.set()
                assert release.wait(60), "the test never released the held fetch"
        return cat_ranges(paths, *args, **kwargs)

    monkeypatch.setattr(fs, "cat_ranges", held_at_the_server)
    same(streamed.steps_at([3], cache_bytes=0), local.steps_at([3], cache_bytes=0))  # opens A, starts prefetching
    shard_a = cache._held[first]  # noqa: SLF001
    assert under_way.wait(60), "the background fetch of A never started its second range"
    rows_b = np.arange(150, 300)
    same(streamed.steps_at(rows_b, cache_bytes=0), local.steps_at(rows_b, cache_bytes=0))  # all of B
    assert first not in cache._held and second in cache._held  # noqa: SLF001 - A was evicted, its fetch under way
    a_when_evicted = shard_a.held_bytes
    fetched_when_evicted = cache.fetched_bytes
    release.set()
    assert cache.wait_for_prefetch(60) and cache.prefetch_error is None
    assert shard_a.held_bytes == a_when_evicted, "the range under way was written into the evicted shard's file"
    assert cache.fetched_bytes == fetched_when_evicted
    assert len(background_calls) == 2  # no later background range of A
    assert cache.held_bytes() <= size
    # a reader holding A open still reads it whole: what it needs is fetched into the file it holds
    rows_a = np.arange(0, 150)
    same(streamed.steps_at(rows_a, cache_bytes=0), local.steps_at(rows_a, cache_bytes=0))
    assert shard_a.held_bytes > a_when_evicted


def open_files_under(folder: Path) -> int:
    """This process's open file descriptors on files under ``folder``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
    return count


def test_more_shards_than_the_open_file_bound_read_whole_and_keep_their_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shard read block by block holds its file open; past the cache's bound the least recently opened
    let go of theirs (not of their blocks), so the files open stay bounded however many shards a read
    touches, and reading them again fetches nothing."""
    url, local = uploaded(tmp_path, monkeypatch, "none", [6] * 24, per_shard=1)
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False, max_open_files=4)
    cache = hook(streamed)
    cache.max_open_ranged = 3
    opened = []
    for mine, theirs in zip(streamed.iterate_episodes(), local.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(mine.observations, theirs.observations)
        np.testing.assert_array_equal(mine.actions, theirs.actions)
        opened.append(open_files_under(tmp_path / "cache"))
    assert cache.open_ranged() <= 3 and len(cache.lines) == 24
    # 3 RangedShards, the reader's 4 maps (each its own descriptor) and the RangedShards those still hold
    assert max(opened) <= 3 + 2 * 4, opened
    fetched = cache.fetched_bytes
    assert fetched == sum(line.size for line in cache.lines.values())  # each shard's blocks once
    for mine, theirs in zip(streamed.iterate_episodes(), local.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(mine.observations, theirs.observations)
    assert cache.fetched_bytes == fetched  # the blocks of the shards that let go of their files stayed


RLIMIT_READER = """
import resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
import vcollect
data = vcollect.load_dataset(sys.argv[1], prefetch=False)
print(sum(1 for _ in data.iterate_episodes()), data.sample_steps(64)["actions"].shape[0], flush=True)
"""


def test_a_read_in_place_of_more_shards_than_file_descriptors_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process allowed 128 open files reads a dataset of 160 shards in place, every episode (each shard
    held its file open for the process's life before: "Too many open files", reported as a corrupt shard)."""
    import subprocess
    import sys

    monkeypatch.setenv("VCOLLECT_CACHE", str(tmp_path / "cache"))
    store = EpisodeStore.create(ID, spaces.Box(-1, 1, (3,), np.float32), ACTIONS, root=tmp_path / "a")
    for i in range(160):
        store.write_episode(np.zeros((3, 3), np.float32), np.zeros(2, np.int64), np.ones(2), np.array([False, True]),
                            np.zeros(2, bool), seed=i, env_id=0)
        store.flush()
    store.close()
    url = remote_url("file", None, None, tmp_path)
    vcollect.upload_dataset(ID, url, root=tmp_path / "a")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", RLIMIT_READER, f"{url}/{ID}"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["160", "64"]


def test_a_session_folder_goes_with_the_last_dataset_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each dataset opened in place lays out a session folder in the cache (placeholders and fetched blocks);
    it is removed once no Dataset or view of it is left, so a program that opens datasets again and again
    keeps one session's bytes, not every one's."""
    url, local = uploaded(tmp_path, monkeypatch, "none", [40, 30, 50])
    sessions = tmp_path / "cache" / "sessions"
    for _ in range(3):
        streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False)
        view = streamed.filter_episodes(lambda episode: episode.id != 1)
        assert len(list(sessions.iterdir())) == 1
        del streamed
        assert len(list(sessions.iterdir())) == 1  # the view still reads from it
        for mine, theirs in zip(view.iterate_episodes(), [ep for ep in local.iterate_episodes() if ep.id != 1],
                                strict=True):
            np.testing.assert_array_equal(mine.observations, theirs.observations)
        del view
        assert list(sessions.iterdir()) == []


def test_a_remote_failing_during_a_read_in_place_is_the_remotes_error_not_a_corrupt_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fetch that fails while a read in place asks for blocks raises the remote's error (running it again
    resumes), not CorruptShardError about the local placeholder, which is whole as far as it goes."""
    from vcollect.errors import CorruptShardError, RemoteTransferError

    url, _ = uploaded(tmp_path, monkeypatch, "none", [40, 30])
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False)
    cache = hook(streamed)

    def failing(line: Any) -> Any:
        def fetch(starts: list[int], stops: list[int], background: bool) -> list[bytes]:
            raise RemoteTransferError(f"reading shard {line.shard}: remote {url!r} stopped answering (test); "
                                      "run it again to resume")
        return fetch

    monkeypatch.setattr(cache, "_fetcher", failing)
    with pytest.raises(RemoteTransferError, match="run it again to resume") as raised:
        streamed.steps_at(np.array([3, 50]), cache_bytes=0)
    assert not isinstance(raised.value, CorruptShardError)


def test_the_background_fetch_ends_with_the_last_dataset_using_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background fetch holds the cache for one range at a time: once no Dataset uses the cache, it stops
    after the range under way instead of fetching the rest of the dataset for nobody, and the session goes."""
    import threading
    import weakref

    from vcollect.remote import streaming

    monkeypatch.setattr(streaming, "_PREFETCH_BYTES", BLOCK_BYTES)  # many ranges: one at a time below
    monkeypatch.setattr(streaming, "_PREFETCH_STREAMED_BYTES", BLOCK_BYTES)
    url, _ = uploaded(tmp_path, monkeypatch, "none", [160, 145, 170])
    streamed = vcollect.load_dataset(f"{url}/{ID}")  # prefetch on (the default)
    cache = hook(streamed)
    total = sum(line.size for line in cache.lines.values())
    gate, background = threading.Event(), []
    cache_ref = weakref.ref(cache)  # the test holds no reference to the cache

    def gated(line: Any) -> Any:  # the cache's own fetches, the background ones held at the gate
        fetch = streaming.ShardCache._fetcher(cache_ref(), line)  # noqa: SLF001

        def held_fetch(starts: list[int], stops: list[int], in_background: bool) -> list[bytes]:
            if in_background:
                background.append(sum(b - a for a, b in zip(starts, stops)))
                assert gate.wait(30)
            return fetch(starts, stops, in_background)
        return held_fetch

    cache._fetcher = gated  # noqa: SLF001 - set on the object itself: monkeypatch would keep the cache alive
    streamed.steps_at(np.array([0]), cache_bytes=0)  # the first read starts the background fetch
    filler, sessions = cache._filler, tmp_path / "cache" / "sessions"  # noqa: SLF001
    assert filler is not None and len(list(sessions.iterdir())) == 1
    del streamed, cache  # no collection needed: nothing refers back to the cache
    gate.set()
    filler.join(30)
    assert not filler.is_alive() and cache_ref() is None
    assert len(background) <= 2 and sum(background) < total / 4, (background, total)
    assert list(sessions.iterdir()) == []


@pytest.mark.parametrize("cache_bytes", [2 << 30, 300_000])
def test_random_reads_past_the_open_file_bound_equal_the_local_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_bytes: int
) -> None:
    """Random rows from many shards through a bound of 2 open RangedShards, with room for every shard or for
    about two (closed shards then dropped too, their placeholders put back): every read equals the local
    copy's, whether a shard is read through a new RangedShard, one that took up a closed one's blocks, or
    one whose placeholder was put back meanwhile."""
    url, local = uploaded(tmp_path, monkeypatch, "zstd", [20 + i for i in range(12)], per_shard=1)
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False, cache_bytes=cache_bytes, max_open_files=3)
    cache = hook(streamed)
    cache.max_open_ranged = 2
    rng = np.random.default_rng(7)
    for _ in range(25):
        positions = rng.integers(0, local.total_steps, size=int(rng.integers(1, 12)))
        same(streamed.steps_at(positions, cache_bytes=0), local.steps_at(positions, cache_bytes=0))
        assert cache.open_ranged() <= 2
    for mine, theirs in zip(streamed.iterate_episodes(), local.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(mine.observations, theirs.observations)


def test_a_closed_shard_whose_placeholder_was_put_back_elsewhere_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard that let go of its file keeps the blocks it had only while its placeholder is the same file: put
    back meanwhile (as a DataLoader worker's copy of the cache does when it drops the shard), the next read
    fetches the blocks again rather than trusting blocks that file no longer holds."""
    url, local = uploaded(tmp_path, monkeypatch, "none", [40, 30, 50], per_shard=1)
    streamed = vcollect.load_dataset(f"{url}/{ID}", prefetch=False, max_open_files=1)
    cache = hook(streamed)
    cache.max_open_ranged = 1
    first = sorted(cache.lines)[0]
    same(streamed.steps_at(np.array([0]), cache_bytes=0), local.steps_at(np.array([0]), cache_bytes=0))
    same(streamed.steps_at(np.array([45]), cache_bytes=0), local.steps_at(np.array([45]), cache_bytes=0))
    assert cache.open_ranged() == 1  # the first shard let go of its file, keeping its blocks
    placeholder = cache.folder / "shards" / first
    fresh = placeholder.with_name(".put-back")
    with open(fresh, "wb") as f:  # what another process's cache does when it drops the shard: a new empty file
        f.truncate(placeholder.stat().st_size)
    os.replace(fresh, placeholder)
    fetched = cache.fetched_bytes
    same(streamed.steps_at(np.array([0, 1]), cache_bytes=0), local.steps_at(np.array([0, 1]), cache_bytes=0))
    assert cache.fetched_bytes > fetched  # its blocks fetched again, into the new file
