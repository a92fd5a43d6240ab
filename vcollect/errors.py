"""The exceptions vcollect raises, so callers can catch exactly what went wrong."""

from __future__ import annotations


class VCollectError(Exception):
    """Base class of every error raised by vcollect."""


class EnvWorkerError(VCollectError, RuntimeError):
    """An environment raised, or the process/actor running it died.

    Carries the env id and the original traceback text so the failure can be
    debugged from the parent process.
    """

    def __init__(self, env_id: int | None, message: str, traceback_text: str = "") -> None:
        self.env_id = env_id
        self.traceback_text = traceback_text
        where = f"env {env_id}" if env_id is not None else "an env worker"
        text = f"{where}: {message}"
        if traceback_text:
            text += f"\n--- original traceback ---\n{traceback_text.rstrip()}"
        super().__init__(text)


class CollectorStateError(VCollectError, RuntimeError):
    """The collector was used in a state that does not allow the call (not reset, closed)."""


class ActionError(VCollectError, ValueError):
    """A policy returned actions of the wrong number, shape, or outside the action space."""


class ObservationError(VCollectError, ValueError):
    """An environment returned an observation that does not fit its observation space."""


class HookOutputError(VCollectError, ValueError):
    """A collector hook returned something it cannot store (not a dict of per-step arrays, wrong length)."""


class InfoStructureError(VCollectError, ValueError):
    """An info dict changed structure after the first reset while infos are recorded."""


class DatasetError(VCollectError):
    """Base class of dataset and store errors."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """No dataset with the given id exists under the searched root."""


class DatasetExistsError(DatasetError, FileExistsError):
    """A dataset with the given id already exists (pass overwrite=True to replace it)."""


class InvalidDatasetIdError(DatasetError, ValueError):
    """A dataset id does not follow the grammar ``namespace/name-vN``."""


class CorruptShardError(DatasetError):
    """A shard file could not be read; the message names the file."""


class SpaceMismatchError(DatasetError, ValueError):
    """Observation or action spaces differ where they must be equal."""


class UnfinishedEpisodesWarning(UserWarning):
    """Episodes still running when a collector writing to a store closed or reset were not stored."""


class CorruptDatasetError(DatasetError, ValueError):
    """A dataset's ``dataset.json`` (or manifest) is unreadable or malformed; the message names the file."""


class DiskFullError(DatasetError):
    """A shard, dataset or export could not be written for want of disk space (ENOSPC or a quota).

    Nothing already stored is damaged and no partial file is left; a writer keeps its pending episodes, so
    ``flush()`` after freeing space commits them.
    """
