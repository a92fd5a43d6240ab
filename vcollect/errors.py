"""The exceptions and warnings vcollect raises, so callers can catch exactly what went wrong.

Every error derives from :class:`VCollectError` and, where Python or Minari raise a built-in type for the
same fault, from that type too (``ValueError``, ``IndexError``, ``FileNotFoundError``, ...). The errors
page of the documentation (docs/api/errors.md) lists each one, when it is raised and its base classes.
:func:`warn_user` gives a warning the location of the user's line that led to it.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = [
    "ActionError",
    "BucketNotFoundError",
    "BufferNotReadyError",
    "CheckpointExistsError",
    "CheckpointMismatchError",
    "CodecUnavailableError",
    "CollectorStateError",
    "CorruptCheckpointError",
    "CorruptDatasetError",
    "CorruptShardError",
    "DamagedDatasetError",
    "DatasetError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "DiskFullError",
    "EncoderUnavailableError",
    "EnvAttributeError",
    "EnvOutputError",
    "EnvSpecMismatchError",
    "EnvSpecNotStoredError",
    "EnvSpecNotStoredWarning",
    "EnvUnavailableError",
    "EnvWorkerError",
    "EpisodeIndexError",
    "EpisodeNotSeededError",
    "EpisodesLostWarning",
    "ForeignJournalWarning",
    "HookOutputError",
    "InfoStructureError",
    "InvalidDatasetIdError",
    "MetadataKeyError",
    "NamespaceExistsError",
    "NamespaceNotEmptyError",
    "NamespaceNotFoundError",
    "NoImageObservationsError",
    "ObservationError",
    "RemoteAccessError",
    "RemoteDatasetNotFoundError",
    "RemoteError",
    "RemoteIntegrityError",
    "RemoteTransferError",
    "RemoteUnavailableError",
    "ReplayDivergenceError",
    "RingInUseError",
    "SliceLengthError",
    "SpaceMismatchError",
    "UnfinishedEpisodesWarning",
    "UnknownRemoteError",
    "UnsafePathError",
    "UnsupportedBufferMethodError",
    "VCollectError",
    "WorkerLostError",
]


class VCollectError(Exception):
    """Base class of every error raised by vcollect."""


class EnvWorkerError(VCollectError, RuntimeError):
    """An environment raised, or the process/actor running it died.

    Carries the env id and the original traceback text so the failure can be
    debugged from the parent process.

    Args:
        env_id: The env that failed; None when it is not known which (a worker as a whole).
        message: What went wrong.
        traceback_text: The original traceback, formatted, appended to the message when given.
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


class DamagedDatasetError(CorruptShardError):
    """A dataset's shard files disagree with its manifests or cannot be read whole: a recorded shard is
    missing, an unrecorded or copied one is present, one is truncated, altered or corrupt.

    Raised by ``load_dataset`` (``on_damage="skip"`` reads the whole shards instead, with a warning); the
    message names every file, and ``problems`` holds one line per problem. A CorruptShardError, so code
    that caught a corrupt shard catches this too.

    Args:
        message: The error message, naming every file.
        problems: One line per problem.
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems or [])


class SpaceMismatchError(DatasetError, ValueError):
    """Observation or action spaces differ where they must be equal."""


class UnfinishedEpisodesWarning(UserWarning):
    """Episodes still running when a collector writing to a store closed or reset were not stored."""


class EnvSpecNotStoredWarning(UserWarning):
    """The envs' spec cannot be stored with the dataset (a callable entry point, or kwargs that are not
    JSON-able): its episodes cannot be replayed (``vcollect verify --replay``) and
    ``Dataset.recover_environment()`` raises."""


class EpisodesLostWarning(UserWarning):
    """Finished episodes of a store or collector nobody closed could not be committed (at interpreter exit, or
    when it was garbage-collected); the message counts the episodes and steps lost and says why."""


class CorruptDatasetError(DatasetError, ValueError):
    """A dataset's ``dataset.json`` (or manifest) is unreadable or malformed; the message names the file."""


class DiskFullError(DatasetError):
    """A shard, dataset or export could not be written for want of disk space (ENOSPC or a quota).

    Nothing already stored is damaged and no partial file is left; a writer keeps its pending episodes, so
    ``flush()`` after freeing space commits them.
    """


class CodecUnavailableError(DatasetError, ImportError):
    """A shard compression codec (or the filter a stored column was written with) is not installed here."""


class EnvAttributeError(VCollectError, AttributeError):
    """``get_env_attr`` / ``set_env_attr`` failed for some env: no such attribute, or it cannot be set.

    ``env_ids`` lists the env ids it failed for (the message names the attribute and them).

    Args:
        message: The error message.
        env_ids: The env ids the call failed for.
    """

    def __init__(self, message: str, env_ids: list[int] | None = None) -> None:
        self.env_ids = list(env_ids or [])
        super().__init__(message)


class EnvSpecMismatchError(DatasetError, ValueError):
    """Datasets to combine were collected from different envs (their env specs differ beyond max_episode_steps)."""


class BufferNotReadyError(VCollectError, RuntimeError):
    """A ring buffer made without spaces was used before a Collector (or ``bind_spaces``) gave it its spaces."""


class WorkerLostError(EnvWorkerError):
    """A distributed worker died and could not be replaced (no restarts left, or its replacement failed).

    ``stats`` holds what the call collected and counted before it gave up (each stored episode once, the
    dead workers' committed episodes included), so a caller can ask for the rest instead of all again.

    Args:
        message: What was lost and why.
        traceback_text: The original traceback, formatted, appended to the message when given.
        stats: The CollectStats of what the call collected before it gave up.
    """

    def __init__(self, message: str, traceback_text: str = "", stats: Any = None) -> None:
        super().__init__(None, message, traceback_text)
        self.stats = stats


class NamespaceNotFoundError(DatasetError, ValueError):
    """No namespace with the given name exists under the root (a ValueError, as Minari raises)."""


class NamespaceExistsError(DatasetError, ValueError):
    """A namespace with the given name already exists (update it with ``update_namespace``)."""


class NamespaceNotEmptyError(DatasetError, ValueError):
    """A namespace still holds datasets or namespaces, so it cannot be deleted."""


class MetadataKeyError(DatasetError, ValueError):
    """Metadata names a key that may not be set after the fact (ids, spaces, env spec, format, totals)."""


class EpisodeIndexError(DatasetError, IndexError):
    """An episode index is out of range or not part of the dataset view it was given to."""


class UnsafePathError(DatasetError):
    """The store refused to rename or delete a path outside its datasets root or reached through a symbolic
    link below the root (a crafted journal, a linked namespace folder); nothing was changed."""


class ForeignJournalWarning(UserWarning):
    """A publish journal at the datasets root was not written by this user's vcollect (no valid signature)
    or is malformed; it was left alone and not replayed."""


class EnvOutputError(EnvWorkerError):
    """An env returned a value of the wrong type from ``step`` or ``reset`` (a list as its reward, an array as
    its termination flag), or was built without what vcollect needs (an ``observation_space``).

    Like every EnvWorkerError it names the env id and carries the traceback text of where it was found.
    """


class EpisodeNotSeededError(DatasetError, ValueError):
    """An episode asked to be replayed was stored without the seed of its reset (``seed_every_reset=False``
    or an env that restarts itself), so it cannot be replayed alone."""


class EnvSpecNotStoredError(DatasetError, ValueError):
    """A dataset stores no env spec, so its env cannot be made (``recover_environment``, a replay)."""


class EnvUnavailableError(DatasetError, RuntimeError):
    """A dataset's env spec cannot be made here (a package not installed, an id gymnasium does not know);
    the message names the spec and the requirements stored with the dataset."""


class ReplayDivergenceError(DatasetError):
    """A replayed episode differs from what is stored (an observation, reward or termination).

    Args:
        episode: The episode's id in its dataset.
        step: The step at which the replay diverged (0: the reset observation).
        problem: What differs, in words.
    """

    def __init__(self, episode: int, step: int, problem: str) -> None:
        self.episode = int(episode)
        self.step = int(step)
        self.problem = problem
        super().__init__(f"episode {episode} diverged from its replay at step {step}: {problem}")


class NoImageObservationsError(DatasetError, ValueError):
    """Frames were asked of stored observations that are not images (an HxW, HxWx1 or HxWx3 uint8 Box, or
    a stack of them); replay the episode instead (``source="replay"``)."""


class EncoderUnavailableError(VCollectError, ImportError):
    """The video encoder is not installed: ``pip install 'vcollect[render]'`` (imageio and imageio-ffmpeg)."""

class CheckpointExistsError(VCollectError, FileExistsError):
    """A ring checkpoint was to be saved at a path that exists (pass ``overwrite=True`` to replace it)."""


class CheckpointMismatchError(VCollectError, ValueError):
    """A ring checkpoint holds another kind of ring, other spaces, env count or capacity than the ones its
    loader asked for; the message names what differs."""


class CorruptCheckpointError(VCollectError, ValueError):
    """A ring checkpoint cannot be read back whole: not a checkpoint, truncated, or its data fails its checksums."""


class RingInUseError(VCollectError, ValueError):
    """A ring was to be filled from a dataset while episodes are running in it (preload before collecting)."""
class UnsupportedBufferMethodError(VCollectError, AttributeError, NotImplementedError):
    """A Tianshou algorithm (or a user) asked vcollect.tianshou's replay-buffer adapter for a member of
    Tianshou's ReplayBuffer it does not implement; the message names the member and the vcollect version.
    An AttributeError, so ``hasattr`` is False for it as for any missing member."""
class RemoteError(DatasetError):
    """Base class of the errors of remote storage (uploads, downloads and listings of remote datasets)."""


class RemoteUnavailableError(RemoteError, ImportError):
    """The packages a remote needs (fsspec, s3fs, gcsfs) are not installed: install ``vcollect[remote]``."""


class UnknownRemoteError(RemoteError, ValueError):
    """A remote URL is malformed or names a scheme vcollect cannot reach (it knows s3://, gs://, gcp://, file://)."""


class BucketNotFoundError(RemoteError, FileNotFoundError):
    """The bucket (or the folder of a ``file://`` remote) a remote URL names does not exist."""


class RemoteAccessError(RemoteError, PermissionError):
    """The remote refused access: no credentials were found, or those found may not read or write there."""


class RemoteDatasetNotFoundError(DatasetNotFoundError, RemoteError):
    """No dataset with that id on the remote (the message names the remote)."""


class RemoteIntegrityError(RemoteError, CorruptShardError):
    """A remote object's bytes do not match what the dataset's manifest records (its size or SHA-256): tampered
    with or truncated; it was refused and nothing was published."""


class RemoteTransferError(RemoteError, ConnectionError):
    """A transfer stopped part way (the server went away or failed); running it again resumes it."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` located at the first frame outside the vcollect package: the
    user's line (a call to reset, collect, close or a constructor), however deep inside vcollect it is given.

    Args:
        message: The warning's text.
        category: Its class.
    """
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level + 1)


class SliceLengthError(VCollectError, ValueError):
    """No stored episode offers a window of the length asked (``sample_slices`` with ``pad="none"`` and every
    episode shorter); the message names the longest episode and its steps.

    Args:
        message: What was asked and what the longest episode holds.
        length: The window length asked.
        longest_steps: The steps of the longest episode (0 when there is none).
    """

    def __init__(self, message: str, *, length: int, longest_steps: int) -> None:
        self.length = length
        self.longest_steps = longest_steps
        super().__init__(message)
