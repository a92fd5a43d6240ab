"""``vcollect render``: stored episodes to an MP4, WebM or GIF file (the ``render`` extra)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rich.console import Console
from rich.text import Text

from vcollect.cli.checks import check_count, check_output_file
from vcollect.cli.exits import EXIT_OK, CommandParser, UsageError
from vcollect.errors import (
    EncoderUnavailableError,
    EnvSpecNotStoredError,
    EnvUnavailableError,
    EpisodeIndexError,
    EpisodeNotSeededError,
    NoImageObservationsError,
)

__all__ = ["add_render_parser", "parse_episodes", "parse_size", "run_render"]


def add_render_parser(commands: argparse._SubParsersAction[CommandParser], *, root_help: str) -> None:
    """Add ``render`` to ``commands``."""
    from vcollect.cli.datasets import PATH_HELP

    render = commands.add_parser(
        "render", help="render stored episodes to a video (MP4, WebM or GIF)",
        description="Render episodes to one video file: from the stored image observations (Atari frames, "
        "frame stacks), or by replaying each episode from its seed and actions in the dataset's env "
        "(render_mode='rgb_array'), checked against the stored observations as it goes. Each frame is "
        "labelled with the episode id, the step and the return so far. Needs the render extra "
        "(pip install 'vcollect[render]'). Note: --source replay makes the env named in the dataset's env "
        "spec, which may import any module: render datasets you trust.",
    )
    render.add_argument("dataset_id", metavar="ID_OR_PATH", help=PATH_HELP)
    which = render.add_mutually_exclusive_group()
    which.add_argument("--episodes", default=None, metavar="I,J,...",
                       help="episode indices, comma-separated (default: 0)")
    which.add_argument("--worst", type=int, default=None, metavar="N", help="the N episodes of lowest return")
    which.add_argument("--best", type=int, default=None, metavar="N", help="the N episodes of highest return")
    render.add_argument("--out", default=None, metavar="FILE",
                        help="the video file, .mp4, .webm or .gif (default: the dataset's name, .mp4)")
    render.add_argument("--fps", type=float, default=30.0, help="frames per second (default 30)")
    render.add_argument("--size", default=None, metavar="WxH",
                        help="scale each episode's frames to W by H pixels (default: as stored or rendered; "
                        "a GIF at most 160 wide)")
    render.add_argument("--source", choices=("auto", "frames", "replay"), default="auto",
                        help="stored image observations, or a replay (default auto: frames when the "
                        "observations are images)")
    render.add_argument("--layout", choices=("sequence", "grid"), default="sequence",
                        help="episodes one after another, or side by side (default sequence)")
    render.add_argument("--no-labels", action="store_true", help="leave out the episode/step/return labels")
    render.add_argument("--root", default=None, metavar="DIR", help=root_help)
    render.set_defaults(handler=run_render)


def parse_episodes(text: str) -> list[int]:
    """``"0,5,9"`` as [0, 5, 9]; UsageError naming --episodes for anything else."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(re.fullmatch(r"\d+", p) for p in parts):
        raise UsageError(f"--episodes takes episode indices separated by commas (0,5,9), got {text!r}")
    return [int(p) for p in parts]


def parse_size(text: str) -> tuple[int, int]:
    """``"320x240"`` as (320, 240); UsageError naming --size for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if match is None or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise UsageError(f"--size takes WIDTHxHEIGHT in pixels (320x240), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def run_render(args: argparse.Namespace, console: Console) -> int:
    """``vcollect render ID``: write the chosen episodes to one video file; bad input exits 2."""
    from vcollect.cli.datasets import load_named
    from vcollect.render.episodes import pick_episodes, render_video
    from vcollect.render.video import require_encoder, video_format

    episodes = None if args.episodes is None else parse_episodes(args.episodes)
    worst = None if args.worst is None else check_count("--worst", args.worst)
    best = None if args.best is None else check_count("--best", args.best)
    size = None if args.size is None else parse_size(args.size)
    if not args.fps > 0:
        raise UsageError(f"--fps must be > 0, got {args.fps}")
    dataset = load_named(args)
    out = Path(args.out) if args.out is not None else Path(f"{dataset.id.rsplit('/', 1)[-1]}.mp4")
    check_output_file("--out", out)
    try:
        video_format(out)
    except ValueError as exc:
        raise UsageError(f"--out: {exc}") from None
    try:
        require_encoder()
        chosen = pick_episodes(dataset, episodes, worst=worst, best=best)
        video = render_video(dataset, chosen, out, fps=args.fps, size=size, source=args.source,
                             layout=args.layout, annotate=not args.no_labels)
    except (EncoderUnavailableError, EnvUnavailableError, EpisodeIndexError, EpisodeNotSeededError,
            EnvSpecNotStoredError, NoImageObservationsError) as exc:
        raise UsageError(_with_flag(str(exc))) from None
    console.print(Text(f"{video.path}: {len(video.episodes)} episode{'s' if len(video.episodes) != 1 else ''} "
                       f"({', '.join(map(str, video.episodes))}), {video.frames:,} frames of "
                       f"{video.width}x{video.height} at {video.fps:g} fps"))
    return EXIT_OK


def _with_flag(message: str) -> str:
    """A library message as the command says it: its Python parameter spelled as the command's flag."""
    return message.replace("(source='replay')", "(--source replay)").replace(
        "source='replay'", "--source replay")
