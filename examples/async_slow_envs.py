"""User story: "My simulator's steps take uneven time; don't make every env wait for the slowest one."

Eight CartPoles whose steps usually take 0.2 ms but 5 ms one time in ten run in worker processes, one
process per env by default (the envs mostly wait, so they need no core each). The synchronous Collector
waits for the slowest env at every step; the AsyncCollector acts on whichever envs are ready and keeps
the others running, and still returns exactly the number of steps asked for. Both runs are timed; the
async one stores its finished episodes in a dataset.

What the AsyncCollector gains depends on how uneven the steps are (``--slow-ms``, ``--slow-prob``) and on
how many envs share a worker process: a worker steps its envs one after the other, so with
``--num-workers 2`` a slow step holds up every env of its worker and most of the gain is gone. The docs'
performance page gives the ranges measured and the machine.

Needs no extra: the base install (``pip install -e .``) runs it.

    python examples/async_slow_envs.py --steps 20000
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import vcollect


class SlowCartPole(gym.Wrapper):
    """CartPole whose steps sleep ``fast`` seconds, or ``slow`` seconds with probability ``slow_prob``."""

    def __init__(self, fast: float = 0.0002, slow: float = 0.005, slow_prob: float = 0.1) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.fast, self.slow, self.slow_prob = fast, slow, slow_prob
        self._rng = np.random.default_rng(0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            self._rng = np.random.default_rng([seed, 1])  # reproducible step times, per episode
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        time.sleep(self.slow if self._rng.random() < self.slow_prob else self.fast)
        return self.env.step(action)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Time the sync and the async collector on slow envs; returns both CollectStats and the dataset."""
    from vcollect.async_collector import AsyncCollector
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--fast-ms", type=float, default=0.2)
    parser.add_argument("--slow-ms", type=float, default=5.0)
    parser.add_argument("--slow-prob", type=float, default=0.1)
    parser.add_argument("--num-workers", type=int, default=None, help="worker processes (default: one per env)")
    parser.add_argument("--wait-num", type=int, default=None, help="act once this many envs are ready")
    parser.add_argument("--dataset", default="examples/slow-cartpole-async-v0")
    parser.add_argument("--root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    make_env = functools.partial(SlowCartPole, args.fast_ms / 1000, args.slow_ms / 1000, args.slow_prob)

    workers = args.num_workers or args.num_envs
    envs = vcollect.make_vector(make_env, args.num_envs, backend="subproc", num_workers=workers)
    policy = vcollect.RandomPolicy(envs.single_action_space, seed=args.seed)
    with vcollect.Collector(policy, envs, seed=args.seed) as collector:
        sync = collector.collect(n_step=args.steps, reset_before_collect=True)
    print("sync: ", sync)

    envs = vcollect.make_vector(make_env, args.num_envs, backend="subproc", num_workers=workers)
    store = vcollect.EpisodeStore.create(
        args.dataset, envs.single_observation_space, envs.single_action_space, root=args.root,
        metadata={"algorithm_name": "random", "description": "CartPole with uneven step times"}, overwrite=True,
    )
    with store, AsyncCollector(policy, envs, store=store, seed=args.seed, wait_num=args.wait_num) as collector:
        fast = collector.collect(n_step=args.steps, reset_before_collect=True)
    print("async:", fast)
    print(f"AsyncCollector: {fast.collect_speed / sync.collect_speed:.2f}x the steps/s of the sync Collector, "
          f"both exactly {args.steps} steps, {args.num_envs} envs on {workers} worker processes")
    dataset = vcollect.load_dataset(args.dataset, root=args.root)
    print(f"{dataset}: every episode the async run finished")
    return {"sync": sync, "async": fast, "dataset": dataset}


if __name__ == "__main__":
    main()
