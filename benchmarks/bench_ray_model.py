"""The throughput model of DistributedCollector, measured (``python benchmarks/bench_ray.py --model``).

aggregate steps/s at N workers of speed s = min(N * s * efficiency, driver ceiling). Rows:

* ``ceiling``: steps/s with trivial envs (the env costs nothing, so Ray, the store and the driver are the
  limit) for each transport, 2 workers, with a store; and the object-store writer's own intake: CartPole-sized
  episodes sent by the driver through RemoteSink to the ShardWriterActor and committed, no env at all;
* ``overhead``: one worker against the same Collector alone, CartPole, with and without the store;
* ``scaling``: W = 1, 2, 4, 8 workers (a quarter CPU each) on envs whose step sleeps 1 ms, so that 2 cores
  are not the limit: aggregate steps/s and efficiency = aggregate / (W * one worker's);
* ``weights``: set_policy_weights of a 10M-parameter torch model to 4 workers (one ray.put, fetched by each)
  against handing the state_dict to each worker's call by value (Ray then stores it once per worker).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vcollect import Collector, make_vector
from vcollect.distributed import DistributedCollector
from vcollect.store import EpisodeStore

STEPS = 60_000


class TrivialEnv(gym.Env):
    """Costs nothing per step: a 4-float observation, episodes of 50 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, sleep: float = 0.0) -> None:
        self.t, self.sleep, self.obs = 0, sleep, np.zeros(4, np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.sleep:
            time.sleep(self.sleep)
        self.t += 1
        return self.obs, 1.0, self.t >= 50, False, {}


def torch_policy_10m(observation_space: gym.Space, action_space: gym.Space) -> Any:
    """A TorchPolicy on an MLP of 10.0M parameters (4 -> 2500 -> 2500 -> 1500 -> n_actions)."""
    import torch

    from vcollect.policies import TorchPolicy

    n = int(observation_space.shape[0])
    net = torch.nn.Sequential(
        torch.nn.Linear(n, 2500), torch.nn.ReLU(), torch.nn.Linear(2500, 2500), torch.nn.ReLU(),
        torch.nn.Linear(2500, 1500), torch.nn.ReLU(), torch.nn.Linear(1500, int(action_space.n)),
    )
    return TorchPolicy(net, action_space)


def _dataset(root: Path, name: str, obs: gym.Space, act: gym.Space) -> str:
    EpisodeStore.create(name, obs, act, root=root, overwrite=True).close()
    return name


def _best_speed(dc: DistributedCollector | Collector, steps: int, rounds: int) -> float:
    return max(dc.collect(n_step=steps, random=True).collect_speed for _ in range(rounds))


def ceiling_rows(root: Path, envs: int, rounds: int) -> dict[str, float]:
    """Trivial envs, 2 workers with a store, per transport; and the writer actor's intake alone."""
    out = {}
    for transport in ("shared_fs", "object_store"):
        store = _dataset(root, f"bench/trivial-{transport.replace('_', '-')}-v0", TrivialEnv.observation_space,
                         TrivialEnv.action_space)
        with DistributedCollector(TrivialEnv, None, num_workers=2, envs_per_worker=envs, store=store, root=root,
                                  seed=0, transport=transport, worker_options={"num_cpus": 0.5}) as dc:
            dc.collect(n_step=2 * envs * 100, random=True)
            out[transport] = _best_speed(dc, STEPS, rounds)
    out["writer_intake"] = writer_intake(root)
    return out


def writer_intake(root: Path, episodes: int = 2000, batch: int = 64) -> float:
    """Steps/s the ShardWriterActor takes in and commits: CartPole-sized episodes of 20 steps sent by the
    driver in batches of 64 (EpisodeWriter's), no env."""
    from vcollect.distributed.transport import RemoteSink, writer_actor

    obs, act = gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2)
    store = _dataset(root, "bench/intake-v0", obs, act)
    actor = writer_actor().remote(store, str(root), {})
    import ray

    key = ray.get(actor.open.remote(0))
    sink = RemoteSink(actor, key, obs, act, max_in_flight=4)
    t = 20
    lengths = np.full(batch, t)
    observations = np.zeros((batch * (t + 1), 4), np.float32)
    actions, rewards = np.zeros(batch * t, np.int64), np.ones(batch * t)
    terms = np.zeros(batch * t, bool)
    terms[t - 1 :: t] = True
    start = time.perf_counter()
    for _ in range(episodes // batch):
        sink.write_episodes(observations, actions, rewards, terms, np.zeros_like(terms), lengths,
                            seeds=[None] * batch, env_ids=[0] * batch)
    sink.flush()
    elapsed = time.perf_counter() - start
    ray.kill(actor)
    return (episodes // batch) * batch * t / elapsed


def overhead_rows(root: Path, envs: int, rounds: int) -> dict[str, float]:
    """CartPole: one worker against the same Collector alone, without and with a store."""
    out = {}
    obs, act = gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2)
    for stored in (False, True):
        tag = "store" if stored else "no_store"
        local_store = EpisodeStore.create(f"bench/local-{tag}-v0", obs, act, root=root, overwrite=True) if stored \
            else None
        with Collector(None, make_vector("CartPole-v1", envs), store=local_store, seed=0) as local:
            local.collect(n_step=envs * 100, random=True, reset_before_collect=True)
            out[f"local_{tag}"] = _best_speed(local, STEPS, rounds)
        if local_store is not None:
            local_store.close()
        store = _dataset(root, f"bench/one-{tag}-v0", obs, act) if stored else None
        with DistributedCollector("CartPole-v1", None, num_workers=1, envs_per_worker=envs, store=store,
                                  root=root, seed=0) as dc:
            dc.collect(n_step=envs * 100, random=True)
            out[f"worker_{tag}"] = _best_speed(dc, STEPS, rounds)
    return out


def scaling_rows(root: Path, rounds: int, envs: int = 4) -> dict[str, float]:
    """Envs whose step sleeps 1 ms, W workers of a quarter CPU each, a store (shared_fs)."""
    out = {}
    for workers in (1, 2, 4, 8):
        store = _dataset(root, f"bench/sleep-w{workers}-v0", TrivialEnv.observation_space, TrivialEnv.action_space)
        with DistributedCollector(TrivialEnv, None, num_workers=workers, envs_per_worker=envs, store=store,
                                  root=root, seed=0, env_kwargs={"sleep": 0.001},
                                  worker_options={"num_cpus": 0.25}) as dc:
            dc.collect(n_step=workers * envs * 20, random=True)
            out[f"w{workers}"] = _best_speed(dc, workers * 2000, rounds)
    return out


def weight_rows(repeats: int = 5) -> dict[str, float]:
    """set_policy_weights of a 10M-parameter model to 4 workers, against per-worker by-value calls."""
    import ray

    net = torch_policy_10m(gym.make("CartPole-v1").observation_space, gym.spaces.Discrete(2))
    state = net.state_dict()
    params = sum(v.numel() for v in state.values())
    out: dict[str, float] = {"params": float(params), "mib": sum(v.numel() * v.element_size() for v in state.values()) / 2**20}
    with DistributedCollector("CartPole-v1", torch_policy_10m, num_workers=4, envs_per_worker=1, seed=0,
                              worker_options={"num_cpus": 0.25}) as dc:
        dc.set_policy_weights(state)  # warm up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            dc.set_policy_weights(state)
            times.append(time.perf_counter() - start)
        out["broadcast_ms"] = 1e3 * statistics.median(times)
        puts = []
        for _ in range(repeats):
            start = time.perf_counter()
            ray.put(state)
            puts.append(time.perf_counter() - start)
        out["one_put_ms"] = 1e3 * statistics.median(puts)
        by_value = []
        for _ in range(repeats):
            start = time.perf_counter()
            ray.get([w.set_weights.remote(state) for w in dc.workers], timeout=300)
            by_value.append(time.perf_counter() - start)
        out["by_value_ms"] = 1e3 * statistics.median(by_value)
    return out


def model_rows(envs: int, rounds: int) -> dict[str, Any]:
    """Every row of the model, printed and returned."""
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rounds = max(1, min(rounds, 3))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        res: dict[str, Any] = {"ceiling": ceiling_rows(root, envs, rounds)}
        res["overhead"] = overhead_rows(root, envs, rounds)
        res["scaling"] = scaling_rows(root, rounds)
        res["weights"] = weight_rows()
    c, o, s, w = res["ceiling"], res["overhead"], res["scaling"], res["weights"]
    print(f"ceiling (trivial envs, 2 workers x {envs}, store): shared_fs {c['shared_fs']:,.0f} steps/s, "
          f"object_store {c['object_store']:,.0f} steps/s; writer actor intake alone {c['writer_intake']:,.0f} steps/s")
    print(f"overhead (CartPole, 1 worker x {envs}): no store {o['worker_no_store']:,.0f} vs Collector alone "
          f"{o['local_no_store']:,.0f} ({o['worker_no_store'] / o['local_no_store']:.2f}); store "
          f"{o['worker_store']:,.0f} vs {o['local_store']:,.0f} ({o['worker_store'] / o['local_store']:.2f})")
    one = s["w1"]
    print("scaling (1 ms steps, 4 envs per worker): " + ", ".join(
        f"W={k[1:]} {v:,.0f} steps/s (eff {v / (int(k[1:]) * one):.2f})" for k, v in s.items()))
    print(f"weights: {w['params'] / 1e6:.1f}M params ({w['mib']:.0f} MiB) to 4 workers: set_policy_weights "
          f"{w['broadcast_ms']:.0f} ms (one ray.put alone {w['one_put_ms']:.0f} ms); by value per worker "
          f"{w['by_value_ms']:.0f} ms")
    return res
