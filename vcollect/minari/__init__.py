"""Minari's API and formats: DataCollector, its callbacks, EpisodeBuffer, the HDF5/Arrow codecs, export/import."""

from __future__ import annotations

from vcollect.minari.callbacks import EpisodeMetadataCallback, StepDataCallback
from vcollect.minari.episode_buffers import EpisodeBuffer, StepData, create_dataset_from_buffers
from vcollect.minari.interop import (
    export_minari,
    import_minari,
    minari_dataset_path,
    parse_minari_dataset_id,
    resolve_minari_root,
)
from vcollect.minari.recorder import DataCollector
from vcollect.minari.reference_scores import get_normalized_score, reference_scores

__all__ = [
    "DataCollector",
    "EpisodeBuffer",
    "EpisodeMetadataCallback",
    "StepData",
    "StepDataCallback",
    "create_dataset_from_buffers",
    "export_minari",
    "get_normalized_score",
    "import_minari",
    "minari_dataset_path",
    "parse_minari_dataset_id",
    "reference_scores",
    "resolve_minari_root",
]
