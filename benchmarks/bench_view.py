"""``vcollect view``'s pages on big roots: the listing of 1,000 datasets and the page of a 5,000-shard dataset.

    python benchmarks/bench_view.py                          # build both in a temporary folder, time, remove
    python benchmarks/bench_view.py --root /tmp/view --keep  # keep them; later runs reuse what is there
    python benchmarks/bench_view.py --datasets 200 --shards 500 --repeat 3

Each figure is the time of one request answered by the page's app (``ViewApp.respond``: the census or the
load, the card, the HTML), wall clock and this process's CPU time (``time.process_time``; on a shared
machine the CPU time is the steadier one), median of ``--repeat`` runs. The dataset page is timed cold (a
fresh app, so the dataset is loaded: manifest lines standing in for its shards) and warm (the same app
again: the loaded dataset kept). The peak of Python allocations while answering the cold request
(tracemalloc) shows the memory the page takes. Datasets are written with ``os.fsync`` made a no-op
(durability does not matter here and building 5,000 shards then takes seconds, not minutes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from gymnasium import spaces

from vcollect.store import EpisodeStore, list_datasets
from vcollect.view.routes import ViewApp

MANY_SHARDS_ID = "bench/many-shards-v0"


def build_listing(root: Path, datasets: int) -> None:
    """``datasets`` small datasets (one shard of two episodes each) in 10 namespaces."""
    obs_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    for i in range(datasets):
        with EpisodeStore.create(f"ns{i % 10}/d{i}-v0", obs_space, spaces.Discrete(2), root=root) as store:
            for seed in range(2):
                store.write_episode(np.zeros((6, 4), np.float32), np.zeros(5, np.int64), np.ones(5),
                                    np.arange(5) == 4, np.zeros(5, bool), seed=seed, env_id=0)


def build_many_shards(root: Path, shards: int) -> None:
    """One dataset of ``shards`` shards of two 10-step episodes."""
    rng = np.random.default_rng(0)
    obs_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    with EpisodeStore.create(MANY_SHARDS_ID, obs_space, spaces.Discrete(3), root=root) as store:
        for i in range(shards):
            for j in range(2):
                store.write_episode(rng.normal(size=(11, 4)).astype(np.float32), rng.integers(0, 3, 10),
                                    rng.normal(size=10), np.arange(10) == 9, np.zeros(10, bool), seed=2 * i + j, env_id=0)
            store.flush()


def timed(app_factory: object, path: str, repeat: int, *, fresh: bool) -> tuple[float, float, int]:
    """Median wall and CPU seconds of answering ``path`` (a fresh app each time when ``fresh``), and its status."""
    walls, cpus = [], []
    app = app_factory()  # type: ignore[operator]
    status = 0
    for _ in range(repeat):
        if fresh:
            app = app_factory()  # type: ignore[operator]
        wall, cpu = time.perf_counter(), time.process_time()
        response = app.respond(path)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        status = int(response.status)
    return statistics.median(walls), statistics.median(cpus), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="where to build (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep what was built")
    parser.add_argument("--datasets", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    base = args.root or Path(tempfile.mkdtemp(prefix="bench-view-"))
    listing_root, shards_root = base / "listing", base / "shards"
    real_fsync = os.fsync
    os.fsync = lambda fd: None  # type: ignore[assignment]
    try:
        if not listing_root.is_dir() or len(list_datasets(listing_root)) != args.datasets:
            shutil.rmtree(listing_root, ignore_errors=True)
            listing_root.mkdir(parents=True)
            build_listing(listing_root, args.datasets)
        if not (shards_root / MANY_SHARDS_ID / "shards").is_dir() or \
                len(os.listdir(shards_root / MANY_SHARDS_ID / "shards")) != args.shards:
            shutil.rmtree(shards_root, ignore_errors=True)
            shards_root.mkdir(parents=True)
            build_many_shards(shards_root, args.shards)
    finally:
        os.fsync = real_fsync
    try:
        wall, cpu, status = timed(lambda: ViewApp(listing_root), "/", args.repeat, fresh=False)
        print(f"listing of {args.datasets:,} datasets: {wall:.3f} s wall, {cpu:.3f} s CPU (HTTP {status})")
        page = f"/d/{MANY_SHARDS_ID}/"
        wall, cpu, status = timed(lambda: ViewApp(shards_root), page, args.repeat, fresh=True)
        print(f"page of a {args.shards:,}-shard dataset, cold: {wall:.3f} s wall, {cpu:.3f} s CPU (HTTP {status})")
        wall, cpu, status = timed(lambda: ViewApp(shards_root), page, args.repeat, fresh=False)
        print(f"page of a {args.shards:,}-shard dataset, warm: {wall:.3f} s wall, {cpu:.3f} s CPU (HTTP {status})")
        tracemalloc.start()
        size = len(ViewApp(shards_root).respond(page).body)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"page of a {args.shards:,}-shard dataset: {size / 1024:.0f} KiB of HTML, peak Python allocations "
              f"{peak / 2**20:.1f} MiB while answering it cold")
    finally:
        if not args.keep and args.root is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
