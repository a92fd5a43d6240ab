"""What each tuning switch of the docs' "Tuning" section costs or saves, in CPU time of this process.

Every row collects the same CartPole-v1 steps on the in-process dummy backend (8 envs, random actions),
so the whole cost lands in this process and ``time.process_time`` measures it, steady on a busy machine
where wall-clock time is not. Rows take turns within each round and each keeps its best round. The
torch rows time one small behaviour-cloning step (a 4-64-64-2 MLP, batch 256, Adam) on torch's default
thread count and on one thread. Usage:

    python benchmarks/tuning.py [--steps 40000] [--rounds 3] [--rows collect,store,torch]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import vcollect
from vcollect.store import StoreOptions

ENV = "CartPole-v1"
NUM_ENVS = 8
LOOP_WALL: list[float] = []  # wall seconds of each timed collect call, in order


def collect_cpu(steps: int, root: str | None, store_options: StoreOptions | None, **collector: Any) -> float:
    """CPU seconds of one ``collect(n_step=steps)`` (the store's commits included when ``root`` is given)."""
    envs = vcollect.make_vector(ENV, NUM_ENVS, backend="dummy")
    store = None
    if root is not None:
        store = vcollect.EpisodeStore.create("tuning/cartpole-v0", envs.single_observation_space,
                                             envs.single_action_space, root=root, overwrite=True,
                                             options=store_options)
    with vcollect.Collector(None, envs, store=store, seed=0, unfinished="truncate", **collector) as col:
        col.collect(n_step=1_000, random=True, reset_before_collect=True)  # warm-up, not timed
        start, wall = time.process_time(), time.perf_counter()
        col.collect(n_step=steps, random=True)
        loop_wall = time.perf_counter() - wall  # the collect call alone: background commits leave it sooner
        if store is not None:
            store.flush()
        spent = time.process_time() - start
    LOOP_WALL.append(loop_wall)
    if store is not None:
        store.close()
    return spent


def collect_rows(steps: int, root: str) -> dict[str, Callable[[], float]]:
    """The collector and store rows: the defaults, then one switch changed in each."""
    options = StoreOptions()

    def store(**changes: Any) -> StoreOptions:
        return StoreOptions(**{**{f: getattr(options, f) for f in options.__dataclass_fields__}, **changes})

    return {
        "defaults, no store": lambda: collect_cpu(steps, None, None),
        "seed_every_reset=False": lambda: collect_cpu(steps, None, None, seed_every_reset=False),
        "validate=False": lambda: collect_cpu(steps, None, None, validate=False),
        "store, defaults (shard_steps=100,000)": lambda: collect_cpu(steps, root, store()),
        "store, shard_steps=1,000": lambda: collect_cpu(steps, root, store(shard_steps=1_000)),
        "store, compression='gzip'": lambda: collect_cpu(steps, root, store(compression="gzip")),
        "store, compression='zstd'": lambda: collect_cpu(steps, root, store(compression="zstd")),
        "store, background_commits=True": lambda: collect_cpu(steps, root, store(background_commits=True)),
        "store, shard_steps=1,000, background_commits=True": lambda: collect_cpu(
            steps, root, store(shard_steps=1_000, background_commits=True)),
    }


def torch_rows(updates: int) -> dict[str, Callable[[], float]]:
    """A small behaviour-cloning step on torch's default thread count and on one thread."""
    import torch

    default_threads = torch.get_num_threads()
    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 2))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    obs, actions = torch.randn(256, 4), torch.randint(0, 2, (256,))

    def train(threads: int) -> float:
        torch.set_num_threads(threads)
        try:
            start = time.process_time()
            for _ in range(updates):
                loss = torch.nn.functional.cross_entropy(net(obs), actions)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return time.process_time() - start
        finally:
            torch.set_num_threads(default_threads)

    return {
        f"BC step, torch default ({default_threads} threads)": lambda: train(default_threads),
        "BC step, torch.set_num_threads(1)": lambda: train(1),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    """Run the rows in turns; print each row's best CPU time per unit; returns them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40_000)
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default="collect,torch")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="vcollect-tuning-")
    rows: dict[str, tuple[Callable[[], float], float, str]] = {}
    try:
        if "collect" in args.rows:
            for name, fn in collect_rows(args.steps, root).items():
                rows[name] = (fn, args.steps / 1e6, "us CPU per step")
        if "torch" in args.rows:
            for name, fn in torch_rows(args.updates).items():
                rows[name] = (fn, args.updates / 1e3, "ms CPU per update")
        best: dict[str, float] = {}
        best_wall: dict[str, float] = {}
        for _ in range(args.rounds):
            for name, (fn, per, _) in rows.items():
                calls = len(LOOP_WALL)
                best[name] = min(best.get(name, float("inf")), fn() / per)
                if len(LOOP_WALL) > calls:
                    best_wall[name] = min(best_wall.get(name, float("inf")), LOOP_WALL[-1] / per)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{os.cpu_count()} cores, best of {args.rounds} rounds: CPU time of this process (threads included),"
          " and the wall-clock time of the collect call alone (the store's last flush not included)")
    for name, value in best.items():
        wall = f" | {best_wall[name]:.2f} us wall per step in collect" if name in best_wall else " |"
        print(f"| {name} | {value:.2f} {rows[name][2]}{wall} |")
    return best


if __name__ == "__main__":
    main()
