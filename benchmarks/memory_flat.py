"""Resident memory while collecting 1M CartPole steps into a store: it must stay flat (ring + one shard).

Usage: ``python benchmarks/memory_flat.py [--steps 1000000]``; prints RSS after each tenth of the run.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

import vcollect
from vcollect.store import EpisodeStore


def rss_mib() -> float:
    """Current resident set size of this process in MiB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    args = parser.parse_args()
    envs = vcollect.make_vector("CartPole-v1", 8)
    with tempfile.TemporaryDirectory() as root:
        store = EpisodeStore.create("bench/memory-v0", envs.single_observation_space, envs.single_action_space,
                                    root=root)
        with store, vcollect.Collector(None, envs, store=store, seed=0) as collector:
            collector.reset()
            chunk = args.steps // 10
            for i in range(10):
                collector.collect(n_step=chunk, random=True)
                print(f"{(i + 1) * chunk:>9,} steps  RSS {rss_mib():7.1f} MiB  shards {len(store.shards_written)}")


if __name__ == "__main__":
    main()
