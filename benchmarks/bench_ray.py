"""DistributedCollector and RayVectorEnv throughput on a local Ray, and the fixed cost of a collect call.

Rows (CartPole-v1, random actions, dummy backend with ``--envs`` envs per worker unless said otherwise):

* ``Collector, in-process``: one plain Collector in this process, the reference for one worker's work;
* ``DistributedCollector, W workers`` (W = 1, 2), without and with the store: steps/s of whole calls of
  ``--steps`` steps, timed on the driver (Ray's per-call cost included), and the workers' steps per
  CPU-second (their own CPU time, read from /proc: what one core does when nothing else runs);
* per call: wall time of ``collect(n_step=W)`` (one step per worker) minus the slowest worker's own
  collect time, i.e. what Ray adds to every call; ``collect(n_episode=W)`` without and with the store
  (whose workers commit a shard per ``shard_steps``, not per call), and with the store followed by
  ``flush()``, where every worker commits one shard per call;
* ``set_policy_weights`` of 1 MiB and 32 MiB (one ``ray.put``, one fetch per worker);
* ``RayVectorEnv`` under a Collector (one actor call per env per step) against DummyVectorEnv.

The throughput rows are measured in interleaved rounds (every configuration once per round, all
collectors alive throughout), and the best and the median round are reported: on a shared machine
whatever else runs lands on every configuration alike. Workers ask for a quarter of a logical CPU so that
all configurations can be held at once; at most two workers run at any moment.

``--model`` measures the throughput model instead (see model_rows): each transport's ceiling on trivial
envs, the object-store writer's intake alone, per-worker overhead against the same Collector alone,
scaling over W workers on envs whose step sleeps 1 ms, and a 10M-parameter weight broadcast to 4 workers.

Usage: ``python benchmarks/bench_ray.py [--steps 300000] [--envs 8] [--rounds 7] [--json out.json] [--model]``.
Starts a local Ray with ``--num-cpus`` CPUs (2) unless Ray is initialised or ``RAY_ADDRESS`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
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
    """User + system CPU time of a local process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Local:
    """The in-process reference: a plain Collector on the same envs."""

    def __init__(self, envs: int) -> None:
        self.collector = Collector(None, make_vector(ENV_ID, envs), seed=0)
        self.collector.collect(n_step=envs * 100, random=True, reset_before_collect=True)

    def run(self, steps: int) -> tuple[float, float]:
        """(steps/s, steps per CPU-second) of one call."""
        cpu = time.process_time()
        speed = self.collector.collect(n_step=steps, random=True).collect_speed
        return speed, steps / max(time.process_time() - cpu, 1e-9)

    def close(self) -> None:
        self.collector.close()


class Distributed:
    """A DistributedCollector with W workers, optionally storing into a fresh dataset."""

    def __init__(self, workers: int, envs: int, root: Path | None) -> None:
        store = None
        if root is not None:
            store = f"bench/ray-w{workers}-v0"
            env = gym.make(ENV_ID)
            EpisodeStore.create(store, env.observation_space, env.action_space, root=root, overwrite=True).close()
        self.workers = workers
        self.dc = DistributedCollector(
            ENV_ID, loadable_policy, num_workers=workers, envs_per_worker=envs, store=store, root=root, seed=0,
            worker_options={"num_cpus": 0.25},
        )
        self.dc.collect(n_step=workers * envs * 100, random=True)  # warm up: resets, first shard
        self.pids = [info["pid"] for info in self.dc.worker_info]

    def run(self, steps: int) -> tuple[float, float]:
        """(steps/s on the driver's clock, steps per CPU-second of the workers) of one call."""
        cpu = sum(process_cpu_seconds(pid) for pid in self.pids)
        speed = self.dc.collect(n_step=steps, random=True).collect_speed
        return speed, steps / max(sum(process_cpu_seconds(pid) for pid in self.pids) - cpu, 1e-9)

    def per_call(self, calls: int, weights: bool) -> dict[str, float]:
        """Median costs of small calls (and of weight broadcasts)."""
        dc, out = self.dc, {}
        walls, overheads = [], []
        for _ in range(calls):
            stats = dc.collect(n_step=self.workers, random=True)  # one step per worker
            walls.append(stats.collect_time)
            overheads.append(stats.collect_time - max(s.collect_time for s in dc.last_worker_stats.values()))
        out["step_call_ms"] = 1e3 * statistics.median(walls)
        out["ray_overhead_ms"] = 1e3 * statistics.median(overheads)
        # one episode per worker: with the store, the workers commit per shard size (not per call) ...
        walls = [dc.collect(n_episode=self.workers, random=True).collect_time for _ in range(calls)]
        out["episode_call_ms"] = 1e3 * statistics.median(walls)
        if dc.store_id is not None:  # ... or, flushed after each call, every worker commits one shard per call
            walls = []
            for _ in range(calls):
                start = time.perf_counter()
                dc.collect(n_episode=self.workers, random=True)
                dc.flush()
                walls.append(time.perf_counter() - start)
            out["episode_call_flush_ms"] = 1e3 * statistics.median(walls)
        if weights:
            for mib in (1, 32):
                payload = {"w": np.zeros(mib * 2**20 // 8)}
                times = []
                for _ in range(5):
                    start = time.perf_counter()
                    dc.set_policy_weights(payload)
                    times.append(time.perf_counter() - start)
                out[f"weights_{mib}mib_ms"] = 1e3 * statistics.median(times)
        return out

    def close(self) -> None:
        self.dc.close()


def ray_vector_env(envs: int, steps: int) -> dict[str, float]:
    """Collector steps/s over RayVectorEnv (one actor per env) and over DummyVectorEnv."""
    out = {}
    for backend in ("ray", "dummy"):
        options = {"actor_options": {"num_cpus": 0}} if backend == "ray" else {}
        with Collector(None, make_vector(ENV_ID, envs, backend=backend, **options), seed=0) as collector:
            collector.collect(n_step=envs * 10, random=True, reset_before_collect=True)
            out[backend] = max(collector.collect(n_step=steps, random=True).collect_speed for _ in range(3))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300_000, help="steps per timed collect call")
    parser.add_argument("--envs", type=int, default=8, help="envs per worker")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the throughput rows")
    parser.add_argument("--calls", type=int, default=100, help="small calls timed for the per-call costs")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    parser.add_argument("--model", action="store_true", help="measure the throughput model rows instead")
    args = parser.parse_args()

    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    if args.model:
        from bench_ray_model import model_rows  # benchmarks/ is sys.path[0] when run as a script

        model = model_rows(args.envs, args.rounds)
        if args.json is not None:
            args.json.write_text(json.dumps(model, indent=2))
        return
    results: dict[str, Any] = {"cpus": ray.cluster_resources().get("CPU"), "envs_per_worker": args.envs,
                               "steps_per_call": args.steps}
    with tempfile.TemporaryDirectory() as tmp:
        configs: dict[str, Any] = {"local": Local(args.envs)}
        for workers in (1, 2):
            configs[f"w{workers}"] = Distributed(workers, args.envs, None)
            configs[f"w{workers}_store"] = Distributed(workers, args.envs, Path(tmp))
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
        for _ in range(args.rounds):
            for name, config in configs.items():
                runs[name].append(config.run(args.steps))
        for name, samples in runs.items():
            speeds, per_cpu = [s for s, _ in samples], [c for _, c in samples]
            results[name] = {
                "best_steps_per_s": max(speeds),
                "median_steps_per_s": statistics.median(speeds),
                "best_steps_per_cpu_s": max(per_cpu),
                "median_steps_per_cpu_s": statistics.median(per_cpu),
            }
        for name, config in configs.items():
            if isinstance(config, Distributed):
                results[name].update(config.per_call(args.calls, weights=not name.endswith("store")))
            config.close()
    results["ray_vector_env"] = ray_vector_env(args.envs, max(args.envs * 100, args.steps // 300))
    report(results, args.envs)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


def report(results: dict[str, Any], envs: int) -> None:
    """Print the tables."""
    local = results["local"]["best_steps_per_s"]
    print(f"Ray CPUs: {results['cpus']:.0f}; {envs} CartPole envs per worker; random actions; "
          f"{results['steps_per_call']:,} steps per call")
    print(f"{'row':42s} {'best steps/s':>13s} {'median':>9s} {'vs local':>9s} {'steps/CPU-s':>12s}")
    labels = {"local": "Collector, in-process (reference)"}
    for workers in (1, 2):
        labels[f"w{workers}"] = f"DistributedCollector, {workers} worker(s)"
        labels[f"w{workers}_store"] = f"DistributedCollector, {workers} worker(s), store"
    for name, label in labels.items():
        row = results[name]
        print(f"{label:42s} {row['best_steps_per_s']:13,.0f} {row['median_steps_per_s']:9,.0f} "
              f"{row['best_steps_per_s'] / local:9.2f} {row['median_steps_per_cpu_s']:12,.0f}")
    for name, value in results["ray_vector_env"].items():
        print(f"{'Collector over ' + name + ' vector env (' + str(envs) + ' envs)':42s} {value:13,.0f}")
    print()
    for workers in (1, 2):
        row, srow = results[f"w{workers}"], results[f"w{workers}_store"]
        print(
            f"{workers} worker(s): collect(n_step={workers}) {row['step_call_ms']:.2f} ms, of which Ray "
            f"{row['ray_overhead_ms']:.2f} ms; collect(n_episode={workers}) {row['episode_call_ms']:.2f} ms, "
            f"with the store {srow['episode_call_ms']:.2f} ms (and flush() {srow['episode_call_flush_ms']:.2f} ms); "
            f"set_policy_weights 1 MiB "
            f"{row['weights_1mib_ms']:.1f} ms, 32 MiB {row['weights_32mib_ms']:.1f} ms"
        )


if __name__ == "__main__":
    main()
