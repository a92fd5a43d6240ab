"""Replay sampling, batch 256: vcollect's rings against Tianshou's VectorReplayBuffer, same sizes, one run.

Both buffers hold the same transitions (N envs, CartPole-shaped float32 observations, episodes of 10 to
60 steps) and are timed alternately in one process: uniform ``sample``, ``sample`` with ``stack_num=4``,
and prioritized ``sample`` (+ ``update_weight`` of the batch, the training loop's other call). Times are
the best of ``--rounds`` rounds of ``--calls`` calls, the two sides' rounds alternating, in microseconds
per call.

    python benchmarks/bench_replay.py [--total 100000] [--envs 10] [--batch 256]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from vcollect.buffers import PrioritizedVectorRingBuffer, VectorRingBuffer


def fill(total: int, num_envs: int, seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """Per step, (act, rew, terminated, next_obs) of every env: episodes of 10 to 60 steps. The first
    observation is zeros; an episode's reset observation is its final one + 100 (both buffers alike)."""
    rng = np.random.default_rng(seed)
    left = rng.integers(10, 61, num_envs)
    out = []
    for _ in range(total // num_envs):
        left -= 1
        done = left == 0
        nxt = rng.standard_normal((num_envs, 4)).astype(np.float32)
        out.append((rng.integers(0, 2, num_envs), np.ones(num_envs), done, nxt))
        left[done] = rng.integers(10, 61, int(done.sum()))
    return out


def ring_of(cls: type[VectorRingBuffer], data: list[tuple[np.ndarray, ...]], total: int, n: int, **kw: Any
            ) -> VectorRingBuffer:
    ring = cls(total_size=total, num_envs=n, seed=0, **kw)
    ring.bind_spaces(spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(2))
    ids = np.arange(n)
    ring.start_episodes(ids, np.zeros((n, 4), np.float32))
    for act, rew, done, nxt in data:
        ring.add(ids, act, rew, done, np.zeros(n, bool), nxt)
        if done.any():
            ring.start_episodes(ids[done], nxt[done] + 100.0)  # the reset observation, as below
    return ring


def tianshou_of(cls: Any, data: list[tuple[np.ndarray, ...]], total: int, n: int, **kw: Any) -> Any:
    from tianshou.data import Batch

    buf = cls(total, n, **kw)
    ids = np.arange(n)
    prev = np.zeros((n, 4), np.float32)
    for act, rew, done, nxt in data:
        buf.add(Batch(obs=prev, act=act, rew=rew, terminated=done, truncated=np.zeros(n, bool), obs_next=nxt,
                      info=Batch()), buffer_ids=ids)
        prev = nxt.copy()
        prev[done] = nxt[done] + 100.0
    return buf


def best_us(fns: list[Callable[[], Any]], calls: int, rounds: int) -> list[float]:
    """Per function, the best of ``rounds`` rounds of ``calls`` calls (us per call); the functions' rounds
    alternate, so that a change in the machine's load between rounds falls on both sides alike."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
    return [b * 1e6 for b in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=100_000)
    parser.add_argument("--envs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch
    from tianshou.data import PrioritizedVectorReplayBuffer, VectorReplayBuffer

    torch.set_num_threads(1)
    n, total, b = args.envs, args.total, args.batch
    data = fill(total, n)
    ring = ring_of(VectorRingBuffer, data, total, n)
    pring = ring_of(PrioritizedVectorRingBuffer, data, total, n, alpha=0.6, beta=0.4)  # type: ignore[arg-type]
    ts = tianshou_of(VectorReplayBuffer, data, total, n)
    ts4 = tianshou_of(VectorReplayBuffer, data, total, n, stack_num=4)
    tsp = tianshou_of(PrioritizedVectorReplayBuffer, data, total, n, alpha=0.6, beta=0.4)
    print(f"{total} rows, {n} envs, batch {b}; vcollect holds {len(ring)} transitions, Tianshou {len(ts)}")

    def ts_prio() -> None:
        batch, idx = tsp.sample(b)
        tsp.update_weight(idx, np.abs(batch.rew) + 0.5)

    def ring_prio() -> None:
        batch = pring.sample(b)
        pring.update_weight(batch["indices"], np.abs(batch["rewards"]) + 0.5)

    rows = [
        ("uniform sample", lambda: ts.sample(b), lambda: ring.sample(b)),
        ("sample, stack_num=4", lambda: ts4.sample(b), lambda: ring.sample(b, stack_num=4)),
        ("prioritized sample", lambda: tsp.sample(b), lambda: pring.sample(b)),
        ("prioritized sample + update_weight", ts_prio, ring_prio),
    ]
    print("| batch 256 | Tianshou 2.0.1 (us/call) | vcollect (us/call) | vcollect speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for name, theirs, ours in rows:
        theirs(), ours()  # warm up (numba's first calls)
        t_us, o_us = best_us([theirs, ours], args.calls, args.rounds)
        print(f"| {name} | {t_us:,.1f} | {o_us:,.1f} | {t_us / o_us:.1f}x |")


if __name__ == "__main__":
    main()
