"""User story: "Collect demonstrations online, then train a policy offline from the stored data."

1. Online: an expert controller balances CartPole on N envs; every episode goes into a dataset.
2. Offline: a small torch network learns to imitate it (behaviour cloning) from batches drawn with
   ``dataset.sample_steps`` -- no environment involved.
3. The cloned network is evaluated as a ``TorchPolicy`` and compared with the expert and random actions.

Needs the torch extra (``pip install 'vcollect[torch]'``); without it, it says so in one line and exits.

    python examples/online_to_offline.py --episodes 32 --updates 1000
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import vcollect

try:
    import torch

    from vcollect.policies import TorchPolicy  # imports torch too
except ImportError:  # one line naming the extra, not a traceback
    sys.exit("examples/online_to_offline.py needs the torch extra: pip install 'vcollect[torch]'")


def expert(obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
    """Push the cart towards where the pole is falling (pole angle plus half its angular velocity)."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64), None


def evaluate(policy: Any, env_id: str, num_envs: int, episodes: int, seed: int) -> vcollect.CollectStats:
    """Exactly ``episodes`` episodes of ``policy`` (None: random actions), nothing stored."""
    with vcollect.Collector(policy, vcollect.make_vector(env_id, num_envs), seed=seed) as collector:
        return collector.collect(n_episode=episodes, reset_before_collect=True, random=policy is None)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Collect expert data, clone it offline, evaluate; returns the stats and the clone's accuracy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=32, help="expert episodes to collect")
    parser.add_argument("--updates", type=int, default=1000, help="gradient steps of behaviour cloning")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--eval-episodes", type=int, default=16)
    parser.add_argument("--dataset", default="examples/cartpole-expert-v0")
    parser.add_argument("--root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # networks this small run faster on one thread than on several

    # 1. Online collection into a dataset.
    envs = vcollect.make_vector(args.env, args.num_envs)
    store = vcollect.EpisodeStore.create(
        args.dataset, envs.single_observation_space, envs.single_action_space, env_spec=gym.spec(args.env),
        root=args.root, metadata={"algorithm_name": "pole-angle expert"}, overwrite=True,
    )
    with store, vcollect.Collector(expert, envs, store=store, seed=args.seed) as collector:
        expert_stats = collector.collect(n_episode=args.episodes, reset_before_collect=True)
    print("expert:", expert_stats)

    # 2. Offline behaviour cloning from sampled transitions.
    dataset = vcollect.load_dataset(args.dataset, root=args.root)
    dataset.set_seed(args.seed)
    n_actions = int(dataset.action_space.n)  # type: ignore[attr-defined]
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, n_actions))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for update in range(args.updates):
        batch = dataset.sample_steps(args.batch_size)
        logits = net(torch.as_tensor(batch["observations"], dtype=torch.float32))
        loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(batch["actions"]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if update % max(1, args.updates // 5) == 0:
            print(f"update {update}: loss {loss.item():.4f}")
    held_out = dataset.sample_steps(2048)
    with torch.no_grad():
        predicted = net(torch.as_tensor(held_out["observations"], dtype=torch.float32)).argmax(dim=1).numpy()
    accuracy = float((predicted == held_out["actions"]).mean())
    print(f"clone agrees with the expert on {accuracy:.1%} of sampled states")

    # 3. Evaluate the clone, the expert's data and random actions on fresh episodes.
    clone_stats = evaluate(TorchPolicy(net, dataset.action_space), args.env, args.num_envs, args.eval_episodes, args.seed + 1)
    random_stats = evaluate(None, args.env, args.num_envs, args.eval_episodes, args.seed + 1)
    for name, stats in (("expert", expert_stats), ("clone", clone_stats), ("random", random_stats)):
        assert stats.returns_stat is not None
        print(f"{name:>6}: mean return {stats.returns_stat.mean:7.1f} over {stats.n_collected_episodes} episodes")
    return {"expert": expert_stats, "clone": clone_stats, "random": random_stats, "accuracy": accuracy}


if __name__ == "__main__":
    main()
