"""What handing infos to a policy costs, and that policies which do not ask for them pay nothing.

Process CPU time per transition (in-process backends only: on a loaded 2-core machine wall-clock windows
of the same code differ by 2x, CPU time by a few percent), windows taken in turns, fastest kept. Usage:

    python benchmarks/bench_policy_infos.py [--rows base|infos] [--rounds 8]

``base``: CartPole-v1 x 8 on the dummy and gymnasium backends, random actions and a numpy policy (runs on
any vcollect: alternate two PYTHONPATHs to compare versions). ``infos``: the same numpy policy asking for
infos, and a Tianshou DQN policy with ``pass_infos`` False/True on envs whose infos carry two keys.
Prints one JSON object: microseconds of CPU per transition per row.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from lean_policies import LeanPolicyWithInfos, lean_policy

import vcollect
from vcollect.envs import DummyVectorEnv

NUM_ENVS = 8


class TwoKeyInfos(gym.Wrapper):
    """CartPole whose reset and step infos carry ``t`` (steps so far) and ``x`` (cart position)."""

    def reset(self, **kwargs: Any) -> Any:
        obs, _ = self.env.reset(**kwargs)
        self.t = 0
        return obs, {"t": 0, "x": float(obs[0])}

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self.t += 1
        return obs, reward, terminated, truncated, {"t": self.t, "x": float(obs[0])}


def two_key_cartpole() -> gym.Env:
    return TwoKeyInfos(gym.make("CartPole-v1"))


def base_rows() -> dict[str, tuple[vcollect.Collector, bool, int]]:
    rows = {}
    for backend in ("dummy", "gymnasium"):
        for mode in ("random", "policy"):
            envs = vcollect.make_vector("CartPole-v1", NUM_ENVS, backend=backend)
            policy = None if mode == "random" else lean_policy
            rows[f"{backend}-{mode}"] = (vcollect.Collector(policy, envs, seed=0), mode == "random", 8000)
    return rows


def infos_rows() -> dict[str, tuple[vcollect.Collector, bool, int]]:
    import torch
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.utils.net.common import Net

    from vcollect.policies import TianshouPolicy

    rows = {}
    for backend in ("dummy", "gymnasium"):
        envs = vcollect.make_vector("CartPole-v1", NUM_ENVS, backend=backend)
        rows[f"{backend}-policy"] = (vcollect.Collector(lean_policy, envs, seed=0), False, 8000)
        envs = vcollect.make_vector("CartPole-v1", NUM_ENVS, backend=backend)
        rows[f"{backend}-policy-wants-infos"] = (vcollect.Collector(LeanPolicyWithInfos(), envs, seed=0), False, 8000)
    torch.manual_seed(0)
    space = gym.make("CartPole-v1").action_space
    net = Net(state_shape=4, action_shape=2, hidden_sizes=[64, 64])
    dqn = DiscreteQLearningPolicy(model=net, action_space=space)
    for flag in (False, True):
        envs = DummyVectorEnv([two_key_cartpole] * NUM_ENVS)
        policy = TianshouPolicy(dqn, pass_infos=flag)
        rows[f"dummy-tianshou-dqn-pass_infos={flag}"] = (vcollect.Collector(policy, envs, seed=0), False, 2000)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", choices=["base", "infos"], default="base")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    make: Callable[[], dict[str, tuple[vcollect.Collector, bool, int]]] = (
        base_rows if args.rows == "base" else infos_rows
    )
    rows = make()
    best = dict.fromkeys(rows, float("inf"))
    for collector, random, steps in rows.values():
        collector.reset()
        collector.collect(n_step=steps // 4, random=random)
    for _ in range(args.rounds):
        for name, (collector, random, steps) in rows.items():
            start = time.process_time()
            collector.collect(n_step=steps, random=random)
            best[name] = min(best[name], (time.process_time() - start) / steps * 1e6)
    for collector, _, _ in rows.values():
        collector.close()
    print(json.dumps({name: round(value, 2) for name, value in best.items()}))


if __name__ == "__main__":
    main()
