"""``vcollect view``: the datasets under a root as pages in the browser, served locally or written as files."""

from __future__ import annotations

import argparse
import errno
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from vcollect.cli.checks import check_folder
from vcollect.cli.exits import EXIT_OK, CommandParser, UsageError

if TYPE_CHECKING:
    from vcollect.view.routes import ViewApp

__all__ = ["DEFAULT_PORT", "add_view_parser", "run_view"]

#: The port ``vcollect view`` listens on unless told otherwise.
DEFAULT_PORT = 8765


def add_view_parser(commands: argparse._SubParsersAction[CommandParser], *, root_help: str) -> None:
    """Add the ``view`` command to ``commands``."""
    view = commands.add_parser(
        "view", help="the datasets as pages in the browser (local server, or static files)",
        description="Serve a local, read-only page listing every dataset under the root, with a card per "
        "dataset (spaces, env spec, metadata, totals, verify on request, return and length histograms, a "
        "sortable and filterable episode table, an episode's video and reward curve rendered on demand). "
        "--static OUT_DIR writes the same pages as files instead. The pages need no internet. Videos "
        "come from stored image observations, or from a replay in the env named in the dataset's env spec, "
        "which may import any module: view datasets you trust.",
    )
    view.add_argument("dataset_id", metavar="ID", nargs="?", default=None,
                      help="a dataset to open (its page's address is printed); default: the listing")
    view.add_argument("--root", default=None, metavar="DIR", help=root_help)
    view.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    view.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="P",
                      help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    view.add_argument("--fps", type=float, default=30.0, metavar="F", help="frames per second of the videos (default 30)")
    view.add_argument("--static", default=None, metavar="OUT_DIR",
                      help="write the pages into this folder instead of serving them")
    view.add_argument("--videos", type=int, default=None, metavar="N",
                      help="with --static: the first N episodes of each dataset get a video (default 3)")
    view.add_argument("--verify", action="store_true",
                      help="with --static: run verify on each dataset and show its report (reads every shard)")
    view.set_defaults(handler=run_view)


def run_view(args: argparse.Namespace, console: Console) -> int:
    """``vcollect view [ID]``: serve the pages until Ctrl-C, or write them with ``--static``."""
    from vcollect.store import parse_dataset_id, resolve_root
    from vcollect.view.routes import MAX_FPS, ViewApp

    if not (math.isfinite(args.fps) and 0 < args.fps <= MAX_FPS):
        raise UsageError(f"--fps must be a number in (0, {MAX_FPS:g}], got {args.fps:g}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    if args.videos is not None and args.videos < 0:
        raise UsageError(f"--videos must be a non-negative integer, got {args.videos}")
    if args.static is None and (args.verify or args.videos is not None):
        raise UsageError("--videos and --verify go with --static; the served page renders videos and verifies on request")
    root = resolve_root(args.root)
    app = ViewApp(root, fps=args.fps)
    if args.dataset_id is not None:
        parse_dataset_id(args.dataset_id)
        app.loaded(args.dataset_id)  # an unknown dataset fails here, before anything is served or written
    if args.static is not None:
        return _write(app, check_folder("--static", args.static), args, console)
    return _serve(app, args, console)


def _write(app: ViewApp, out_dir: Path, args: argparse.Namespace, console: Console) -> int:
    from vcollect.view.static_site import write_static

    ids = None if args.dataset_id is None else [args.dataset_id]
    site = write_static(app, out_dir, dataset_ids=ids, videos=3 if args.videos is None else args.videos,
                        verify=args.verify)
    for note in site.notes:
        console.print(Text(f"note: {note}"), soft_wrap=True)
    console.print(Text(f"wrote {len(site.pages) - 1} dataset pages and {len(site.videos)} videos; open "
                       f"{out_dir / 'index.html'}"), soft_wrap=True)
    return EXIT_OK


def _serve(app: ViewApp, args: argparse.Namespace, console: Console) -> int:
    from urllib.parse import quote

    from vcollect.view.server import make_server

    try:
        server = make_server(app, args.host, args.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {args.port}: {args.host}:{args.port} is already in use; pick another port "
                             "(--port 0 picks a free one)") from None
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host, port = str(server.server_address[0]), int(server.server_address[1])
    base = f"http://{host if ':' not in host else f'[{host}]'}:{port}/"
    page = base if args.dataset_id is None else f"{base}d/{quote(args.dataset_id, safe='/')}/"
    console.print(Text(f"serving the datasets under {app.root} at {page} (read-only; Ctrl-C to stop)"), soft_wrap=True)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print(Text("stopped"))
    finally:
        server.server_close()
    return EXIT_OK
