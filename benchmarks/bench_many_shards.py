"""Reading a dataset of many small shards: load_dataset, iterate_episodes, sample_steps, open files.

    python benchmarks/bench_many_shards.py                      # 1,000 shards in a temporary root
    python benchmarks/bench_many_shards.py --shards 5000 --root /tmp/many --keep
    python benchmarks/bench_many_shards.py --root /tmp/many --read-only   # time another vcollect on it
    python benchmarks/bench_many_shards.py --shards 197 --cache-bytes 0   # sample_steps reading the files
    python benchmarks/bench_many_shards.py --torch        # also a torch DataLoader over transitions (CPU time)

The dataset is written by EpisodeStore (one shard per ``--episodes`` episodes) with ``os.fsync`` made a
no-op while building (durability does not matter to a read benchmark, and it makes building 5,000 shards
take seconds, not a minute). ``--no-manifest`` hides the manifest so every shard is opened at load.
Only public API is used, so ``--read-only`` times any vcollect version on a dataset built by this one.
``--torch`` adds CPU time per transition (this process, ``time.process_time``: other load on the machine
moves it little) of ``sample_steps(256)`` against a ``DataLoader(ds.as_torch_dataset(), batch_size=256,
shuffle=True)`` in the same process, and against one that reads item by item (no ``__getitems__``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from vcollect.store import EpisodeStore, load_dataset

DATASET_ID = "bench/many-v0"


def build(root: Path, shards: int, episodes: int, steps: int) -> None:
    """``shards`` shards of ``episodes`` episodes of ``steps`` steps (obs Box(4,), Discrete(3) actions)."""
    real_fsync = os.fsync
    os.fsync = lambda fd: None
    try:
        obs_space = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        with EpisodeStore.create(DATASET_ID, obs_space, spaces.Discrete(3), root=root, overwrite=True) as store:
            rng = np.random.default_rng(0)
            for _ in range(shards):
                for _ in range(episodes):
                    store.write_episode(
                        rng.normal(size=(steps + 1, 4)).astype(np.float32), rng.integers(0, 3, steps),
                        rng.normal(size=steps), np.arange(steps) == steps - 1, np.zeros(steps, bool),
                        seed=None, env_id=0,
                    )
                store.flush()
    finally:
        os.fsync = real_fsync


def open_fds() -> int:
    """File descriptors this process holds now (Linux)."""
    return len(os.listdir("/proc/self/fd"))


def measure(root: Path, cache_bytes: int | None = None, max_open_files: int | None = None) -> dict[str, float]:
    """Seconds for load, a full iteration and 100 sample_steps(256) calls; open files after each.

    ``cache_bytes`` goes to sample_steps (0: rows read from the files on every call), ``max_open_files`` to
    load_dataset (None: its default)."""
    out: dict[str, float] = {}
    t = time.perf_counter()
    ds = load_dataset(DATASET_ID, root=root) if max_open_files is None else load_dataset(
        DATASET_ID, root=root, max_open_files=max_open_files)
    out["load_s"] = time.perf_counter() - t
    out["fds_after_load"] = open_fds()
    t = time.perf_counter()
    steps = sum(len(ep) for ep in ds.iterate_episodes())
    out["iterate_s"] = time.perf_counter() - t
    out["fds_after_iterate"] = open_fds()
    assert steps == ds.total_steps
    t = time.perf_counter()
    for _ in range(100):
        ds.sample_steps(256, cache_bytes=cache_bytes)
    out["sample_100x256_s"] = time.perf_counter() - t
    out["fds_after_sample"] = open_fds()
    out["episodes"] = ds.total_episodes
    return out


class ItemByItem:
    """A map-style dataset reading ``inner`` one item at a time (hides ``__getitems__``): the slow reference."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> Any:
        return self.inner[i]


def measure_torch(root: Path, batches: int, cache_bytes: int | None = None) -> dict[str, float]:
    """CPU microseconds per transition: sample_steps(256), a DataLoader over as_torch_dataset (batches of
    256, shuffled, no workers) and the same DataLoader reading item by item (a tenth as many batches)."""
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    ds = load_dataset(DATASET_ID, root=root)
    items = ds.as_torch_dataset(cache_bytes=cache_bytes)

    def per_transition(loader: Any, n: int) -> float:
        it = iter(loader)
        next(it)  # the first batch builds the cache (when the columns fit) and starts the iterator
        start = time.process_time()
        for _ in range(n):
            next(it)
        return (time.process_time() - start) / (n * 256) * 1e6

    def sampled() -> Any:
        while True:
            yield ds.sample_steps(256, cache_bytes=cache_bytes)

    gen = torch.Generator().manual_seed(0)
    loader = DataLoader(items, batch_size=256, shuffle=True, generator=gen)
    slow = DataLoader(ItemByItem(items), batch_size=256, shuffle=True, generator=gen)
    return {
        "sample_steps_us": per_transition(sampled(), batches),
        "dataloader_us": per_transition(loader, min(batches, len(loader) - 1)),
        "item_by_item_us": per_transition(slow, max(1, min(batches // 10, len(slow) - 1))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per shard")
    parser.add_argument("--steps", type=int, default=10, help="steps per episode")
    parser.add_argument("--root", type=Path, default=None, help="where to build (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the built dataset")
    parser.add_argument("--read-only", action="store_true", help="do not build: time the dataset under --root")
    parser.add_argument("--no-manifest", action="store_true", help="hide the manifest (every shard opened at load)")
    parser.add_argument("--cache-bytes", type=int, default=None,
                        help="sample_steps' cache_bytes (0: read rows from the files every call)")
    parser.add_argument("--max-open-files", type=int, default=None, help="load_dataset's max_open_files")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many measurements")
    parser.add_argument("--torch", action="store_true",
                        help="also CPU time per transition: sample_steps vs a torch DataLoader over transitions")
    parser.add_argument("--batches", type=int, default=60, help="batches of 256 timed per --torch measurement")
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="vcollect-many-"))
    try:
        if not args.read_only:
            t = time.perf_counter()
            build(root, args.shards, args.episodes, args.steps)
            print(f"built {args.shards} shards in {time.perf_counter() - t:.1f} s under {root}")
        manifest = root / DATASET_ID / "manifest"
        hidden = manifest.with_name("manifest.hidden")
        if args.no_manifest and manifest.exists():
            manifest.rename(hidden)
        try:
            runs = [measure(root, args.cache_bytes, args.max_open_files) for _ in range(args.repeat)]
        finally:
            if hidden.exists():
                hidden.rename(manifest)
        best = {key: min(run[key] for run in runs) for key in runs[0]}
        print(
            f"shards={args.shards} episodes={int(best['episodes'])} manifest={'no' if args.no_manifest else 'yes'}: "
            f"load {best['load_s'] * 1e3:.0f} ms, iterate {best['iterate_s'] * 1e3:.0f} ms, "
            f"100 x sample_steps(256) {best['sample_100x256_s'] * 1e3:.0f} ms; open fds after load/iterate/sample "
            f"{int(best['fds_after_load'])}/{int(best['fds_after_iterate'])}/{int(best['fds_after_sample'])}"
        )
        if args.torch:
            timed = [measure_torch(root, args.batches, args.cache_bytes) for _ in range(args.repeat)]
            fast = {key: min(run[key] for run in timed) for key in timed[0]}
            print(
                f"CPU us per transition (batches of 256): sample_steps {fast['sample_steps_us']:.2f}, "
                f"DataLoader(as_torch_dataset()) {fast['dataloader_us']:.2f} "
                f"({fast['dataloader_us'] / fast['sample_steps_us']:.2f}x), item by item "
                f"{fast['item_by_item_us']:.1f} ({fast['item_by_item_us'] / fast['sample_steps_us']:.0f}x)"
            )
    finally:
        if args.root is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
