"""The episode store: crash-safe columnar HDF5 shards written by EpisodeStore, read as Datasets."""

from __future__ import annotations

from vcollect.store.catalog import delete_dataset, list_datasets
from vcollect.store.minari_interop import (
    export_minari,
    import_minari,
    minari_dataset_path,
    parse_minari_dataset_id,
    resolve_minari_root,
)
from vcollect.store.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.reader import Dataset, EpisodeData, load_dataset
from vcollect.store.transforms import combine_datasets, split_dataset
from vcollect.store.writer import EpisodeStore

__all__ = [
    "Dataset",
    "EpisodeData",
    "EpisodeStore",
    "combine_datasets",
    "dataset_path",
    "delete_dataset",
    "export_minari",
    "import_minari",
    "list_datasets",
    "load_dataset",
    "minari_dataset_path",
    "parse_dataset_id",
    "parse_minari_dataset_id",
    "resolve_minari_root",
    "resolve_root",
    "split_dataset",
]
