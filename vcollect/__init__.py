"""vcollect: collect RL experience at the speed of the environments, into datasets nothing loses."""

from __future__ import annotations

from typing import Any

from vcollect.async_collector import AsyncCollector
from vcollect.buffers import VectorRingBuffer
from vcollect.callbacks import EpisodeMetadataCallback, StepDataCallback
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
    CollectorStateError,
    CorruptShardError,
    DatasetError,
    DatasetExistsError,
    DatasetNotFoundError,
    EnvWorkerError,
    HookOutputError,
    InfoStructureError,
    InvalidDatasetIdError,
    ObservationError,
    SpaceMismatchError,
    UnfinishedEpisodesWarning,
    VCollectError,
)
from vcollect.hooks import EpisodeRolloutHookMCReturn, StepRollout
from vcollect.policies import EpsilonGreedy, Policy, RandomPolicy
from vcollect.recorder import DataCollector
from vcollect.stats import CollectStats, SummaryStats
from vcollect.store import (
    Dataset,
    EpisodeData,
    EpisodeStore,
    combine_datasets,
    delete_dataset,
    export_minari,
    import_minari,
    list_datasets,
    load_dataset,
    split_dataset,
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
    "make_vector",
]


def __getattr__(name: str) -> Any:
    """Import TorchPolicy (and torch) only when it is asked for."""
    if name == "TorchPolicy":
        from vcollect.policies import TorchPolicy

        return TorchPolicy
    raise AttributeError(f"module 'vcollect' has no attribute {name!r}")
