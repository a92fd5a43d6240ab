"""Frames encoded as a video a ``<video>`` element plays: WebM (VP8) or MP4 (H.264), through imageio and
the ffmpeg of imageio-ffmpeg (the ``render`` extra)."""

from __future__ import annotations

import importlib.util

import numpy as np

__all__ = ["VIDEO_TYPES", "encode_video", "encoder_missing", "video_frames"]

#: Container -> (its MIME type, the ffmpeg codec written into it).
VIDEO_TYPES: dict[str, tuple[str, str]] = {"webm": ("video/webm", "libvpx"), "mp4": ("video/mp4", "libx264")}

#: Frames smaller than this on their shorter side are scaled up by a whole factor (nearest neighbour), so an
#: 84x84 Atari frame plays at 168x168, not as a stamp.
MIN_VIDEO_SIDE = 160


def encoder_missing() -> str | None:
    """None when videos can be encoded here; else what to install (the ``render`` extra)."""
    missing = [name for name in ("imageio", "imageio_ffmpeg") if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (f"videos need {' and '.join(m.replace('_', '-') for m in missing)}, not installed: "
            "pip install 'vcollect[render]'")


def video_frames(frames: np.ndarray) -> np.ndarray:
    """``frames`` (N, H, W, 3) made fit to encode: scaled up by a whole factor when small, padded (black) to
    even sides (the yuv420p pixel format halves both)."""
    out = np.asarray(frames, dtype=np.uint8)
    side = min(out.shape[1:3])
    if 0 < side < MIN_VIDEO_SIDE:
        factor = -(-MIN_VIDEO_SIDE // side)
        out = np.repeat(np.repeat(out, factor, axis=1), factor, axis=2)
    pad_h, pad_w = out.shape[1] % 2, out.shape[2] % 2
    if pad_h or pad_w:
        out = np.pad(out, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
    return np.ascontiguousarray(out)


def encode_video(frames: np.ndarray, *, container: str = "webm", fps: float = 30.0) -> bytes:
    """Encode frames as a video file's bytes.

    Args:
        frames: (N, H, W, 3) uint8 frames, N >= 1.
        container: ``"webm"`` (VP8) or ``"mp4"`` (H.264).
        fps: Frames per second: the video lasts N / fps seconds.

    Returns:
        The file's bytes.

    Raises:
        ValueError: No frames, frames of another shape, an unknown container or a non-positive fps.
        ImportError: imageio or imageio-ffmpeg is not installed (the message names the extra).
    """
    if container not in VIDEO_TYPES:
        raise ValueError(f"container must be one of {sorted(VIDEO_TYPES)}, got {container!r}")
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    data = np.asarray(frames)
    if data.ndim != 4 or data.shape[3] != 3 or data.shape[0] < 1:
        raise ValueError(f"frames must be a (N, H, W, 3) array with N >= 1, got shape {data.shape}")
    missing = encoder_missing()
    if missing is not None:
        raise ImportError(missing)
    import imageio.v3 as iio

    return bytes(iio.imwrite("<bytes>", video_frames(data), extension=f".{container}", fps=fps,
                             codec=VIDEO_TYPES[container][1], macro_block_size=2, ffmpeg_log_level="error"))
