"""The episode store: crash-safe columnar HDF5 shards written by EpisodeStore (how: StoreOptions), read as Datasets."""

from __future__ import annotations

from vcollect.store.layout.catalog import delete_dataset
from vcollect.store.layout.namespaces import (
    create_namespace,
    delete_namespace,
    get_namespace_metadata,
    list_local_namespaces,
    update_namespace,
    update_namespace_metadata,
)
from vcollect.store.layout.naming import dataset_path, parse_dataset_id, resolve_root
from vcollect.store.read.dataset_spec import DatasetSpec
from vcollect.store.read.listing import list_datasets
from vcollect.store.read.local_datasets import list_local_datasets
from vcollect.store.read.reader import Dataset, EpisodeData, load_dataset
from vcollect.store.sink import EpisodeSink
from vcollect.store.transforms import combine_datasets, split_dataset
from vcollect.store.write.options import StoreOptions
from vcollect.store.write.writer import EpisodeStore

__all__ = [
    "Dataset",
    "DatasetSpec",
    "EpisodeData",
    "EpisodeSink",
    "EpisodeStore",
    "StoreOptions",
    "combine_datasets",
    "create_namespace",
    "dataset_path",
    "delete_dataset",
    "delete_namespace",
    "get_namespace_metadata",
    "list_datasets",
    "list_local_datasets",
    "list_local_namespaces",
    "load_dataset",
    "parse_dataset_id",
    "resolve_root",
    "split_dataset",
    "update_namespace",
    "update_namespace_metadata",
]
