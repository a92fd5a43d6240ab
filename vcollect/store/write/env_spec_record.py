"""The env spec a dataset should record, when its writer was created without saying.

A Collector knows its envs' EnvSpec when they were made from a registered id (``make_vector``, gymnasium
vector envs) and offers it to its sink (``AcceptsEnvSpec``); EpisodeStore records it in ``dataset.json``
once, never replacing one the user gave. A spec that cannot be stored as JSON (a callable entry point,
kwargs that are not JSON-able) is said once, with what the dataset then lacks (EnvSpecNotStoredWarning).
"""

from __future__ import annotations

from pathlib import Path

from gymnasium.envs.registration import EnvSpec

from vcollect.errors import EnvSpecNotStoredWarning, warn_user
from vcollect.store.layout.dataset_info import read_dataset_info

__all__ = ["UNSTORED_SPEC_LACKS", "env_spec_json", "env_spec_to_record"]

UNSTORED_SPEC_LACKS = (
    "its episodes cannot be replayed (vcollect verify --replay) and Dataset.recover_environment() raises"
)
"""What a dataset without its env spec lacks, as the warnings say it."""


def env_spec_json(spec: EnvSpec) -> str | None:
    """``spec`` as JSON, or None (with an EnvSpecNotStoredWarning saying why and what the dataset will lack)
    when it cannot be stored: a callable entry point, or kwargs that are not JSON-able.

    Args:
        spec: The envs' spec.

    Returns:
        The JSON text, or None.
    """
    try:
        return spec.to_json()
    except (TypeError, ValueError) as exc:
        reason = " ".join(str(exc).split())
        warn_user(
            f"the env spec of {spec.id!r} cannot be stored with the dataset ({reason}), so {UNSTORED_SPEC_LACKS}; "
            "register the env with an entry point string ('module:Class') and JSON-able kwargs to store it",
            EnvSpecNotStoredWarning,
        )
        return None


def env_spec_to_record(path: Path, dataset_id: str, spec: EnvSpec) -> str | None:
    """The JSON of ``spec`` to record in the dataset at ``path`` (id ``dataset_id``), or None when the dataset
    has an env spec already or the spec cannot be stored (said by :func:`env_spec_json`)."""
    root = path.parents[len(dataset_id.split("/")) - 1]
    if read_dataset_info(path, dataset_id, root).get("env_spec") is not None:
        return None
    return env_spec_json(spec)
