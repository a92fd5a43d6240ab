"""Record the env a dataset was collected from, when its writer was created without saying.

A Collector knows its envs' EnvSpec when they were made from a registered id (``make_vector``, gymnasium
vector envs); before this, only the CLI stored it, so datasets written from Python could not
``recover_environment()``. ``record_env_spec`` writes the spec into ``dataset.json`` once, never replacing
one the user gave.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.registration import EnvSpec

from vcollect.store.layout.dataset_info import read_dataset_info
from vcollect.store.write.writer import EpisodeStore

__all__ = ["record_env_spec"]


def record_env_spec(sink: Any, spec: EnvSpec | None) -> bool:
    """Store ``spec`` as the env spec of ``sink``'s dataset when ``sink`` is an EpisodeStore whose dataset has
    none; True when it did. A spec whose kwargs are not JSON-able is skipped, as the CLI skips it."""
    if spec is None or not isinstance(sink, EpisodeStore):
        return False
    root = sink.path.parents[len(sink.dataset_id.split("/")) - 1]
    if read_dataset_info(sink.path, sink.dataset_id, root).get("env_spec") is not None:
        return False
    try:
        spec_json = spec.to_json()
    except (TypeError, ValueError):
        return False
    sink.update_metadata(env_spec=spec_json)
    return True
