"""The env spec a dataset should record, when its writer was created without saying.

A Collector knows its envs' EnvSpec when they were made from a registered id (``make_vector``, gymnasium
vector envs) and offers it to its sink (``AcceptsEnvSpec``); EpisodeStore records it in ``dataset.json``
once, never replacing one the user gave.
"""

from __future__ import annotations

from pathlib import Path

from gymnasium.envs.registration import EnvSpec

from vcollect.store.layout.dataset_info import read_dataset_info

__all__ = ["env_spec_to_record"]


def env_spec_to_record(path: Path, dataset_id: str, spec: EnvSpec) -> str | None:
    """The JSON of ``spec`` to record in the dataset at ``path`` (id ``dataset_id``), or None when the dataset
    has an env spec already or the spec's kwargs are not JSON-able (skipped, as the CLI skips it)."""
    root = path.parents[len(dataset_id.split("/")) - 1]
    if read_dataset_info(path, dataset_id, root).get("env_spec") is not None:
        return None
    try:
        return spec.to_json()
    except (TypeError, ValueError):
        return None
