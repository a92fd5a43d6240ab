"""vcollect: collect RL experience at the speed of the environments, into datasets nothing loses.

The top level holds what a user needs to collect, store and read experience. The exceptions are in
:mod:`vcollect.errors`; backend adapters and capabilities in :mod:`vcollect.envs`; the sink protocol, the
dataset spec and the rest of the store's API in :mod:`vcollect.store`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from vcollect.async_collector import AsyncCollector
from vcollect.buffers import MixedSampler, PrioritizedVectorRingBuffer, VectorRingBuffer
from vcollect.collector import Collector
from vcollect.envs import DummyVectorEnv, SubprocVectorEnv, VectorEnv, make_vector
from vcollect.hooks import EpisodeRolloutHookMCReturn
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
from vcollect.remote import download_dataset, list_remote_datasets, load_dataset, upload_dataset
from vcollect.stats import CollectStats
from vcollect.store import (
    Dataset,
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
    split_dataset,
    update_namespace_metadata,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncCollector",
    "CollectStats",
    "Collector",
    "DataCollector",
    "Dataset",
    "DummyVectorEnv",
    "EpisodeBuffer",
    "EpisodeData",
    "EpisodeMetadataCallback",
    "EpisodeRolloutHookMCReturn",
    "EpisodeStore",
    "EpsilonGreedy",
    "MixedSampler",
    "Policy",
    "PrioritizedVectorRingBuffer",
    "RandomPolicy",
    "StepData",
    "StepDataCallback",
    "SubprocVectorEnv",
    "TorchPolicy",
    "VectorEnv",
    "VectorRingBuffer",
    "combine_datasets",
    "create_dataset_from_buffers",
    "create_namespace",
    "delete_dataset",
    "delete_namespace",
    "download_dataset",
    "export_minari",
    "get_namespace_metadata",
    "get_normalized_score",
    "import_minari",
    "list_datasets",
    "list_local_datasets",
    "list_local_namespaces",
    "list_remote_datasets",
    "load_dataset",
    "make_vector",
    "reference_scores",
    "split_dataset",
    "update_namespace_metadata",
    "upload_dataset",
]

#: Names that left the top level, and the module each is imported from now. They still import from
#: ``vcollect`` for one release, with a DeprecationWarning naming that module.
_MOVED = {
    **dict.fromkeys(
        [
            "ActionError",
            "BufferNotReadyError",
            "CollectorStateError",
            "CorruptShardError",
            "DatasetError",
            "DatasetExistsError",
            "DatasetNotFoundError",
            "EnvWorkerError",
            "EpisodeIndexError",
            "HookOutputError",
            "InfoStructureError",
            "InvalidDatasetIdError",
            "MetadataKeyError",
            "NamespaceExistsError",
            "NamespaceNotEmptyError",
            "NamespaceNotFoundError",
            "ObservationError",
            "SpaceMismatchError",
            "UnfinishedEpisodesWarning",
            "VCollectError",
        ],
        "vcollect.errors",
    ),
    "DatasetSpec": "vcollect.store",
    "EnvCapabilities": "vcollect.envs",
    "EnvPoolVectorEnv": "vcollect.envs",
    "EpisodeSink": "vcollect.store",
    "GymnasiumVectorEnv": "vcollect.envs",
    "StepRollout": "vcollect.hooks",
    "SummaryStats": "vcollect.stats",
    "update_namespace": "vcollect.store",
}


def __getattr__(name: str) -> Any:
    """Load ``TorchPolicy`` (and torch) on first use; serve the names moved out of the top level with a warning.

    Args:
        name: The attribute asked for.

    Returns:
        ``TorchPolicy``, or the object a moved name refers to.

    Raises:
        AttributeError: ``name`` is neither of these.
    """
    if name == "TorchPolicy":
        from vcollect.policies import TorchPolicy

        return TorchPolicy
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'vcollect' has no attribute {name!r}")
    warnings.warn(
        f"vcollect.{name} is deprecated and will be removed from the top level: import it from {module} "
        f"(from {module} import {name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    """The public names (``__all__``) and the module's own attributes; the moved names are left out."""
    return sorted({*__all__, *globals()})
