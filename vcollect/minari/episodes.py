"""What the Minari episode codecs (HDF5, Arrow/Parquet) share: the episode record an import reads, the
image-space rule behind Minari's JPEG encoding, JPEG frames, Text columns and JSON values.

Each codec writes a Dataset's episodes in its layout and reads a Minari dataset's episodes back as
:class:`MinariEpisode` records, which ``import_minari`` hands to ``EpisodeStore.write_episode``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import gymnasium as gym
import numpy as np

from vcollect.text_leaves import decode_utf8

__all__ = ["MinariEpisode", "decode_jpeg", "is_image_space", "json_value", "text_values"]


class MinariEpisode(TypedDict):
    """One episode read from a Minari dataset, as ``EpisodeStore.write_episode`` takes it (plus its name)."""

    name: str
    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, Any] | None
    extras: dict[str, Any] | None
    seed: int | None
    options: dict[str, Any] | None
    metadata: dict[str, Any] | None


def is_image_space(space: gym.Space[Any]) -> bool:
    """Minari's rule for spaces it JPEG-encodes when ``jpeg_encoding`` is on."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) in (2, 3)
        and space.shape[0] >= 32
        and space.shape[1] >= 32
        and space.dtype == np.uint8
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def decode_jpeg(frames: Sequence[bytes]) -> np.ndarray:
    """JPEG-encoded frames (Minari's ``jpeg_encoding``) as one uint8 array of frames."""
    from PIL import Image  # Minari's own dependency; only needed for JPEG-encoded images

    images = [np.array(Image.open(io.BytesIO(raw)), dtype=np.uint8) for raw in frames]
    return np.stack(images) if images else np.zeros((0,), np.uint8)


def text_values(values: Any) -> np.ndarray:
    """A Text column as Minari hands it over (str, bytes or h5py's variable-length values) as a numpy unicode
    array of its own width: the store checks it against the space, so nothing is cut here."""
    arr = np.asarray(values, dtype=object) if isinstance(values, list) else np.asarray(values)
    if arr.dtype.kind in "OS":
        return decode_utf8(arr)
    return arr


def json_value(value: Any) -> Any:
    """numpy scalars/arrays (from HDF5 attributes) -> plain JSON-able Python values."""
    if isinstance(value, np.ndarray):
        return [json_value(v) for v in value.tolist()] if value.dtype.kind in "OS" else value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value
