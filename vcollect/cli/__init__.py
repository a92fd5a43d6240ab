"""The ``vcollect`` command: collect experience into datasets, inspect, transform, export and benchmark.

Commands: collect, list, show, combine, split, export, import-minari, delete, bench, download, upload, render,
view (``--help`` on each; ``list remote`` lists a remote's datasets).
Bad input (unknown env id or dataset, malformed dataset id, a policy or env module that does not import,
envs that cannot be made with the given --env-kwargs, bad options or paths, deleting or replacing a dataset
through a symbolic link) prints one line on stderr naming the option and exits with status 2; a failure
while running (an env that raised) exits 1; Ctrl-C during ``collect`` keeps every finished episode and
exits 130. Errors of the library that name its Python parameters are said with the command's flags.

This module assembles the parser and runs the command; each command group lives in its own module
(collect, datasets, bench, render), with what they share in sources (env and policy resolution), interrupts
(Ctrl-C), output (tables) and exits (exit statuses). Their public names are re-exported here.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from vcollect.cli.bench import add_bench_parser, collector_speed, raw_loop_speed, run_bench
from vcollect.cli.checks import check_folder
from vcollect.cli.collect import add_collect_parser, run_collect, run_collect_distributed
from vcollect.cli.datasets import (
    add_dataset_parsers,
    parse_sizes,
    plot_dataset,
    run_combine,
    run_delete,
    run_export,
    run_import_minari,
    run_list,
    run_show,
    run_split,
)
from vcollect.cli.exits import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandParser,
    UsageError,
    flag_wording,
)
from vcollect.cli.interrupts import GuardedSink, InterruptGuard
from vcollect.cli.output import human_size, make_console, print_error, stats_table
from vcollect.cli.remote import add_remote_parsers, run_download, run_upload
from vcollect.cli.render import add_render_parser, run_render
from vcollect.cli.sources import (
    VectorSource,
    available_backends,
    load_policy_factory,
    make_envs,
    resolve_env,
    vector_source,
)
from vcollect.cli.view import add_view_parser, run_view
from vcollect.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteError,
    SpaceMismatchError,
    VCollectError,
)

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandParser",
    "GuardedSink",
    "InterruptGuard",
    "UsageError",
    "VectorSource",
    "build_parser",
    "collector_speed",
    "human_size",
    "load_policy_factory",
    "main",
    "make_envs",
    "parse_sizes",
    "plot_dataset",
    "raw_loop_speed",
    "resolve_env",
    "run_bench",
    "run_collect",
    "run_collect_distributed",
    "run_combine",
    "run_delete",
    "run_download",
    "run_export",
    "run_import_minari",
    "run_list",
    "run_show",
    "run_render",
    "run_split",
    "run_upload",
    "run_view",
    "stats_table",
    "vector_source",
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every ``vcollect`` command."""
    from vcollect import __version__

    parser = CommandParser(
        prog="vcollect",
        description="Collect RL experience from many environments at once into crash-safe datasets.",
        epilog="Datasets live under --root, else $VCOLLECT_DATASETS_PATH, else ~/.vcollect/datasets.",
    )
    parser.add_argument("--version", action="version", version=f"vcollect {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    root_help = "datasets folder (default: $VCOLLECT_DATASETS_PATH, else ~/.vcollect/datasets)"
    backends = available_backends()
    add_collect_parser(commands, backends=backends, root_help=root_help)
    add_dataset_parsers(commands, root_help=root_help)
    add_remote_parsers(commands, root_help=root_help)
    add_bench_parser(commands, backends=backends)
    add_render_parser(commands, root_help=root_help)
    add_view_parser(commands, root_help=root_help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and ``python -m vcollect``; returns the exit status.

    Never raises SystemExit (argparse's ``--help``, ``--version`` and parse errors become the returned
    status), so it can be called in-process like any function.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return EXIT_OK if exc.code is None else exc.code if isinstance(exc.code, int) else EXIT_USAGE
    console = make_console()
    prog = f"vcollect {args.command}"
    try:
        _check_root(args)
        return int(args.handler(args, console))
    except (UsageError, DatasetNotFoundError, DatasetExistsError, InvalidDatasetIdError, SpaceMismatchError,
            RemoteError) as exc:
        print_error(prog, flag_wording(str(exc), args))
        return EXIT_USAGE
    except VCollectError as exc:
        print_error(prog, flag_wording(str(exc), args), one_line=False)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print_error(prog, "interrupted")
        return EXIT_INTERRUPTED


def _check_root(args: argparse.Namespace) -> None:
    """UsageError when the datasets root a command uses (--root, else $VCOLLECT_DATASETS_PATH) is not a folder."""
    from vcollect.store.layout.naming import DATASETS_PATH_ENV, resolve_root

    if not hasattr(args, "root"):
        return
    if args.root is not None:
        check_folder("--root", args.root)
    elif os.environ.get(DATASETS_PATH_ENV):
        check_folder(f"${DATASETS_PATH_ENV}", resolve_root())
