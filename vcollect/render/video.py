"""Video files from frames: MP4 (H.264), WebM (VP9) and GIF, encoded by the ffmpeg that imageio-ffmpeg ships
(the ``render`` extra), frames streamed to it as they come.

Frames are (H, W, 3) uint8 and all of one size per file; odd sides of an MP4 or WebM are padded by one black
row or column (H.264 and VP9 in 4:2:0 need even sides). GIFs get one palette for the whole file (ffmpeg's palettegen),
which keeps them small: pass a small size and a low fps for a GIF meant for a README.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from vcollect.errors import EncoderUnavailableError

__all__ = ["FORMATS", "VideoWriter", "require_encoder", "video_format"]

#: The video formats written, by file suffix: (codec, output pixel format, extra ffmpeg output options).
FORMATS: dict[str, tuple[str, str, list[str]]] = {
    ".mp4": ("libx264", "yuv420p", ["-preset", "veryfast", "-crf", "23", "-movflags", "+faststart"]),
    ".webm": ("libvpx-vp9", "yuv420p", ["-deadline", "realtime", "-cpu-used", "8", "-b:v", "0", "-crf", "34"]),
    ".gif": ("gif", "pal8", ["-vf", "split[a][b];[a]palettegen=max_colors=64:stats_mode=diff[p];"
                                    "[b][p]paletteuse=dither=bayer:bayer_scale=3", "-loop", "0"]),
}


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


class VideoWriter:
    """Frames to one video file, written as they are appended; a context manager (closing finishes the file).

    Args:
        path: The file to write (its suffix picks the format: .mp4, .webm or .gif).
        fps: Frames per second of playback.

    Raises:
        ValueError: An unknown suffix, or fps not > 0.
        EncoderUnavailableError: imageio-ffmpeg is not installed.
    """

    def __init__(self, path: str | Path, fps: float = 30.0) -> None:
        self.path = Path(path)
        self.format = video_format(self.path)
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps!r}")
        self.fps = float(fps)
        self._ffmpeg = require_encoder()
        self._gen: Any = None
        self._size: tuple[int, int] | None = None  # (height, width) of the frames given
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
        h, w = self._size
        if self.format != ".gif" and (h % 2 or w % 2):
            padded = np.zeros((batch.shape[0], h + h % 2, w + w % 2, 3), dtype=np.uint8)
            padded[:, :h, :w] = batch
            batch = padded
        self._gen.send(np.ascontiguousarray(batch).tobytes())
        self.frames += batch.shape[0]

    def _open(self, height: int, width: int) -> None:
        self._size = (height, width)
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
        """(height, width) of the file's frames (an MP4's or WebM's padded to even sides); None before the first."""
        if self._size is None:
            return None
        h, w = self._size
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
