"""vcollect: collect RL experience at the speed of the environments, into datasets nothing loses."""

from __future__ import annotations

from typing import Any

from vcollect.async_collector import AsyncCollector
from vcollect.buffers import PrioritizedVectorRingBuffer, VectorRingBuffer
from vcollect.collector import Collector
from vcollect.envs import (
    DummyVectorEnv,
    EnvCapabilities,
    EnvPoolVectorEnv,
    GymnasiumVectorEnv,
    SubprocVectorEnv,
    VectorEnv,
    make_vector,
)
from vcollect.errors import (
    ActionError,
    BufferNotReadyError,
    CollectorStateError,
    CorruptShardError,
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    EnvWorkerError,
    EpisodeIndexError,
    HookOutputError,
    InfoStructureError,
    InvalidDatasetIdError,
    MetadataKeyError,
    NamespaceExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    ObservationError,
    SpaceMismatchError,
    UnfinishedEpisodesWarning,
    VCollectError,
)
from vcollect.hooks import EpisodeRolloutHookMCReturn, StepRollout
from vcollect.minari import (
    DataCollector,
    EpisodeBuffer,
    EpisodeMetadataCallback,
    StepData,
    StepDataCallback,
    create_dataset_from_buffers,
    export_minari,
    get_normalized_score,
    import_minari,
    reference_scores,
)
from vcollect.policies import EpsilonGreedy, Policy, RandomPolicy
from vcollect.stats import CollectStats, SummaryStats
from vcollect.store import (
    Dataset,
    DatasetSpec,
    EpisodeData,
    EpisodeStore,
    combine_datasets,
    create_namespace,
    delete_dataset,
    delete_namespace,
    get_namespace_metadata,
    list_datasets,
    list_local_datasets,
    list_local_namespaces,
    load_dataset,
    split_dataset,
    update_namespace,
    update_namespace_metadata,
)
from vcollect.store.sink import EpisodeSink

__version__ = "0.1.0"

__all__ = [
    "ActionError",
    "AsyncCollector",
    "EnvPoolVectorEnv",
    "GymnasiumVectorEnv",
    "DataCollector",
    "Dataset",
    "EpisodeData",
    "EpisodeMetadataCallback",
    "EpisodeStore",
    "EpsilonGreedy",
    "StepDataCallback",
    "combine_datasets",
    "delete_dataset",
    "export_minari",
    "import_minari",
    "list_datasets",
    "load_dataset",
    "split_dataset",
    "DatasetSpec",
    "EpisodeIndexError",
    "MetadataKeyError",
    "NamespaceExistsError",
    "NamespaceNotEmptyError",
    "NamespaceNotFoundError",
    "create_namespace",
    "delete_namespace",
    "get_namespace_metadata",
    "list_local_datasets",
    "list_local_namespaces",
    "update_namespace",
    "update_namespace_metadata",
    "EpisodeBuffer",
    "StepData",
    "create_dataset_from_buffers",
    "get_normalized_score",
    "reference_scores",
    "CollectStats",
    "Collector",
    "CollectorStateError",
    "CorruptShardError",
    "DatasetError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DummyVectorEnv",
    "EnvCapabilities",
    "EnvWorkerError",
    "EpisodeSink",
    "EpisodeRolloutHookMCReturn",
    "HookOutputError",
    "InfoStructureError",
    "StepRollout",
    "UnfinishedEpisodesWarning",
    "InvalidDatasetIdError",
    "ObservationError",
    "Policy",
    "RandomPolicy",
    "SpaceMismatchError",
    "SubprocVectorEnv",
    "SummaryStats",
    "TorchPolicy",
    "VCollectError",
    "VectorEnv",
    "VectorRingBuffer",
    "PrioritizedVectorRingBuffer",
    "BufferNotReadyError",
    "make_vector",
]


def __getattr__(name: str) -> Any:
    """Import TorchPolicy (and torch) only when it is asked for."""
    if name == "TorchPolicy":
        from vcollect.policies import TorchPolicy

        return TorchPolicy
    raise AttributeError(f"module 'vcollect' has no attribute {name!r}")
