"""Slices from large Pong datasets: ``Dataset.sample_slices(256, 64)`` p50 / p99, CPU time beside wall clock.

Builds (or reuses, with ``--keep DIR``) datasets of ``--gb`` GB of raw Pong frame stacks each (4x84x84 uint8
observations as gymnasium's ``FrameStackObservation`` gives them; 1 GB = 1e9 bytes of stacks, the measure
``bench_read_scale.py`` uses), stored with ``frame_stack=4`` and the default compression (Zstandard), in
episodes of 1,000 steps. The frames are real ALE Pong (``ale_py``, ``AtariPreprocessing``, random actions):
5,000 consecutive frames gathered once, each episode a random stretch of them, so the shards compress as
Pong does. The datasets are far larger than the sampling cache (64 MiB), so every call decodes its frames
from the shard files (in the page cache: the files are small once compressed).

For each dataset, ``--calls`` calls after 5 of warm-up (maps opened, chunk tables read), each with
``stacks="copy"`` (materialised stacks, the default) and ``stacks="view"`` (each window's frames once, stacks
as read-only strided views), with and without ``next_observations``. Times: CPU (``time.process_time``) and
wall per call, p50 / p99, and the calling thread's CPU (``time.thread_time``: with decode threads, the part of
the process's CPU the call's own thread spent): on a shared machine wall clock says little. Usage:

    python benchmarks/bench_slices_scale.py [--gb 10 1] [--calls 100] [--keep DIR] [--delete]
    python benchmarks/bench_slices_scale.py --keep DIR --before OTHER_CHECKOUT --rounds 3 --modes view

Without ``--keep`` the datasets are built in a temporary folder and deleted at the end; ``--delete`` deletes
a kept folder's datasets at the end too. ``--threads N`` sets how many threads decode one call's frames
(``$VCOLLECT_DECODE_THREADS``; default vcollect's: 2 where two CPUs are usable). Beside CPU and wall clock,
"wall - run-queue": the calling thread's wall clock less the time it waited for a core (Linux's
``/proc/self/task/<tid>/schedstat``; the wall clock where that file is missing), what a call would take with a
core free for each thread, which a shared machine's wall clock does not say.

``--bound`` measures what bounds a ``stacks="view"`` call on this machine, from the first dataset's own
frame chunks (read with h5py's ``read_direct_chunk``, no vcollect code; the level they were written at is
printed: datasets kept from before the writer's level -1 hold level 1): the Zstandard decode rate of one core
(windows of 17 chunks, as a call's 256 windows of 68 frames touch, each decoded as one stream into a reused
buffer; CPU time) and the rate at which one core writes memory (``np.copyto`` of as many bytes into a reused
array), the bytes a call decodes (256 windows x the whole chunks 68 frames from a random row touch), and the
speed-up of decoding those stretches on two threads instead of one as slices do (one libzstd call a stretch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_read_scale import build, frames_nbytes, pong_frames, shard_files

from vcollect import load_dataset


def run_queue_s() -> float:
    """Seconds the calling thread has waited for a core so far (0 where Linux's schedstat is missing)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def timed(call: Any, calls: int, warmup: int = 5, raw: dict[str, list[float]] | None = None) -> dict[str, float]:
    """CPU and wall p50 / p99 (ms) of ``calls`` calls after ``warmup`` untimed ones, each call made while the
    previous batch is still held (``batch = call()``, as a training loop does); ``raw`` gets the times."""
    batch = None
    for _ in range(warmup):
        batch = call()
    cpu, wall, caller, ready = [], [], [], []
    for _ in range(calls):
        c0, w0, t0, q0 = time.process_time(), time.perf_counter(), time.thread_time(), run_queue_s()
        batch = call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        caller.append(time.thread_time() - t0)
        ready.append(wall[-1] - (run_queue_s() - q0))
    del batch
    if raw is not None:
        raw["cpu"], raw["wall"], raw["caller"], raw["ready"] = cpu, wall, caller, ready
    return {"cpu50": float(np.percentile(cpu, 50)) * 1e3, "cpu99": float(np.percentile(cpu, 99)) * 1e3,
            "caller50": float(np.percentile(caller, 50)) * 1e3, "caller99": float(np.percentile(caller, 99)) * 1e3,
            "wall50": float(np.percentile(wall, 50)) * 1e3, "wall99": float(np.percentile(wall, 99)) * 1e3,
            "ready50": float(np.percentile(ready, 50)) * 1e3, "ready99": float(np.percentile(ready, 99)) * 1e3}


def bound(path: Path, batch: int, frames_per_window: int) -> None:
    """Print the decode rate per core, the memory write rate and the bytes a call decodes (module docstring)."""
    import h5py
    import zstandard

    with h5py.File(shard_files(path)[0], "r") as f:
        found: list[h5py.Dataset] = []
        f.visititems(lambda _, d: found.append(d) if isinstance(d, h5py.Dataset) and d.ndim == 3 and d.chunks
                     and d.compression != "gzip" and d.id.get_create_plist().get_nfilters() else None)
        column = max(found, key=lambda d: d.shape[0])
        rows, chunk_rows = column.shape[0], column.chunks[0]
        options = column.id.get_create_plist().get_filter(0)[2]
        level = int(np.array(options[0], np.uint32).view(np.int32)) if options else "default"
        chunks = [column.id.read_direct_chunk((k * chunk_rows, 0, 0))[1] for k in range(rows // chunk_rows)]
    chunk_bytes = chunk_rows * int(np.prod(column.shape[1:]))
    per_window = 17
    stretches = [b"".join(chunks[a : a + per_window]) for a in range(0, len(chunks) - per_window, per_window)]
    out = np.zeros(len(stretches) * per_window * chunk_bytes, np.uint8)
    view = memoryview(out)
    decoder = zstandard.ZstdDecompressor()
    best = float("inf")
    for _ in range(5):
        c0 = time.process_time()
        for i, data in enumerate(stretches):
            with decoder.stream_reader(data, read_across_frames=True) as stream:
                stream.readinto(view[i * per_window * chunk_bytes : (i + 1) * per_window * chunk_bytes])
        best = min(best, time.process_time() - c0)
    decode_rate = out.nbytes / best
    src = np.ones_like(out)
    copy = min(timed_once(lambda: np.copyto(out, src)) for _ in range(5))
    touched = (frames_per_window + chunk_rows - 1) / chunk_rows  # chunks a run from a uniform row touches, mean
    call_bytes = batch * touched * chunk_bytes
    print(f"\nbound: {len(chunks)} chunks of {chunk_rows} frames at Zstandard level {level} ({chunk_bytes} bytes, "
          f"{sum(map(len, chunks)) / len(chunks):.0f} compressed); decode {decode_rate / 1e9:.2f} GB/s per core, "
          f"memory write {out.nbytes / copy / 1e9:.2f} GB/s per core; a call decodes ~{call_bytes / 1e6:.1f} MB: "
          f"{call_bytes / decode_rate * 1e3:.1f} ms of one core's decoding, {call_bytes / (out.nbytes / copy) * 1e3:.1f}"
          f" ms of one core's memory writes")
    parallel_decode(stretches, per_window * chunk_bytes, out)


def parallel_decode(stretches: list[bytes], size: int, out: np.ndarray) -> None:
    """Print the wall clock of decoding ``stretches`` (``size`` bytes each) into ``out`` as vcollect's slices do
    (one libzstd call a stretch, the GIL released for it) on one thread and on two: the speed-up a second
    decode thread can give on this machine (2.0 where two cores are free and the GIL is no obstacle)."""
    from concurrent.futures import ThreadPoolExecutor

    from vcollect.store.read.shards.zstd_frames import StretchBatch, library

    lib = library()
    if lib is None:
        print("parallel decode: libzstd does not load here")
        return
    source = b"".join(stretches)
    lengths = np.array([len(s) for s in stretches], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    places = np.arange(len(stretches), dtype=np.int64) * size
    sizes = np.full(len(stretches), size, dtype=np.int64)
    walls: dict[int, list[float]] = {1: [], 2: []}
    with ThreadPoolExecutor(max_workers=1) as pool:
        for _ in range(7):
            for threads in (1, 2):
                batch = StretchBatch(out, lib, pool if threads > 1 else None, threads)
                w0 = time.perf_counter()
                batch.add(source, starts, starts + lengths, places, sizes, places, places)
                batch.run()
                walls[threads].append(time.perf_counter() - w0)
    one, two = min(walls[1]), min(walls[2])
    print(f"parallel decode ({out.nbytes / 1e6:.0f} MB, one libzstd call a stretch, best of 7 wall): one thread "
          f"{one * 1e3:.1f} ms, two threads {two * 1e3:.1f} ms: {one / two:.2f}x")


def timed_once(call: Any) -> float:
    c0 = time.process_time()
    call()
    return time.process_time() - c0


def paired(args: argparse.Namespace) -> None:
    """Alternate runs of this script (datasets kept, built first) under the vcollect at ``--before`` and under
    this one, ``--rounds`` times, each run its own process; print p50 / p99 of every call of each, pooled."""
    root = args.keep or Path(tempfile.mkdtemp(prefix="vcollect-slices-scale-"))
    here = Path(__file__).resolve()
    this = here.parent.parent
    common = [sys.executable, str(here), "--keep", str(root), "--gb", *map(str, args.gb), "--calls", str(args.calls),
              "--batch", str(args.batch), "--length", str(args.length), "--modes", *args.modes]
    if args.threads is not None:
        common += ["--threads", str(args.threads)]
    pooled: dict[tuple[str, str], dict[str, list[float]]] = {}
    loads = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for label, tree in (("before", args.before), ("after", this)):
                out = Path(tmp) / f"{label}{r}.json"
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(here.parent)])}
                subprocess.run([*common, "--raw", str(out)], env=env, check=True, stdout=subprocess.DEVNULL)
                got = json.loads(out.read_text())
                loads.append(got["load"])
                for key, times in got["calls"].items():
                    into = pooled.setdefault((key, label), {"cpu": [], "wall": [], "caller": [], "ready": []})
                    for name in into:
                        into[name] += times[name]
    print(f"load (1 min) after each run: {min(loads):.1f} to {max(loads):.1f}; {args.rounds} rounds of {args.calls} "
          "calls each side")
    print("| dataset, call | code | CPU ms p50 | CPU ms p99 | calling thread's CPU ms p50 / p99 "
          "| wall - run-queue ms p50 / p99 | wall ms p50 | wall ms p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (key, label), times in pooled.items():
        cpu, wall = np.asarray(times["cpu"]) * 1e3, np.asarray(times["wall"]) * 1e3
        caller, ready = np.asarray(times["caller"]) * 1e3, np.asarray(times["ready"]) * 1e3
        print(f"| {key} | {label} | {np.percentile(cpu, 50):.2f} | {np.percentile(cpu, 99):.2f} "
              f"| {np.percentile(caller, 50):.2f} / {np.percentile(caller, 99):.2f} "
              f"| {np.percentile(ready, 50):.2f} / {np.percentile(ready, 99):.2f} "
              f"| {np.percentile(wall, 50):.2f} | {np.percentile(wall, 99):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, nargs="+", default=[10.0, 1.0], help="raw GB of stacks per dataset")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--keep", type=Path, default=None, help="build under DIR and keep it (default: a temp dir)")
    parser.add_argument("--delete", action="store_true", help="delete the datasets at the end, --keep or not")
    parser.add_argument("--modes", nargs="+", default=["copy", "view"], choices=["copy", "view"])
    parser.add_argument("--threads", type=int, default=None, help="threads decoding one call's frames")
    parser.add_argument("--bound", action="store_true", help="measure decode and memory write rates per core")
    parser.add_argument("--raw", type=Path, default=None, help="write every call's times to this JSON file")
    parser.add_argument("--before", type=Path, default=None,
                        help="a folder holding another vcollect (its package folder inside): alternate runs of it "
                             "and of this one, process by process, --rounds times, and print both, pooled")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.before is not None:
        paired(args)
        return
    if args.threads is not None:
        os.environ["VCOLLECT_DECODE_THREADS"] = str(args.threads)
    root = args.keep or Path(tempfile.mkdtemp(prefix="vcollect-slices-scale-"))
    print(f"load before: {os.getloadavg()}; root {root}; decode threads {os.environ.get('VCOLLECT_DECODE_THREADS', 'default')}")
    frames: np.ndarray | None = None
    ids = []
    raw: dict[str, dict[str, list[float]]] = {}
    try:
        for gb in args.gb:
            dataset_id = f"bench/pong-slices-{round(gb * 1000)}mb-v0"
            ids.append(dataset_id)
            write_s = "(kept)"
            if not (root / dataset_id).exists():
                frames = pong_frames(5_000) if frames is None else frames
                write_s = f"{build(root, dataset_id, gb, 'auto', frames, True):.1f} s"
            data = load_dataset(dataset_id, root=root)
            if args.bound and dataset_id == ids[0]:
                bound(data.path, args.batch, args.length + 4)
            raw_gb = (data.total_steps + data.total_episodes) * frames_nbytes(data.observation_space) / 1e9
            disk_gb = sum(f.stat().st_size for f in shard_files(data.path)) / 1e9
            print(f"\n{dataset_id}: {data.total_episodes:,} episodes, {data.total_steps:,} steps, {raw_gb:.2f} GB raw "
                  f"stacks, {disk_gb:.3f} GB on disk in {len(shard_files(data.path))} shards, written in {write_s}")
            print(f"| call ({args.batch} x {args.length}) | CPU ms p50 | CPU ms p99 | calling thread's CPU ms p50 / p99 "
                  "| wall - run-queue ms p50 / p99 | wall ms p50 | wall ms p99 |")
            print("| --- | --- | --- | --- | --- | --- | --- |")
            for mode in args.modes:
                for nxt in (True, False):
                    data.set_seed(0)
                    raw[f"{dataset_id} {mode} {nxt}"] = times = {}
                    t = timed(lambda d=data, m=mode, n=nxt: d.sample_slices(args.batch, args.length, stacks=m,
                                                                            next_observations=n), args.calls,
                              raw=times)
                    print(f"| stacks={mode!r}, next_observations={nxt} | {t['cpu50']:.2f} | {t['cpu99']:.2f} "
                          f"| {t['caller50']:.2f} / {t['caller99']:.2f} | {t['ready50']:.2f} / {t['ready99']:.2f} "
                          f"| {t['wall50']:.2f} | {t['wall99']:.2f} |",
                          flush=True)
            data.close()
        print(f"load after: {os.getloadavg()}")
        if args.raw is not None:
            args.raw.write_text(json.dumps({"load": os.getloadavg()[0], "calls": raw}))
    finally:
        if args.keep is None or args.delete:
            for dataset_id in ids:
                shutil.rmtree(root / dataset_id, ignore_errors=True)
            if args.keep is None:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
