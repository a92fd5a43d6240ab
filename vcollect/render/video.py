"""Video files from frames: MP4 (H.264), WebM (VP9) and GIF, encoded by the ffmpeg that imageio-ffmpeg ships
(the ``render`` extra), frames streamed to it as they come.

Frames are (H, W, 3) uint8 and all of one size per file; odd sides of an MP4 or WebM are padded by one black
row or column (H.264 and VP9 in 4:2:0 need even sides). GIFs get one palette for the whole file (ffmpeg's palettegen),
which keeps them small: pass a small size and a low fps for a GIF meant for a README. Small frames can be scaled
up by a whole factor as they are written (``min_side``), so an 84x84 Atari frame plays at 168x168 with its pixels
sharp. ``encode_video`` gives a whole file's bytes (the dataset page serves them).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from vcollect.errors import EncoderUnavailableError

__all__ = ["FORMATS", "MEDIA_TYPES", "VideoWriter", "encode_video", "require_encoder", "upscale_frames", "video_format"]

#: The video formats written, by file suffix: (codec, output pixel format, extra ffmpeg output options).
FORMATS: dict[str, tuple[str, str, list[str]]] = {
    ".mp4": ("libx264", "yuv420p", ["-preset", "veryfast", "-crf", "23", "-movflags", "+faststart"]),
    ".webm": ("libvpx-vp9", "yuv420p", ["-deadline", "realtime", "-cpu-used", "8", "-b:v", "0", "-crf", "34"]),
    ".gif": ("gif", "pal8", ["-vf", "split[a][b];[a]palettegen=max_colors=64:stats_mode=diff[p];"
                                    "[b][p]paletteuse=dither=bayer:bayer_scale=3", "-loop", "0"]),
}

#: The media type of each format, as an HTTP response names it.
MEDIA_TYPES: dict[str, str] = {".mp4": "video/mp4", ".webm": "video/webm", ".gif": "image/gif"}


def require_encoder() -> Any:
    """The ``imageio_ffmpeg`` module, or EncoderUnavailableError naming the extra that installs it."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise EncoderUnavailableError(
            "writing video needs imageio-ffmpeg, which is not installed: pip install 'vcollect[render]'"
        ) from None
    return imageio_ffmpeg


def video_format(path: str | Path) -> str:
    """The format of ``path`` by its suffix (".mp4", ".webm" or ".gif"); ValueError for any other."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"cannot write {str(path)!r}: name a file ending in {', '.join(sorted(FORMATS))}")
    return suffix


def _upscale_factor(height: int, width: int, min_side: int) -> int:
    """The least whole factor that makes the shorter of ``height`` and ``width`` at least ``min_side`` (1 when it
    already is, or when ``min_side`` is 0)."""
    side = min(height, width)
    return max(1, -(-min_side // side)) if side > 0 else 1


def upscale_frames(frames: np.ndarray, min_side: int) -> np.ndarray:
    """(N, H, W, 3) frames scaled up by the least whole factor that makes their shorter side at least
    ``min_side``, each pixel repeated (sharp, no blending); the same array when it already is.

    Args:
        frames: The frames.
        min_side: The least shorter side wanted (0: none).

    Returns:
        The frames, (N, H * k, W * k, 3) for the factor k.
    """
    factor = _upscale_factor(frames.shape[1], frames.shape[2], min_side)
    if factor == 1:
        return frames
    return np.repeat(np.repeat(frames, factor, axis=1), factor, axis=2)


class VideoWriter:
    """Frames to one video file, written as they are appended; a context manager (closing finishes the file).

    Args:
        path: The file to write (its suffix picks the format: .mp4, .webm or .gif).
        fps: Frames per second of playback.
        min_side: Frames whose shorter side is below this are scaled up by the least whole factor that reaches
            it (each pixel repeated); 0 writes them as given.

    Raises:
        ValueError: An unknown suffix, fps not > 0, or a negative min_side.
        EncoderUnavailableError: imageio-ffmpeg is not installed.
    """

    def __init__(self, path: str | Path, fps: float = 30.0, *, min_side: int = 0) -> None:
        self.path = Path(path)
        self.format = video_format(self.path)
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps!r}")
        if min_side < 0:
            raise ValueError(f"min_side must be >= 0, got {min_side!r}")
        self.fps = float(fps)
        self.min_side = int(min_side)
        self._ffmpeg = require_encoder()
        self._gen: Any = None
        self._size: tuple[int, int] | None = None  # (height, width) of the frames given
        self._factor = 1  # each given pixel written as factor x factor
        self.frames = 0
        """Frames written so far."""

    def append(self, frames: np.ndarray) -> None:
        """Write frames: one (H, W, 3) uint8 frame or a batch of them (N, H, W, 3), all of the file's size.

        Raises:
            ValueError: Frames of another shape or dtype than the first ones.
        """
        batch = np.asarray(frames)
        if batch.ndim == 3:
            batch = batch[None]
        if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[3] != 3:
            raise ValueError(f"frames must be (H, W, 3) uint8, got shape {batch.shape[1:]} {batch.dtype}")
        if self._size is None:
            self._open(batch.shape[1], batch.shape[2])
        if batch.shape[1:3] != self._size:
            raise ValueError(f"every frame of {str(self.path)!r} must be {self._size}, got {batch.shape[1:3]}")
        batch = upscale_frames(batch, self.min_side)
        h, w = self._size[0] * self._factor, self._size[1] * self._factor
        if self.format != ".gif" and (h % 2 or w % 2):
            padded = np.zeros((batch.shape[0], h + h % 2, w + w % 2, 3), dtype=np.uint8)
            padded[:, :h, :w] = batch
            batch = padded
        self._gen.send(np.ascontiguousarray(batch).tobytes())
        self.frames += batch.shape[0]

    def _open(self, height: int, width: int) -> None:
        self._size = (height, width)
        self._factor = _upscale_factor(height, width, self.min_side)
        height, width = height * self._factor, width * self._factor
        codec, pix_fmt, params = FORMATS[self.format]
        even = self.format != ".gif"
        size = (width + width % 2, height + height % 2) if even else (width, height)
        self._gen = self._ffmpeg.write_frames(
            str(self.path), size, fps=self.fps, codec=codec, pix_fmt_out=pix_fmt, quality=None,
            macro_block_size=1, output_params=list(params), ffmpeg_log_level="error",
        )
        self._gen.send(None)

    @property
    def size(self) -> tuple[int, int] | None:
        """(height, width) of the file's frames (scaled up to ``min_side``, an MP4's or WebM's padded to even
        sides); None before the first."""
        if self._size is None:
            return None
        h, w = self._size[0] * self._factor, self._size[1] * self._factor
        return (h + h % 2, w + w % 2) if self.format != ".gif" else (h, w)

    def close(self) -> None:
        """Finish the file (waits for the encoder)."""
        if self._gen is not None:
            gen, self._gen = self._gen, None
            gen.close()

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def encode_video(frames: np.ndarray, suffix: str = ".webm", fps: float = 30.0, *, min_side: int = 0) -> bytes:
    """A whole video file's bytes: ``frames`` written by a :class:`VideoWriter` to a temporary file (MP4's
    index and WebM's duration are written at the end, which a pipe cannot take back).

    Args:
        frames: (N, H, W, 3) uint8 frames, N >= 1.
        suffix: The format: ".mp4", ".webm" or ".gif".
        fps: Frames per second: the video lasts N / fps seconds.
        min_side: Scale small frames up to it (as :class:`VideoWriter`).

    Returns:
        The file's bytes.

    Raises:
        ValueError: No frames, frames not (N, H, W, 3) uint8, an unknown suffix, or fps not > 0.
        EncoderUnavailableError: imageio-ffmpeg is not installed.
    """
    kind = video_format(f"video{suffix}")
    batch = np.asarray(frames)
    if batch.ndim != 4 or batch.shape[0] < 1:
        raise ValueError(f"frames must be (N, H, W, 3) uint8 with N >= 1, got shape {batch.shape}")
    with tempfile.TemporaryDirectory(prefix="vcollect-video-") as folder:
        path = Path(folder) / f"video{kind}"
        with VideoWriter(path, fps, min_side=min_side) as writer:
            writer.append(batch)
        return path.read_bytes()
