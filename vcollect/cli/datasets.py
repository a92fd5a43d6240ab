"""The dataset commands: list, show (and its --plot figure), delete, combine, split, export and import-minari."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from vcollect.cli.checks import check_folder, check_output_file, check_seed
from vcollect.cli.exits import EXIT_FAILURE, EXIT_OK, CommandParser, UsageError
from vcollect.cli.output import cell, human_size, summary_rows
from vcollect.errors import DatasetError
from vcollect.stats import SummaryStats

#: How show and verify read their dataset argument (naming.locate_dataset's rule).
PATH_HELP = ("a dataset id (looked up under --root), or the path of a dataset's folder: anything that is not an "
             "id, such as ./saved or an absolute path")


def load_named(args: argparse.Namespace, **options: Any) -> Any:
    """The dataset ``args.dataset_id`` names: an id under ``--root``, or a dataset folder's path.

    Args:
        args: The command's arguments (``dataset_id``, ``root``).
        **options: load_dataset's keyword options.

    Returns:
        The loaded Dataset.

    Raises:
        UsageError: ``--root`` is given with a path.
    """
    from vcollect.store import load_dataset
    from vcollect.store.layout.naming import is_dataset_id

    if args.root is not None and not is_dataset_id(args.dataset_id):
        raise UsageError(f"--root applies to dataset ids; {args.dataset_id!r} is no id: pass a folder's path "
                         "without --root")
    return load_dataset(args.dataset_id, root=args.root, **options)


def add_dataset_parsers(commands: argparse._SubParsersAction[CommandParser], *, root_help: str) -> None:
    """Add the dataset commands to ``commands``, in the order ``--help`` lists them."""
    list_cmd = commands.add_parser(
        "list", help="table of local datasets",
        description="A table of the datasets under the root: id, episodes, steps, size on disk, author, created.",
    )
    list_cmd.add_argument("--root", default=None, metavar="DIR", help=root_help)
    list_cmd.add_argument("--by-namespace", action="store_true",
                          help="one table per namespace, titled with its description (empty namespaces too)")
    list_cmd.set_defaults(handler=run_list)

    show = commands.add_parser(
        "show", help="a dataset's metadata, spaces, counts and statistics",
        description="A dataset's metadata, spaces, counts and return/length statistics; --plot writes a "
        "figure with the return and length histograms and the return per episode (needs matplotlib).",
    )
    show.add_argument("dataset_id", metavar="ID_OR_PATH", help=PATH_HELP)
    show.add_argument("--plot", metavar="FILE.png", default=None, help="write the figure to this file")
    show.add_argument("--root", default=None, metavar="DIR", help=root_help)
    show.set_defaults(handler=run_show)

    combine = commands.add_parser(
        "combine", help="copy the episodes of several datasets into a new one",
        description="Copy the episodes of datasets (with equal spaces) into a new dataset, in order.",
    )
    combine.add_argument("dataset_ids", metavar="ID", nargs="+")
    combine.add_argument("--into", metavar="NEW_ID", required=True, help="id of the new dataset")
    combine.add_argument("--root", default=None, metavar="DIR", help=root_help)
    combine.set_defaults(handler=run_combine)

    split = commands.add_parser(
        "split", help="split a dataset's episodes at random into new datasets",
        description="Shuffle a dataset's episodes and copy disjoint parts of the given sizes into new "
        "datasets. Sizes are episode counts (--sizes 800,200) or percentages of the episodes "
        "(--sizes 80%,20%).",
    )
    split.add_argument("dataset_id", metavar="ID")
    split.add_argument("--sizes", required=True, metavar="SIZES", help="comma-separated episode counts, or percentages with %%")
    split.add_argument("--into", metavar="NEW_ID", nargs="+", required=True, help="one new dataset id per size")
    split.add_argument("--seed", type=int, default=None, help="seed of the shuffle")
    split.add_argument("--overwrite", action="store_true", help="replace those of the new datasets that exist (a failed split leaves none of the new ones)")
    split.add_argument("--root", default=None, metavar="DIR", help=root_help)
    split.set_defaults(handler=run_split)

    export = commands.add_parser(
        "export", help="write a dataset in another format (Minari)",
        description="Write a dataset as a Minari 0.5 dataset (HDF5, Arrow or Parquet) that minari.load_dataset reads.",
    )
    export.add_argument("dataset_id", metavar="ID")
    export.add_argument("--format", choices=["minari"], required=True, help="target format")
    export.add_argument("--minari-id", default=None, help="the Minari dataset id (default: ID)")
    export.add_argument(
        "--data-format", choices=["hdf5", "arrow", "parquet"], default="hdf5",
        help="Minari's storage layout (default: hdf5; arrow and parquet need pyarrow, in vcollect[minari])",
    )
    export.add_argument(
        "--minari-root", default=None, metavar="DIR", help="Minari datasets folder (default: $MINARI_DATASETS_PATH, else ~/.minari/datasets)"
    )
    export.add_argument("--overwrite", action="store_true", help="replace the Minari dataset if it exists")
    export.add_argument("--root", default=None, metavar="DIR", help=root_help)
    export.set_defaults(handler=run_export)

    imp = commands.add_parser(
        "import-minari", help="copy a Minari dataset into a new vcollect dataset",
        description="Copy a Minari HDF5 dataset (a Minari id under --minari-root, or a path) into a new dataset.",
    )
    imp.add_argument("source", metavar="PATH_OR_ID")
    imp.add_argument("--into", metavar="ID", required=True, help="id of the new vcollect dataset")
    imp.add_argument("--minari-root", default=None, metavar="DIR", help="Minari datasets folder for a Minari id")
    imp.add_argument("--overwrite", action="store_true", help="replace the vcollect dataset if it exists")
    imp.add_argument(
        "--trust-env-spec", action="store_true",
        help="when the Minari metadata stores no spaces, take them from the env made from its env spec (which "
        "imports the module it names: any code; without this flag such a dataset is refused)",
    )
    imp.add_argument("--root", default=None, metavar="DIR", help=root_help)
    imp.set_defaults(handler=run_import_minari)

    verify = commands.add_parser(
        "verify", help="check a dataset on disk (like fsck): shards, manifest, episode tables, replays",
        description="Check every shard against the manifest (missing, unrecorded, copied, altered by "
        "SHA-256), the shards' own consistency and episode tables, and with --replay N replay N stored "
        "episodes from their seeds and actions in the dataset's env. One line per problem; exit 0 when "
        "none, 1 otherwise. Note: --replay makes the env named in the dataset's env spec, which may import "
        "any module.",
    )
    verify.add_argument("dataset_id", metavar="ID_OR_PATH", help=PATH_HELP)
    verify.add_argument("--replay", type=int, default=0, metavar="N",
                        help="replay N seeded episodes drawn at random (default 0)")
    verify.add_argument("--root", default=None, metavar="DIR", help=root_help)
    verify.set_defaults(handler=run_verify)

    delete = commands.add_parser(
        "delete", help="delete datasets", description="Delete datasets (asks first unless --yes)."
    )
    delete.add_argument("dataset_ids", metavar="ID", nargs="+")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument("--root", default=None, metavar="DIR", help=root_help)
    delete.set_defaults(handler=run_delete)


def run_list(args: argparse.Namespace, console: Console) -> int:
    """``vcollect list``: a table of the datasets under the root."""
    from vcollect.store import (
        get_namespace_metadata,
        list_datasets,
        list_local_namespaces,
        parse_dataset_id,
        resolve_root,
    )

    datasets = list_datasets(args.root)
    root = resolve_root(args.root)
    namespaces = list_local_namespaces(args.root) if args.by_namespace else []
    if not datasets and not namespaces:
        console.print(Text(f"no datasets under {root}"))
        return EXIT_OK
    notes: list[str] = []
    if not args.by_namespace:
        console.print(datasets_table(f"datasets under {root}", datasets, notes))
    else:
        groups: dict[str | None, dict[str, dict[str, Any]]] = {None: {}, **{ns: {} for ns in namespaces}}
        for dataset_id, info in datasets.items():
            groups.setdefault(parse_dataset_id(dataset_id)[0], {})[dataset_id] = info
        for namespace, members in groups.items():
            if namespace is None and not members:
                continue
            title = "datasets without a namespace"
            if namespace is not None:
                try:
                    description = get_namespace_metadata(namespace, args.root).get("description")
                except DatasetError as exc:  # an unreadable namespace_metadata.json: say so, list the rest
                    description = None
                    notes.append(f"namespace {namespace}: {exc}")
                title = f"namespace {namespace}" + (f": {description}" if description else "")
            if members:
                console.print(datasets_table(title, members, notes))
            else:
                console.print(Text(f"{title} (no datasets)"))
    for note in notes:
        console.print(Text(f"note: {note}"), soft_wrap=True)
    return EXIT_OK


def datasets_table(title: str, datasets: dict[str, dict[str, Any]], notes: list[str]) -> Table:
    """The ``vcollect list`` table of ``datasets`` (list_datasets values); notes about them go to ``notes``."""
    table = Table(title=title)
    for column in ("id", "episodes", "steps", "size", "author", "created"):
        table.add_column(column, justify="right" if column in ("episodes", "steps", "size") else "left")
    for dataset_id, info in datasets.items():
        if info.get("broken"):  # listed, never hidden: "-" counts and a note saying what is wrong
            table.add_row(cell(dataset_id) + Text(" (broken)", style="bold red"), "-", "-",
                          human_size(int(info.get("size_bytes") or 0)), "-", "-")
            notes.append(f"{dataset_id}: broken, cannot be read: {info['broken']}")
            continue
        author = info.get("author")
        damage = info.get("damage") or []
        table.add_row(
            cell(dataset_id) + (Text(" (damaged)", style="bold red") if damage else Text("")),
            f"{info.get('total_episodes', 0):,}",
            f"{info.get('total_steps', 0):,}",
            human_size(int(info.get("size_bytes", 0))),
            cell(", ".join(map(str, author)) if isinstance(author, list) else (author or "-")),
            cell(str(info.get("created_at") or "-")[:19].replace("T", " ")),
        )
        if damage:  # the counts are those of the whole shards, the ones load_dataset(on_damage="skip") reads
            notes.append(f"{dataset_id}: damaged, counts are of its whole shards only ({len(damage)} problem{'s' if len(damage) > 1 else ''}: "
                         f"{damage[0]}{'; ...' if len(damage) > 1 else ''}); `vcollect verify {dataset_id}` lists them")
        if info.get("temporary_files"):
            notes.append(f"{dataset_id}: {len(info['temporary_files'])} half-written .tmp files (from a crash)")
    return table


def run_verify(args: argparse.Namespace, console: Console) -> int:
    """``vcollect verify ID [--replay N]``: one line per problem found; exit 0 when none, 1 otherwise."""
    from vcollect.store.read.reader import StoredDataset
    from vcollect.store.read.replay import replay_episodes

    if args.replay < 0:
        raise UsageError(f"--replay must be a non-negative integer, got {args.replay}")
    with warnings.catch_warnings():  # damage is what verify lists below, not a warning
        warnings.simplefilter("ignore", UserWarning)
        dataset = load_named(args, on_damage="skip")
    problems = dataset.verify()
    replayed = 0
    if args.replay:
        if dataset.env_spec is None:
            raise UsageError(f"--replay: dataset {args.dataset_id!r} stores no env spec, so its env cannot be made")
        replayed, failures = replay_episodes(dataset, args.replay)
        problems += failures
    for problem in problems:
        console.print(Text(problem), soft_wrap=True)
    checked = f"{len(StoredDataset(dataset).shard_paths):,} shards, {dataset.total_episodes:,} episodes"
    if args.replay:
        checked += f", {replayed:,} replayed"
    console.print(Text(f"{args.dataset_id}: {checked}: {len(problems)} problems" if problems
                       else f"{args.dataset_id}: {checked}: no problems"))
    return EXIT_FAILURE if problems else EXIT_OK


def run_show(args: argparse.Namespace, console: Console) -> int:
    """``vcollect show ID``: metadata, spaces, counts, return/length statistics (and --plot)."""
    from vcollect.store.read.reader import StoredDataset

    if args.plot is not None:
        check_output_file("--plot", args.plot)
    dataset = load_named(args)
    if args.plot is not None:
        if dataset.total_episodes == 0:
            raise UsageError(f"dataset {args.dataset_id!r} has no episodes to plot")
        _require_matplotlib()
    table = Table(title=f"dataset {args.dataset_id}", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    shards = StoredDataset(dataset).shard_paths
    size = sum(p.stat().st_size for p in shards)
    rows: list[tuple[str, str]] = [
        ("path", str(dataset.path)),
        ("episodes", f"{dataset.total_episodes:,}"),
        ("steps", f"{dataset.total_steps:,}"),
        ("shards", f"{len(shards):,} ({human_size(size)})"),
        ("observation space", str(dataset.observation_space)),
        ("action space", str(dataset.action_space)),
        ("env spec", dataset.env_spec.id if dataset.env_spec is not None else "-"),
    ]
    for key, value in dataset.metadata.items():
        if key in ("dataset_id",) or value is None:
            continue
        rows.append((key, value if isinstance(value, str) else json.dumps(value)))
    returns = SummaryStats.from_sequence(dataset.episode_returns)
    lengths = SummaryStats.from_sequence(dataset.episode_lengths)
    rows += summary_rows("return", returns) + summary_rows("length", lengths)
    for name, value in rows:
        table.add_row(cell(name), cell(value))
    console.print(table)
    if args.plot is not None:
        try:
            plot_dataset(dataset, args.plot)
        except (OSError, ValueError) as exc:  # a folder we may not write in, a format matplotlib lacks
            raise UsageError(f"--plot: cannot write {args.plot!r}: {exc}") from None
        console.print(Text(f"figure written to {args.plot}"))
    return EXIT_OK


def _require_matplotlib() -> None:
    """UsageError naming the extra to install when --plot cannot import matplotlib."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed: pip install 'vcollect[plot]' (or matplotlib)"
        ) from None


def plot_dataset(dataset: Any, path: str | os.PathLike[str]) -> Any:
    """Write a figure of ``dataset``: return histogram, length histogram, return per episode; returns it."""
    from matplotlib.figure import Figure

    returns = np.asarray(dataset.episode_returns, dtype=np.float64)
    lengths = np.asarray(dataset.episode_lengths)
    bins = int(min(50, max(1, len(returns))))
    figure = Figure(figsize=(13, 3.8), layout="constrained")
    ax_return, ax_length, ax_episode = figure.subplots(1, 3)
    ax_return.hist(returns, bins=bins, color="tab:blue")
    ax_return.set(title="return histogram", xlabel="return", ylabel="episodes")
    ax_length.hist(lengths, bins=bins, color="tab:orange")
    ax_length.set(title="length histogram", xlabel="steps", ylabel="episodes")
    ax_episode.plot(np.arange(len(returns)), returns, color="tab:blue", linewidth=0.8)
    ax_episode.set(title="return per episode", xlabel="episode", ylabel="return")
    figure.suptitle(f"{dataset.id}: {len(returns):,} episodes, {int(lengths.sum()):,} steps")
    figure.savefig(path, dpi=100)
    return figure


def run_delete(args: argparse.Namespace, console: Console) -> int:
    """``vcollect delete ID...``: remove datasets (asks first unless --yes)."""
    from vcollect.store import delete_dataset, load_dataset

    for dataset_id in args.dataset_ids:  # unknown or linked ids fail before anything is deleted
        load_dataset(dataset_id, root=args.root)
        check_replaceable(dataset_id, args.root, doing="delete")
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("refusing to delete without confirmation: pass --yes")
        answer = input(f"delete {', '.join(args.dataset_ids)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            console.print("nothing deleted")
            return EXIT_FAILURE
    for dataset_id in args.dataset_ids:
        delete_dataset(dataset_id, root=args.root)
        console.print(Text(f"deleted {dataset_id}"))
    return EXIT_OK


def check_replaceable(dataset_id: str, root: str | None, *, doing: str = "replace") -> None:
    """UsageError when deleting the dataset (to delete or replace it) would go through a symbolic link.

    Such a dataset's files live outside the datasets root; the command leaves them alone.
    """
    from vcollect.store.layout.catalog import symlinked_folder

    link = symlinked_folder(dataset_id, root)
    if link is not None:
        raise UsageError(
            f"refusing to {doing} dataset {dataset_id!r}: {str(link)!r} is a symbolic link, and deleting through "
            "it would delete files outside the datasets root (remove the link or its target yourself)"
        )


def _check_new(dataset_ids: Sequence[str], root: str | None, *, overwrite: bool | None = None) -> None:
    """UsageError unless every id is well formed, distinct and not taken yet, or may be replaced: ``overwrite``
    is the command's --overwrite (None for a command without one)."""
    from vcollect.store import dataset_path, parse_dataset_id
    from vcollect.store.write.writer import DATASET_FILE

    if len(set(dataset_ids)) != len(dataset_ids):
        raise UsageError(f"the new dataset ids must be distinct, got {list(dataset_ids)}")
    for dataset_id in dataset_ids:
        parse_dataset_id(dataset_id)
        if not (dataset_path(dataset_id, root) / DATASET_FILE).is_file():
            continue
        if not overwrite:
            hint = "delete it first or pick another id" if overwrite is None else "pass --overwrite to replace it"
            raise UsageError(f"dataset {dataset_id!r} already exists; {hint}")
        check_replaceable(dataset_id, root)


def run_combine(args: argparse.Namespace, console: Console) -> int:
    """``vcollect combine ID... --into NEW_ID``: copy the episodes of several datasets into a new one."""
    from vcollect.store import combine_datasets, load_dataset

    sources = [load_dataset(dataset_id, args.root) for dataset_id in args.dataset_ids]
    _check_new([args.into], args.root)
    combined = combine_datasets(sources, args.into, args.root)
    console.print(
        Text(
            f"combined {len(sources)} datasets into {args.into}: {combined.total_episodes:,} episodes, "
            f"{combined.total_steps:,} steps"
        )
    )
    return EXIT_OK


def parse_sizes(text: str, total: int) -> list[int]:
    """``--sizes`` -> episode counts: '800,200' as counts, '80%,20%' as shares of ``total`` episodes.

    Percentages are rounded by largest remainder, so '50%,50%' of 7 episodes gives 4 and 3.
    """
    from vcollect.store.transforms import largest_remainder_counts

    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise UsageError(f"--sizes must list episode counts or percentages, got {text!r}")
    percent = [part.endswith("%") for part in parts]
    if any(percent) and not all(percent):
        raise UsageError(f"--sizes mixes counts and percentages: {text!r}")
    try:
        values = [float(part.rstrip("%")) if all(percent) else int(part) for part in parts]
    except ValueError:
        raise UsageError(f"--sizes must list whole episode counts or percentages like 80%, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"--sizes must list finite numbers, got {text!r}")
    if any(v < 0 for v in values):
        raise UsageError(f"--sizes must not be negative, got {text!r}")
    if not all(percent):
        counts = [int(v) for v in values]
    else:
        if sum(values) > 100 + 1e-9:
            raise UsageError(f"--sizes percentages add up to {sum(values):g}%, more than 100%")
        counts = largest_remainder_counts([v / 100.0 for v in values], total)
    if sum(counts) > total:
        raise UsageError(f"--sizes {text} add up to {sum(counts)} episodes, more than the {total} the dataset has")
    return counts


def run_split(args: argparse.Namespace, console: Console) -> int:
    """``vcollect split ID --sizes 80,20 --into A B``: shuffle and copy disjoint parts into new datasets."""
    from vcollect.store import load_dataset, resolve_root, split_dataset
    from vcollect.store.layout.staging import discard_staging
    from vcollect.store.transforms import Staged, publish_staged, stage_combined

    check_seed("--seed", args.seed)
    source = load_dataset(args.dataset_id, args.root)
    sizes = parse_sizes(args.sizes, source.total_episodes)
    if len(sizes) != len(args.into):
        raise UsageError(f"--sizes has {len(sizes)} parts but --into names {len(args.into)} datasets")
    if source.id in args.into:
        raise UsageError(f"--into names the dataset being split, {source.id!r}; pick other ids")
    _check_new(args.into, args.root, overwrite=args.overwrite)
    views = split_dataset(source, sizes, seed=args.seed)
    inherited = {k: v for k, v in source.metadata.items() if k not in ("dataset_id", "created_at", "format_version")}
    split_meta = {**inherited, "split_from": source.id, "split_sizes": sizes, "split_seed": args.seed}
    staged: list[Staged] = []
    try:  # every part built aside, then all published or none (one journal: store/layout/publish_journal.py)
        for new_id, view in zip(args.into, views):
            staged.append(stage_combined([view], new_id, args.root, metadata=split_meta, overwrite=args.overwrite))
    except BaseException:
        for part in staged:
            discard_staging(part.staging, resolve_root(args.root))
        raise
    publish_staged(staged, args.root, overwrite=args.overwrite)
    for new_id in args.into:
        published = load_dataset(new_id, args.root)
        console.print(Text(f"{new_id}: {published.total_episodes:,} episodes, {published.total_steps:,} steps"))
    return EXIT_OK


def run_export(args: argparse.Namespace, console: Console) -> int:
    """``vcollect export ID --format minari``: write the dataset in Minari's format."""
    from vcollect.minari import export_minari
    from vcollect.store import load_dataset

    if args.minari_root is not None:
        check_folder("--minari-root", args.minari_root)
    dataset = load_dataset(args.dataset_id, args.root)
    minari_id = args.minari_id or args.dataset_id
    path = export_minari(dataset, minari_id, args.minari_root, overwrite=args.overwrite, data_format=args.data_format)
    console.print(
        Text(f"exported {dataset.total_episodes:,} episodes of {args.dataset_id} as Minari dataset {minari_id} at {path}")
    )
    return EXIT_OK


def run_import_minari(args: argparse.Namespace, console: Console) -> int:
    """``vcollect import-minari PATH_OR_ID --into ID``: copy a Minari dataset into a new vcollect dataset."""
    from vcollect.minari import import_minari
    from vcollect.store import parse_dataset_id

    parse_dataset_id(args.into)
    _check_new([args.into], args.root, overwrite=args.overwrite)
    dataset = import_minari(args.source, args.into, args.root, overwrite=args.overwrite, minari_root=args.minari_root,
                            trust_env_spec=args.trust_env_spec)
    console.print(
        Text(f"imported {dataset.total_episodes:,} episodes ({dataset.total_steps:,} steps) into {args.into} at {dataset.path}")
    )
    return EXIT_OK

