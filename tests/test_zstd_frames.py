"""Stretches of Zstandard frames decoded by libzstd's one-shot call: the bytes python-zstandard gives, exactly the
stretch's size or an error naming the stretch and its buffer, addresses checked before any decode, and
helper threads that decode while stretches are still being added and stop when the batch is closed."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zstandard

from vcollect.store.read.shards import zstd_frames
from vcollect.store.read.shards.zstd_frames import StretchBatch, StretchError, library

LIB = library()
pytestmark = pytest.mark.skipif(LIB is None, reason="libzstd does not load here")


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-stretches") as executor:
        yield executor


def frames(count: int, seed: int) -> tuple[bytes, list[int], list[bytes]]:
    """``count`` frames (every other one with a checksum) back to back, where each begins, and what each holds."""
    rng = np.random.default_rng(seed)
    held = [(rng.integers(0, 3, int(rng.integers(1, 5000)), dtype=np.uint8) * 80).tobytes() for _ in range(count)]
    packed = [zstandard.ZstdCompressor(level=1, write_checksum=i % 2 == 0).compress(h) for i, h in enumerate(held)]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in packed])]).tolist()
    return b"".join(packed), offsets, held


def one(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@pytest.mark.parametrize("threads", [1, 3])
def test_stretches_decode_to_what_zstandard_gives_and_touch_nothing_else(pool: ThreadPoolExecutor,
                                                                        threads: int) -> None:
    """Forty stretches of one to four frames each, from two buffers, into places with gaps between them: each
    place holds its frames' bytes, every gap keeps its value; with helpers, as with the caller alone."""
    assert LIB is not None
    sources = [frames(60, seed) for seed in (1, 2)]
    out = np.full(2 * 60 * 5000 + 4000, 7, np.uint8)
    want = out.copy()
    batch = StretchBatch(out, LIB, pool if threads > 1 else None, threads)
    place = 3
    for b, (data, offsets, held) in enumerate(sources):
        cuts = [0, *range(1, 60, 3), 60]
        starts, stops, places, sizes = [], [], [], []
        for a, z in zip(cuts[:-1], cuts[1:]):
            size = sum(len(h) for h in held[a:z])
            starts.append(offsets[a])
            stops.append(offsets[z])
            places.append(place)
            sizes.append(size)
            want[place : place + size] = np.frombuffer(b"".join(held[a:z]), np.uint8)
            place += size + 11
        batch.add(data, one(starts), one(stops), one(places), one(sizes), one(cuts[:-1]), one(cuts[1:]))
        batch.label(f"buffer {b}")
    batch.run()
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_stretch_of_other_bytes_is_an_error_naming_it_and_its_buffer(pool: ThreadPoolExecutor, threads: int) -> None:
    """A stretch declared one byte short (never written past), one byte long, with a damaged checksum or a
    damaged magic number: a StretchError naming its chunks, what went wrong, and the label of its buffer."""
    assert LIB is not None
    data, offsets, held = frames(4, 5)
    size = sum(map(len, held))
    cases: list[tuple[bytes, int, str]] = [
        (data, size - 1, f"chunks 0 to 3 decoded to more bytes, expected {size - 1}"),
        (data, size + 1, f"chunks 0 to 3 decoded to {size} bytes, expected {size + 1}"),
        (data[:-1] + bytes([data[-1] ^ 0xFF]), size, r"chunks 0 to 3 cannot be decoded \(zstd: .+\)"),
        (data[:offsets[2]] + b"\0\0\0\0" + data[offsets[2] + 4 :], size, r"cannot be decoded \(zstd: .+\)"),
    ]
    for damaged, declared, message in cases:
        out = np.full(declared + 8 + size, 7, np.uint8)  # the damaged stretch's place, 8 bytes, the good one's
        batch = StretchBatch(out, LIB, pool if threads > 1 else None, threads)
        batch.add(data, one([0]), one([len(data)]), one([declared + 8]), one([size]), one([0]), one([3]))
        batch.label("the good one")
        batch.add(damaged, one([0]), one([len(damaged)]), one([0]), one([declared]), one([0]), one([3]))
        batch.label("the damaged one")
        with pytest.raises(StretchError, match=message) as caught:
            batch.run()
        assert caught.value.label == "the damaged one"
        assert (out[declared : declared + 8] == 7).all(), "written past the stretch's place"


def test_stretches_outside_their_buffers_are_refused_before_any_decode() -> None:
    assert LIB is not None
    data, offsets, held = frames(3, 9)
    out = np.zeros(20000, np.uint8)
    batch = StretchBatch(out, LIB)
    size = sum(map(len, held))
    with pytest.raises(ValueError, match=f"chunks 4 to 6 lie outside the file \\({len(data)} bytes\\)"):
        batch.add(data, one([0]), one([len(data) + 1]), one([0]), one([size]), one([4]), one([6]))
    for place in (-1, out.size - size + 1):
        with pytest.raises(ValueError, match="place lies outside the output"):
            batch.add(data, one([0]), one([len(data)]), one([place]), one([size]), one([0]), one([2]))
    with pytest.raises(ValueError, match="writeable"):
        StretchBatch(np.zeros(4, np.uint8).tobytes(), LIB)


def test_helpers_decode_while_stretches_are_added_and_stop_when_closed(pool: ThreadPoolExecutor) -> None:
    """With a helper, a stretch is decoded before run() (the helper took it as it was added); a batch closed
    instead of run (adding failed) has its helper stopped and waited for, and decodes nothing more."""
    assert LIB is not None
    data, offsets, held = frames(1, 11)
    size = len(held[0])
    out = np.zeros(3 * size, np.uint8)
    batch = StretchBatch(out, LIB, pool, 2)
    batch.add(data, one([0]), one([len(data)]), one([0]), one([size]), one([0]), one([0]))
    deadline = time.monotonic() + 30
    while bytes(out[:size]) != held[0] and time.monotonic() < deadline:  # no run() yet: the helper's work
        threading.Event().wait(0.005)
    assert bytes(out[:size]) == held[0]
    batch.run()
    closing = StretchBatch(out, LIB, pool, 2)
    closing.add(data, one([0]), one([len(data)]), one([size]), one([size]), one([0]), one([0]))
    done = threading.Thread(target=closing.close)
    done.start()
    done.join(timeout=30)
    assert not done.is_alive(), "close() did not stop the helper"


def test_a_batch_dropped_without_close_frees_its_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper waiting for stretches that never come (its batch dropped, never run or closed) quits after the
    idle time, so the pool's thread serves other work again."""
    assert LIB is not None
    monkeypatch.setattr(zstd_frames, "_IDLE_S", 0.2)
    with ThreadPoolExecutor(max_workers=1) as lonely:
        dropped = StretchBatch(np.zeros(64, np.uint8), LIB, lonely, 2)
        assert dropped.helping
        del dropped
        assert lonely.submit(lambda: "free").result(timeout=30) == "free"
