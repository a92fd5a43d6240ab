"""User story: "My team's tools read Minari datasets; collect with vcollect, hand over a Minari dataset."

Collects a dataset, exports it in Minari's HDF5 format, loads it with ``minari.load_dataset`` (when
minari is installed) and checks that it holds the same episodes, then imports it back. Minari finds
datasets under ``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``); export writes there too.

Needs no extra to export and import back (vcollect writes Minari's format itself); with the minari extra
(``pip install 'vcollect[minari]'``) it also loads the export with minari, and says when it skips that.

    MINARI_DATASETS_PATH=/tmp/minari python examples/minari_export.py --episodes 100
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import vcollect


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Collect, export to Minari, load with minari, import back; returns the datasets and the export path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--dataset", default="examples/cartpole-minari-export-v0")
    parser.add_argument("--minari-id", default="vcollect/examples-cartpole-v0")
    parser.add_argument("--imported", default="examples/cartpole-from-minari-v0", help="id for the import back")
    parser.add_argument("--root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    envs = vcollect.make_vector(args.env, args.num_envs)
    store = vcollect.EpisodeStore.create(
        args.dataset, envs.single_observation_space, envs.single_action_space, env_spec=gym.spec(args.env),
        root=args.root, metadata={"author": "vcollect examples", "algorithm_name": "random"}, overwrite=True,
    )
    with store, vcollect.Collector(None, envs, store=store, seed=args.seed) as collector:
        collector.collect(n_episode=args.episodes, reset_before_collect=True, random=True)
    dataset = vcollect.load_dataset(args.dataset, root=args.root)

    path = vcollect.export_minari(dataset, args.minari_id, overwrite=True)
    print(f"exported {dataset} to {path}")

    result: dict[str, Any] = {"dataset": dataset, "path": path, "minari": None}
    if importlib.util.find_spec("minari") is not None:
        import minari

        theirs = minari.load_dataset(args.minari_id)
        mine, first = dataset[0], theirs[0]
        same = (theirs.total_episodes, theirs.total_steps) == (dataset.total_episodes, dataset.total_steps)
        if not (same and np.array_equal(first.observations, mine.observations) and np.array_equal(first.actions, mine.actions)):
            raise RuntimeError(f"minari reads {theirs.total_episodes} episodes that differ from the exported ones")
        print(f"minari.load_dataset({args.minari_id!r}): {theirs.total_episodes} episodes, {theirs.total_steps} steps")
        result["minari"] = theirs
    else:
        print("minari is not installed (pip install 'vcollect[minari]'); skipped loading the export with it")

    back = vcollect.import_minari(args.minari_id, args.imported, root=args.root, overwrite=True)
    print(f"imported back: {back}")
    result["imported"] = back
    return result


if __name__ == "__main__":
    main()
