"""Several stored episodes in one video file: which episodes (given, worst, best), laid out one after
another or side by side in a grid, each frame labelled with its episode id, step and return so far.

Frames come from ``Dataset.render_episode`` (stored images or a replay, one env made for all the
replays); the file is written by :class:`vcollect.render.video.VideoWriter` as the frames come (a grid
holds its episodes' frames in memory; a sequence one episode at a time).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from vcollect.errors import EpisodeIndexError
from vcollect.render.video import VideoWriter, require_encoder, video_format
from vcollect.store.read.episode_frames import FrameSource, image_layout, resize_frames
from vcollect.store.read.reader import Dataset, StoredDataset

__all__ = ["GIF_WIDTH", "Layout", "RenderedVideo", "pick_episodes", "render_video"]

Layout = Literal["sequence", "grid"]

#: A GIF written without a size is scaled down to at most this width (each frame, before tiling).
GIF_WIDTH = 160


@dataclass(frozen=True)
class RenderedVideo:
    """What :func:`render_video` wrote.

    Attributes:
        path: The file.
        episodes: The positions of the episodes in it, in order.
        frames: Frames written.
        width: Frame width in pixels.
        height: Frame height in pixels.
        fps: Frames per second of playback.
    """

    path: Path
    episodes: tuple[int, ...]
    frames: int
    width: int
    height: int
    fps: float


def pick_episodes(dataset: Dataset, episodes: Sequence[int] | None = None, *, worst: int | None = None,
                  best: int | None = None) -> list[int]:
    """The positions of the episodes to render: those given, the ``worst`` n by return (lowest first) or the
    ``best`` n (highest first); episode 0 when none is asked for.

    Args:
        dataset: The dataset (or view).
        episodes: Positions in ``dataset``.
        worst: How many of the lowest returns.
        best: How many of the highest returns.

    Returns:
        Positions in ``dataset``.

    Raises:
        ValueError: More than one of the three given, or a count < 1.
        EpisodeIndexError: A position outside the dataset, or a dataset without episodes.
    """
    given = [name for name, value in (("episodes", episodes), ("worst", worst), ("best", best)) if value is not None]
    if len(given) > 1:
        raise ValueError(f"pass one of episodes, worst or best, not {' and '.join(given)}")
    total = dataset.total_episodes
    if total == 0:
        raise EpisodeIndexError(f"dataset {dataset.id!r} holds no episodes to render")
    if worst is not None or best is not None:
        n = int(worst if worst is not None else best)  # type: ignore[arg-type]
        if n < 1:
            raise ValueError(f"{'worst' if worst is not None else 'best'} must be >= 1, got {n}")
        order = np.argsort(dataset.episode_returns, kind="stable")
        chosen = order[:n] if worst is not None else order[::-1][:n]
        return [int(i) for i in chosen]
    chosen_list = [0] if episodes is None else [int(i) for i in episodes]
    bad = [i for i in chosen_list if not 0 <= i < total]
    if bad:
        raise EpisodeIndexError(f"dataset {dataset.id!r} has no episode {bad[0]}: it holds {total} "
                                f"(0 to {total - 1})")
    return chosen_list


def render_video(
    dataset: Dataset,
    episodes: Sequence[int],
    path: str | Path,
    *,
    fps: float = 30.0,
    size: tuple[int, int] | None = None,
    source: FrameSource = "auto",
    layout: Layout = "sequence",
    annotate: bool = True,
) -> RenderedVideo:
    """Write the episodes at ``episodes`` (positions in ``dataset``) to one video file.

    Args:
        dataset: The dataset (or view).
        episodes: Positions of the episodes, in the order shown.
        path: The file: .mp4, .webm or .gif.
        fps: Frames per second of playback.
        size: Each episode's frames scaled to (width, height); None keeps them (a GIF: at most
            :data:`GIF_WIDTH` wide).
        source: Where frames come from (``Dataset.render_episode``'s ``source``).
        layout: "sequence": one episode after another; "grid": side by side, rows of ceil(sqrt(n)), each
            holding its last frame once it ended.
        annotate: Write the episode id, step and return so far below each episode's frames.

    Returns:
        What was written.

    Raises:
        ValueError: An unknown suffix or layout, no episodes, or fps not > 0.
        EncoderUnavailableError: imageio-ffmpeg is not installed.
        Any error of ``Dataset.render_episode`` (an episode without seed, an env that cannot be made, a
        replay that diverges): no file is left.
    """
    kind = video_format(path)
    if layout not in ("sequence", "grid"):
        raise ValueError(f"layout must be 'sequence' or 'grid', got {layout!r}")
    if not episodes:
        raise ValueError("no episodes to render")
    require_encoder()
    images = image_layout(dataset.observation_space, StoredDataset(dataset).frame_stack) is not None
    env = dataset.render_env() if source == "replay" or (source == "auto" and not images) else None
    try:
        scale = size
        if scale is None and kind == ".gif":  # the first episode's frames tell how far to scale down
            first = dataset.render_episode(episodes[0], source=source, env=env)
            factor = math.ceil(first.shape[2] / GIF_WIDTH)
            scale = (first.shape[2] // factor, first.shape[1] // factor) if factor > 1 else None
        def frames_of(i: int) -> np.ndarray:
            return dataset.render_episode(i, source=source, size=scale, annotate=annotate, env=env)

        with VideoWriter(path, fps) as writer:
            if layout == "sequence":
                shape: tuple[int, ...] = ()
                for i in episodes:
                    frames = frames_of(i)
                    if shape and frames.shape[1:] != shape:
                        frames = resize_frames(frames, (shape[1], shape[0]))
                    shape = frames.shape[1:]
                    writer.append(frames)
            else:
                _write_grid(writer, [frames_of(i) for i in episodes])
    except BaseException:
        Path(path).unlink(missing_ok=True)  # an incomplete file is not left as if it were a video
        raise
    finally:
        if env is not None:
            env.close()
    height, width = writer.size or (0, 0)
    return RenderedVideo(Path(path), tuple(int(i) for i in episodes), writer.frames, width, height, float(fps))


def _write_grid(writer: VideoWriter, clips: list[np.ndarray]) -> None:
    """Tile ``clips`` (each (T_i, H, W, 3), scaled to the first's size) in rows of ceil(sqrt(n)), frame by frame;
    a clip that ended holds its last frame; a 2-pixel dark gap between tiles."""
    h, w = clips[0].shape[1:3]
    clips = [c if c.shape[1:3] == (h, w) else resize_frames(c, (w, h)) for c in clips]
    cols = math.ceil(math.sqrt(len(clips)))
    rows = math.ceil(len(clips) / cols)
    gap = 2
    canvas = np.full((rows * (h + gap) - gap, cols * (w + gap) - gap, 3), 16, dtype=np.uint8)
    places = [((k // cols) * (h + gap), (k % cols) * (w + gap)) for k in range(len(clips))]
    length = max(c.shape[0] for c in clips)
    for t in range(length):
        for clip, (y, x) in zip(clips, places):
            canvas[y : y + h, x : x + w] = clip[min(t, clip.shape[0] - 1)]
        writer.append(canvas)

