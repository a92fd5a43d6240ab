"""User story: "I have a torch actor network; roll it out on many envs for training data, then evaluate it."

A stochastic rollout (actions sampled from the network's logits) collects exactly --steps transitions
into a dataset; a greedy evaluation (argmax, no dataset) runs exactly --eval-episodes episodes. Between
the two, new weights are loaded the way a training loop would after an update.

Needs the torch extra (``pip install 'vcollect[torch]'``); without it, it says so in one line and exits.

    python examples/torch_rollout.py --steps 20000 --eval-episodes 32
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

import vcollect

try:
    import torch

    from vcollect.policies import TorchPolicy  # imports torch too
except ImportError:  # one line naming the extra, not a traceback
    sys.exit("examples/torch_rollout.py needs the torch extra: pip install 'vcollect[torch]'")


def make_actor(observation_size: int, n_actions: int) -> torch.nn.Module:
    """A small MLP that maps observations to action logits."""
    return torch.nn.Sequential(
        torch.nn.Linear(observation_size, 64), torch.nn.Tanh(), torch.nn.Linear(64, n_actions)
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Roll out, update weights, evaluate; returns the two CollectStats and the dataset."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--backend", default="dummy")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--eval-episodes", type=int, default=16)
    parser.add_argument("--dataset", default="examples/cartpole-torch-rollout-v0")
    parser.add_argument("--root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # networks this small run faster on one thread than on several

    envs = vcollect.make_vector(args.env, args.num_envs, backend=args.backend)
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    assert isinstance(act_space, gym.spaces.Discrete) and obs_space.shape is not None
    actor = make_actor(obs_space.shape[0], int(act_space.n))

    # Rollout: sample from the logits (deterministic=False), store every finished episode.
    explore = TorchPolicy(actor, act_space, deterministic=False)
    store = vcollect.EpisodeStore.create(
        args.dataset, obs_space, act_space, env_spec=gym.spec(args.env), root=args.root,
        metadata={"algorithm_name": "torch-mlp-sampling"}, overwrite=True,
    )
    with store, vcollect.Collector(explore, envs, store=store, seed=args.seed) as collector:
        rollout = collector.collect(n_step=args.steps, reset_before_collect=True)
    print("rollout:", rollout)

    # Training happens elsewhere; the acting policy takes the learner's new weights (a fresh network stands
    # in for a trained learner here). TorchPolicy passes load_state_dict through to its module.
    learner = make_actor(obs_space.shape[0], int(act_space.n))
    explore.load_state_dict(learner.state_dict())

    # Evaluation of the new weights: greedy actions, exact number of episodes, nothing stored.
    greedy = TorchPolicy(actor, act_space, deterministic=True)
    eval_envs = vcollect.make_vector(args.env, args.num_envs, backend=args.backend)
    with vcollect.Collector(greedy, eval_envs, seed=args.seed + 1) as evaluator:
        evaluation = evaluator.collect(n_episode=args.eval_episodes, reset_before_collect=True)
    print("evaluation:", evaluation)
    dataset = vcollect.load_dataset(args.dataset, root=args.root)
    print(f"{dataset}: the {rollout.n_collected_episodes} episodes the rollout finished")
    return {"rollout": rollout, "evaluation": evaluation, "dataset": dataset}


if __name__ == "__main__":
    main()
