"""The ``vcollect`` command: collect into datasets, list and inspect them.

Bad input (unknown env or dataset, bad id, bad options) prints one line on stderr and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.table import Table

from vcollect.stats import CollectStats

BACKENDS = ("dummy", "subproc")


class UsageError(Exception):
    """A mistake in the command line: reported on one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``vcollect`` command."""
    parser = argparse.ArgumentParser(prog="vcollect", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    collect = commands.add_parser("collect", help="run a policy on N envs; optionally store a dataset")
    collect.add_argument("env_id", metavar="ENV_ID", help="a registered gymnasium env id, e.g. CartPole-v1")
    collect.add_argument("--num-envs", type=int, default=8)
    collect.add_argument("--backend", choices=BACKENDS, default="subproc")
    count = collect.add_mutually_exclusive_group()
    count.add_argument("--steps", type=int, help="collect exactly this many steps")
    count.add_argument("--episodes", type=int, help="collect exactly this many episodes")
    collect.add_argument("--policy", default="random", help="'random' or module:callable(obs_space, act_space)")
    collect.add_argument("--seed", type=int, default=None)
    collect.add_argument("--dataset", default=None, help="store episodes in dataset ns/name-vN")
    collect.add_argument("--overwrite", action="store_true", help="replace an existing dataset")
    collect.add_argument("--author", default=None)
    collect.add_argument("--algorithm-name", default=None)
    collect.add_argument("--root", default=None, help="datasets folder (default: $VCOLLECT_DATASETS_PATH)")

    list_cmd = commands.add_parser("list", help="table of local datasets")
    list_cmd.add_argument("--root", default=None)

    show = commands.add_parser("show", help="a dataset's metadata, spaces and statistics")
    show.add_argument("dataset_id", metavar="ID")
    show.add_argument("--root", default=None)

    delete = commands.add_parser("delete", help="delete datasets")
    delete.add_argument("dataset_ids", metavar="ID", nargs="+")
    delete.add_argument("--root", default=None)
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    console = Console()
    handlers: dict[str, Callable[[argparse.Namespace, Console], int]] = {
        "collect": run_collect,
        "list": run_list,
        "show": run_show,
        "delete": run_delete,
    }
    from vcollect.errors import DatasetError

    try:
        return handlers[args.command](args, console)
    except (UsageError, DatasetError) as exc:
        print(f"vcollect {args.command}: error: {exc}", file=sys.stderr)
        return 2


def load_policy_factory(spec: str) -> Callable[[gym.Space, gym.Space], Any]:
    """Import ``module:callable`` (a factory called as factory(observation_space, action_space))."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--policy must be 'random' or 'module:callable', got {spec!r}")
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import policy module {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"module {module_name!r} has no callable {attr!r}")
    return factory  # type: ignore[no-any-return]


def run_collect(args: argparse.Namespace, console: Console) -> int:
    """``vcollect collect``: collect exactly --steps or --episodes, optionally into a dataset."""
    from vcollect.collector import Collector
    from vcollect.envs import make_vector
    from vcollect.store import EpisodeStore

    if (args.steps is None) == (args.episodes is None):
        raise UsageError("pass exactly one of --steps N or --episodes N")
    if (args.steps if args.steps is not None else args.episodes) < 1 or args.num_envs < 1:
        raise UsageError("--steps/--episodes and --num-envs must be positive")
    if args.env_id not in gym.registry:
        raise UsageError(f"unknown environment id {args.env_id!r}; see gymnasium.registry for the ids")
    factory = None if args.policy == "random" else load_policy_factory(args.policy)
    envs = make_vector(args.env_id, args.num_envs, backend=args.backend)
    store = None
    try:
        policy = factory(envs.single_observation_space, envs.single_action_space) if factory else None
        if args.dataset is not None:
            metadata = {"author": args.author, "algorithm_name": args.algorithm_name or args.policy}
            store = EpisodeStore.create(
                args.dataset,
                envs.single_observation_space,
                envs.single_action_space,
                env_spec=gym.spec(args.env_id),
                root=args.root,
                metadata=metadata,
                overwrite=args.overwrite,
            )
        collector = Collector(policy, envs, store=store, seed=args.seed)
        try:
            stats = collector.collect(
                n_step=args.steps,
                n_episode=args.episodes,
                random=factory is None,
                reset_before_collect=True,
                progress=True,
            )
        except KeyboardInterrupt:
            collector.close()
            saved = store.committed_episodes if store is not None else 0
            console.print(f"interrupted: {saved} episodes committed to the dataset")
            return 130
        finally:
            collector.close()
    finally:
        envs.close()
        if store is not None:
            store.close()
    console.print(stats_table(stats, args.env_id))
    if args.dataset is not None:
        console.print(f"dataset [bold]{args.dataset}[/bold] written to {store.path if store else ''}")
    return 0


def stats_table(stats: CollectStats, title: str) -> Table:
    """A rich table of one CollectStats."""
    table = Table(title=f"CollectStats: {title}")
    for column in ("steps", "episodes", "steps/s", "return mean", "std", "min", "max", "length mean",
                   "std", "min", "max"):
        table.add_column(column, justify="right")
    cells = [f"{stats.n_collected_steps:,}", f"{stats.n_collected_episodes:,}", f"{stats.collect_speed:,.0f}"]
    for summary in (stats.returns_stat, stats.lens_stat):
        if summary is None:
            cells += ["-"] * 4
        else:
            cells += [f"{summary.mean:.2f}", f"{summary.std:.2f}", f"{summary.min:.2f}", f"{summary.max:.2f}"]
    table.add_row(*cells)
    return table


def run_list(args: argparse.Namespace, console: Console) -> int:
    """``vcollect list``: a table of the datasets under the root."""
    from vcollect.store import list_datasets

    datasets = list_datasets(args.root)
    table = Table(title="local datasets")
    for column in ("id", "episodes", "steps", "size", "author", "created"):
        table.add_column(column, justify="right" if column in ("episodes", "steps", "size") else "left")
    for dataset_id, info in sorted(datasets.items()):
        table.add_row(
            dataset_id,
            f"{info.get('total_episodes', 0):,}",
            f"{info.get('total_steps', 0):,}",
            human_size(int(info.get("size_bytes", 0))),
            str(info.get("author") or "-"),
            str(info.get("created_at") or "-")[:19],
        )
    console.print(table)
    return 0


def human_size(n_bytes: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def run_show(args: argparse.Namespace, console: Console) -> int:
    """``vcollect show ID``: metadata, spaces, counts and return/length statistics."""
    import numpy as np

    from vcollect.store import load_dataset

    dataset = load_dataset(args.dataset_id, root=args.root)
    table = Table(title=f"dataset {args.dataset_id}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    returns = np.asarray(dataset.episode_returns, dtype=np.float64)
    lens = np.asarray(dataset.episode_lengths)
    rows: list[tuple[str, str]] = [
        ("episodes", f"{dataset.total_episodes:,}"),
        ("steps", f"{dataset.total_steps:,}"),
        ("observation space", str(dataset.observation_space)),
        ("action space", str(dataset.action_space)),
        ("env spec", dataset.env_spec.id if dataset.env_spec is not None else "-"),
    ]
    for key, value in sorted(dataset.metadata.items()):
        if isinstance(value, (str, int, float)) and value is not None:
            rows.append((key, str(value)))
    if len(returns):
        rows.append(("return", f"{returns.mean():.2f} ± {returns.std():.2f} [{returns.min():.2f}, {returns.max():.2f}]"))
        rows.append(("length", f"{lens.mean():.2f} ± {lens.std():.2f} [{lens.min()}, {lens.max()}]"))
    for field, value in rows:
        table.add_row(field, value)
    console.print(table)
    return 0


def run_delete(args: argparse.Namespace, console: Console) -> int:
    """``vcollect delete ID...``: remove datasets (asks first unless --yes)."""
    from vcollect.store import delete_dataset, load_dataset

    for dataset_id in args.dataset_ids:
        load_dataset(dataset_id, root=args.root)  # unknown ids fail before anything is deleted
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("refusing to delete without confirmation: pass --yes")
        answer = input(f"delete {', '.join(args.dataset_ids)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            console.print("nothing deleted")
            return 1
    for dataset_id in args.dataset_ids:
        delete_dataset(dataset_id, root=args.root)
        console.print(f"deleted {dataset_id}")
    return 0
