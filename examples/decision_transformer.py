"""User story: "Train a Decision Transformer on slices of a mixed-quality dataset and ask it for a high return."

1. Collect: a pole-balancing controller plays CartPole with a share epsilon of its actions replaced by random
   ones, one round of episodes per epsilon, so the dataset's returns range from about 20 to 500.
2. Train: a small causal transformer reads windows of (return-to-go, observation, action) tokens drawn with
   ``dataset.sample_slices(..., pad="start")`` (``returns_to_go``, ``timesteps`` and ``mask`` come with each
   window) and learns to predict each action from the tokens up to its observation.
3. Evaluate: conditioned on a high target return (the return still to get, lowered by each reward), it plays
   fresh episodes; its mean return is printed beside the behaviour data's mean, which it should exceed.

Needs the torch extra (``pip install 'vcollect[torch]'``); without it, it says so in one line and exits.

    python examples/decision_transformer.py --updates 600
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import vcollect
from vcollect.policies import EpsilonGreedy

try:
    import torch
except ImportError:  # one line naming the extra, not a traceback
    sys.exit("examples/decision_transformer.py needs the torch extra: pip install 'vcollect[torch]'")

#: CartPole-v1's longest episode (its time limit), hence the largest timestep and return.
MAX_STEPS = 500


def controller(obs: np.ndarray, state: Any = None) -> tuple[np.ndarray, None]:
    """Push the cart towards where the pole is falling (pole angle plus half its angular velocity)."""
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64), None


class DecisionTransformer(torch.nn.Module):
    """A causal transformer over interleaved (return-to-go, observation, action) tokens, one triple per step,
    each token embedding plus its step's timestep embedding; the action of step t is read from the output at
    step t's observation token, which sees that step's return-to-go and everything before, not its action."""

    def __init__(self, obs_dim: int, n_actions: int, context: int, width: int = 64, layers: int = 2,
                 heads: int = 2, return_scale: float = MAX_STEPS) -> None:
        super().__init__()
        self.context = context
        self.return_scale = return_scale
        self.embed_return = torch.nn.Linear(1, width)
        self.embed_obs = torch.nn.Linear(obs_dim, width)
        self.embed_action = torch.nn.Embedding(n_actions, width)
        self.embed_time = torch.nn.Embedding(MAX_STEPS + 1, width)
        self.norm = torch.nn.LayerNorm(width)
        layer = torch.nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.body = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, n_actions)
        self.register_buffer("causal", torch.nn.Transformer.generate_square_subsequent_mask(3 * context))

    def forward(self, returns_to_go: torch.Tensor, obs: torch.Tensor, actions: torch.Tensor,
                timesteps: torch.Tensor) -> torch.Tensor:
        """Action logits (batch, steps, n_actions) for windows of (batch, steps) rows."""
        batch, steps = actions.shape
        time = self.embed_time(timesteps)
        tokens = torch.stack([
            self.embed_return(returns_to_go.unsqueeze(-1) / self.return_scale) + time,
            self.embed_obs(obs) + time,
            self.embed_action(actions) + time,
        ], dim=2).reshape(batch, 3 * steps, -1)
        out = self.body(self.norm(tokens), mask=self.causal[: 3 * steps, : 3 * steps], is_causal=True)
        return self.head(out[:, 1::3])  # (batch, steps, n_actions)


def collect_mixed(args: argparse.Namespace) -> vcollect.Dataset:
    """One round of ``--episodes-per-epsilon`` episodes per epsilon, all into one dataset."""
    envs = vcollect.make_vector(args.env, args.num_envs)
    store = vcollect.EpisodeStore.create(
        args.dataset, envs.single_observation_space, envs.single_action_space, env_spec=gym.spec(args.env),
        root=args.root, metadata={"algorithm_name": "epsilon mixtures of a pole-balancing controller"},
        overwrite=True,
    )
    with store:
        for k, epsilon in enumerate(args.epsilons):
            policy = EpsilonGreedy(controller, envs.single_action_space, epsilon, seed=args.seed + k)
            with vcollect.Collector(policy, vcollect.make_vector(args.env, args.num_envs), store=store,
                                    seed=args.seed + k, exploration_noise=True) as collector:
                stats = collector.collect(n_episode=args.episodes_per_epsilon, reset_before_collect=True)
            assert stats.returns_stat is not None
            print(f"epsilon {epsilon:.2f}: mean return {stats.returns_stat.mean:6.1f}")
    envs.close()
    return vcollect.load_dataset(args.dataset, root=args.root)


def train(model: DecisionTransformer, dataset: vcollect.Dataset, args: argparse.Namespace) -> None:
    """``--updates`` steps of cross-entropy on the actions of windows drawn as slices (padded rows left out)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    model.train()
    for update in range(args.updates):
        batch = dataset.sample_slices(args.batch_size, args.context, pad="start")
        actions = torch.as_tensor(batch["actions"], dtype=torch.int64)
        logits = model(torch.as_tensor(batch["returns_to_go"], dtype=torch.float32),
                       torch.as_tensor(batch["observations"], dtype=torch.float32), actions,
                       torch.as_tensor(batch["timesteps"], dtype=torch.int64))
        mask = torch.as_tensor(batch["mask"])
        loss = torch.nn.functional.cross_entropy(logits[mask], actions[mask])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if update % max(1, args.updates // 5) == 0:
            print(f"update {update}: loss {loss.item():.4f}")


@torch.no_grad()
def evaluate(model: DecisionTransformer, env_id: str, episodes: int, target: float, seed: int) -> np.ndarray:
    """The returns of ``episodes`` episodes played side by side, each step's action the model's choice given
    the last ``model.context`` steps (left-padded with zeros, as training windows padded at the start are)."""
    model.eval()
    envs = [gym.make(env_id) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
    k = model.context
    history_obs = np.zeros((episodes, MAX_STEPS + k, obs.shape[1]), dtype=np.float32)
    history_rtg = np.zeros((episodes, MAX_STEPS + k), dtype=np.float32)
    history_act = np.zeros((episodes, MAX_STEPS + k), dtype=np.int64)
    history_time = np.zeros((episodes, MAX_STEPS + k), dtype=np.int64)
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    for t in range(MAX_STEPS):
        at = t + k - 1  # row of step t: the first k - 1 rows stay zero padding
        history_obs[:, at] = obs
        history_rtg[:, at] = target - returns
        history_time[:, at] = t
        window = slice(at - k + 1, at + 1)
        logits = model(torch.as_tensor(history_rtg[:, window]), torch.as_tensor(history_obs[:, window]),
                       torch.as_tensor(history_act[:, window]), torch.as_tensor(history_time[:, window]))
        actions = logits[:, -1].argmax(dim=-1).numpy()
        history_act[:, at] = actions
        for i in np.flatnonzero(running):
            next_obs, reward, terminated, truncated, _ = envs[i].step(int(actions[i]))
            returns[i] += reward
            obs[i] = next_obs
            running[i] = not (terminated or truncated)
        if not running.any():
            break
    for env in envs:
        env.close()
    return returns


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Collect a mixed-quality dataset, train a Decision Transformer on its slices, evaluate it at a high
    target return; returns the behaviour data's episode returns and the achieved ones."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.3, 0.45, 0.6, 0.8, 1.0],
                        help="share of random actions, one round of episodes each")
    parser.add_argument("--episodes-per-epsilon", type=int, default=40)
    parser.add_argument("--context", type=int, default=20, help="steps per window (the model's context)")
    parser.add_argument("--updates", type=int, default=600, help="gradient steps")
    parser.add_argument("--batch-size", type=int, default=64, help="windows per gradient step")
    parser.add_argument("--width", type=int, default=64, help="the transformer's token width")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--target", type=float, default=float(MAX_STEPS), help="the return asked for")
    parser.add_argument("--eval-episodes", type=int, default=16)
    parser.add_argument("--dataset", default="examples/cartpole-mixed-v0")
    parser.add_argument("--root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # a model this small runs faster on one thread than on several

    dataset = collect_mixed(args)
    dataset.set_seed(args.seed)
    behaviour = np.asarray(dataset.episode_returns, dtype=np.float64)
    print(f"dataset: {dataset.total_episodes} episodes, {dataset.total_steps} steps, returns "
          f"{behaviour.min():.0f} to {behaviour.max():.0f}, mean {behaviour.mean():.1f}")

    model = DecisionTransformer(int(np.prod(dataset.observation_space.shape or ())),
                                int(dataset.action_space.n), args.context,  # type: ignore[attr-defined]
                                width=args.width)
    train(model, dataset, args)
    achieved = evaluate(model, args.env, args.eval_episodes, args.target, args.seed + 10_000)
    print(f"behaviour data: mean return {behaviour.mean():6.1f} over {behaviour.size} episodes")
    print(f"decision transformer asked for {args.target:.0f}: mean return {achieved.mean():6.1f} "
          f"over {achieved.size} episodes")
    return {"behaviour": behaviour, "achieved": achieved, "dataset": dataset}


if __name__ == "__main__":
    main()
