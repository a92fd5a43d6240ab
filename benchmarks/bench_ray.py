"""DistributedCollector and RayVectorEnv throughput on a local Ray, and the fixed cost of a collect call.

Rows (CartPole-v1, random actions, dummy backend with ``--envs`` envs per worker unless said otherwise):

* ``Collector, in-process``: one plain Collector in this process, the reference for one worker's work;
* ``DistributedCollector, W workers`` (W = 1, 2), without and with the store: steps/s over whole calls
  of ``--steps`` steps, timed on the driver (so Ray's per-call cost is included);
* per-call overhead: wall time of ``collect(n_step=W)`` (one step per worker) minus the slowest worker's
  own collect time, i.e. what Ray adds per call; and ``collect(n_episode=W)`` with the store, where every
  worker also commits one shard per call;
* ``set_policy_weights`` of 1 MiB and 32 MiB of weights (one ``ray.put``, one fetch per worker);
* ``RayVectorEnv`` under a Collector: one actor call per env per step, against DummyVectorEnv.

Usage: ``python benchmarks/bench_ray.py [--steps 200000] [--envs 8] [--repeats 3] [--json out.json]``.
Starts a local Ray with ``--num-cpus`` CPUs (2) unless ``RAY_ADDRESS`` points at a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect import Collector, make_vector
from vcollect.distributed import DistributedCollector
from vcollect.policies import RandomPolicy
from vcollect.store import EpisodeStore

ENV_ID = "CartPole-v1"


class LoadablePolicy(RandomPolicy):
    """RandomPolicy that accepts (and keeps) weights, to time set_policy_weights."""

    def load_state_dict(self, weights: Any) -> None:
        """Keep the weights (their transfer is what is measured)."""
        self.weights = weights


def loadable_policy(observation_space: gym.Space, action_space: gym.Space) -> LoadablePolicy:
    """policy_fn for the workers."""
    return LoadablePolicy(action_space, seed=0)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a local process (Linux /proc), to measure work independently of how
    busy the (shared) machine is."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def best(repeats: int, fn: Callable[[], float]) -> float:
    """The best (highest) of repeats runs of a steps/s measurement: the machine is shared and noisy."""
    return max(fn() for _ in range(repeats))


def local_collector(steps: int, envs: int, repeats: int) -> dict[str, float]:
    """Steps/s of a plain Collector in this process, and steps per CPU second."""
    with Collector(None, make_vector(ENV_ID, envs), seed=0) as collector:
        collector.collect(n_step=envs * 100, random=True, reset_before_collect=True)
        cpu = time.process_time()
        speed = best(repeats, lambda: collector.collect(n_step=steps, random=True).collect_speed)
        return {"steps_per_s": speed, "steps_per_cpu_s": repeats * steps / (time.process_time() - cpu)}


def new_dataset(root: Path, dataset_id: str) -> str:
    env = gym.make(ENV_ID)
    EpisodeStore.create(dataset_id, env.observation_space, env.action_space, root=root, overwrite=True).close()
    return dataset_id


def distributed(
    workers: int, steps: int, envs: int, repeats: int, root: Path | None, calls: int
) -> dict[str, float]:
    """Steps/s over whole calls, and the per-call overhead of small calls, for one worker count."""
    store = None if root is None else new_dataset(root, f"bench/ray-w{workers}-v0")
    out: dict[str, float] = {}
    with DistributedCollector(
        ENV_ID, loadable_policy, num_workers=workers, envs_per_worker=envs, store=store, root=root, seed=0
    ) as dc:
        dc.collect(n_step=workers * envs * 100, random=True)  # warm up: resets, first shard
        pids = [info["pid"] for info in dc.worker_info]
        cpu = sum(process_cpu_seconds(pid) for pid in pids)
        out["steps_per_s"] = best(repeats, lambda: dc.collect(n_step=steps, random=True).collect_speed)
        # the workers' own CPU: what they would do per core if nothing else ran on the machine
        out["steps_per_worker_cpu_s"] = repeats * steps / (sum(process_cpu_seconds(pid) for pid in pids) - cpu)
        walls, worker_times = [], []
        for _ in range(calls):
            stats = dc.collect(n_step=workers, random=True)  # one step per worker
            walls.append(stats.collect_time)
            worker_times.append(max(s.collect_time for s in dc.last_worker_stats.values()))
        out["call_wall_ms"] = 1e3 * statistics.median(walls)
        out["call_overhead_ms"] = 1e3 * statistics.median(np.subtract(walls, worker_times).tolist())
        # one episode per worker: with the store, every worker also commits one shard per call
        walls = [dc.collect(n_episode=workers, random=True).collect_time for _ in range(calls)]
        out["episode_call_ms"] = 1e3 * statistics.median(walls)
        if store is None:
            for mib in (1, 32):
                weights = {"w": np.zeros(mib * 2**20 // 8)}
                times = []
                for _ in range(max(3, repeats)):
                    start = time.perf_counter()
                    dc.set_policy_weights(weights)
                    times.append(time.perf_counter() - start)
                out[f"weights_{mib}mib_ms"] = 1e3 * statistics.median(times)
    return out


def ray_vector_env(envs: int, steps: int, repeats: int) -> dict[str, float]:
    """Collector steps/s over RayVectorEnv (one actor per env) and over DummyVectorEnv."""
    out = {}
    for backend in ("ray", "dummy"):
        with Collector(None, make_vector(ENV_ID, envs, backend=backend), seed=0) as collector:
            collector.collect(n_step=envs * 10, random=True, reset_before_collect=True)
            out[backend] = best(repeats, lambda c=collector: c.collect(n_step=steps, random=True).collect_speed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="steps per timed collect call")
    parser.add_argument("--envs", type=int, default=8, help="envs per worker")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50, help="small calls timed for the per-call overhead")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    results: dict[str, Any] = {"cpus": ray.cluster_resources().get("CPU"), "envs_per_worker": args.envs}
    results["local"] = local_collector(args.steps, args.envs, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            results[f"w{workers}"] = distributed(workers, args.steps, args.envs, args.repeats, None, args.calls)
            results[f"w{workers}_store"] = distributed(
                workers, args.steps, args.envs, args.repeats, Path(tmp), args.calls
            )
    results["ray_vector_env"] = ray_vector_env(args.envs, max(args.envs * 50, args.steps // 100), args.repeats)

    local = results["local"]["steps_per_s"]
    print(f"Ray CPUs: {results['cpus']:.0f}; {args.envs} CartPole envs per worker; random actions")
    print(f"{'row':44s} {'steps/s':>10s} {'vs local':>9s} {'steps/CPU-s':>12s}")
    name = "Collector, in-process (reference)"
    print(f"{name:44s} {local:10,.0f} {1.0:9.2f} {results['local']['steps_per_cpu_s']:12,.0f}")
    for workers in (1, 2):
        for suffix, label in (("", "no store"), ("_store", "store")):
            row = results[f"w{workers}{suffix}"]
            name = f"DistributedCollector, {workers} worker(s), {label}"
            print(
                f"{name:44s} {row['steps_per_s']:10,.0f} {row['steps_per_s'] / local:9.2f} "
                f"{row['steps_per_worker_cpu_s']:12,.0f}"
            )
    for name, value in results["ray_vector_env"].items():
        print(f"{'Collector over ' + name + ' vector env (' + str(args.envs) + ' envs)':44s} {value:10,.0f}")
    print()
    for workers in (1, 2):
        row, srow = results[f"w{workers}"], results[f"w{workers}_store"]
        print(
            f"{workers} worker(s): collect(n_step={workers}) {row['call_wall_ms']:.2f} ms wall, "
            f"{row['call_overhead_ms']:.2f} ms Ray overhead; collect(n_episode={workers}) "
            f"{row['episode_call_ms']:.2f} ms without store, {srow['episode_call_ms']:.2f} ms with one shard "
            f"commit per worker; set_policy_weights 1 MiB {row['weights_1mib_ms']:.1f} ms, "
            f"32 MiB {row['weights_32mib_ms']:.1f} ms"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
