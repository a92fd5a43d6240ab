"""vcollect: collect RL experience at the speed of the environments, into datasets nothing loses.

The top level holds what a user needs to collect, store and read experience. The exceptions are in
:mod:`vcollect.errors`; backend adapters and capabilities in :mod:`vcollect.envs`; the sink protocol, the
dataset spec and the rest of the store's API in :mod:`vcollect.store`.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from vcollect.policies import EpsilonGreedy, Policy, RandomPolicy, TorchPolicy
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

#: The module each public name is defined in, imported on the name's first use: ``import vcollect``
#: alone loads no collector, store or env code, so a command, worker process or script that needs one
#: part starts without paying for the others (``TorchPolicy`` alone loads torch).
_HOMES = {
    "vcollect.async_collector": ("AsyncCollector",),
    "vcollect.buffers": ("MixedSampler", "PrioritizedVectorRingBuffer", "VectorRingBuffer"),
    "vcollect.collector": ("Collector",),
    "vcollect.envs": ("DummyVectorEnv", "SubprocVectorEnv", "VectorEnv", "make_vector"),
    "vcollect.hooks": ("EpisodeRolloutHookMCReturn",),
    "vcollect.minari": (
        "DataCollector", "EpisodeBuffer", "EpisodeMetadataCallback", "StepData", "StepDataCallback",
        "create_dataset_from_buffers", "export_minari", "get_normalized_score", "import_minari", "reference_scores",
    ),
    "vcollect.policies": ("EpsilonGreedy", "Policy", "RandomPolicy", "TorchPolicy"),
    "vcollect.remote": ("download_dataset", "list_remote_datasets", "load_dataset", "upload_dataset"),
    "vcollect.stats": ("CollectStats",),
    "vcollect.store": (
        "Dataset", "EpisodeData", "EpisodeStore", "combine_datasets", "create_namespace", "delete_dataset",
        "delete_namespace", "get_namespace_metadata", "list_datasets", "list_local_datasets", "list_local_namespaces",
        "split_dataset", "update_namespace_metadata",
    ),
}
_PUBLIC = {name: module for module, names in _HOMES.items() for name in names}

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
    """Import a public name's module, or a subpackage (``vcollect.store``), on first use; serve the names moved
    out of the top level with a warning.

    Args:
        name: The attribute asked for.

    Returns:
        The object ``name`` refers to (``TorchPolicy`` loads torch), or the submodule ``vcollect.<name>``.

    Raises:
        AttributeError: ``name`` is not a name of this package.
    """
    home = _PUBLIC.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value  # found in the module's namespace from now on, without this call
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # importing binds it here as an attribute
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
