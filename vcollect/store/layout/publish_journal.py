"""Publishing several staged datasets as one: all of them or none, even under SIGKILL.

One rename publishes one dataset atomically, but ``vcollect split`` publishes several, and an overwrite
is two renames (the old dataset aside, the new one in). Both go through a journal: once every part is
staged, a small JSON file at the datasets root lists the moves (staging folder -> final place) and is
written atomically; that write is the commit point. The moves are then done one by one. If the process
dies between two of them, the next ``load_dataset`` or ``list_datasets`` of that root finds the journal
of a dead process and finishes the moves (:func:`recover_publishes`), so a reader sees either none of
the new datasets (killed before the journal) or all of them. Each staging folder names its journal in a
small file, so cleaning up a dead process's staging folders never removes one that a journal still
needs (see staging.remove_stale_staging).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from vcollect.errors import DatasetError, DatasetExistsError
from vcollect.store.layout.dataset_info import fsync_dir, write_json_atomic
from vcollect.store.layout.staging import JOURNAL_NAME_FILE, is_stale, pid_space, publish_dir

JOURNAL_RE = re.compile(r"\.vcollect-publish-(?P<space>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{12}\.json")


def publish_together(
    moves: Sequence[tuple[Path, Path]], root: Path, *, marker: str, overwrite: bool, exists_messages: Sequence[str],
    discard: Callable[[Path], None],
) -> None:
    """Move each finished staging folder to its final place, all or none (see the module docstring).

    ``marker`` tells a dataset at a final place: DatasetExistsError (its ``exists_messages`` entry) before
    anything moves unless ``overwrite``, which replaces it (publish_dir). Staging folders and final places
    must lie under ``root``. Any error before the commit point calls ``discard`` on every staging folder;
    after it, the staging folders are left for :func:`recover_publishes` to publish.
    """
    root = Path(root)
    try:
        for (_, final), message in zip(moves, exists_messages):
            if not overwrite and os.path.lexists(final / marker):
                raise DatasetExistsError(message)
            if os.path.lexists(final) and not os.path.lexists(final / marker) and not _only_empty_folders(final):
                raise DatasetError(
                    f"cannot put the new dataset at {str(final)!r}: something that is not a dataset is there"
                )
        journal = root / f".vcollect-publish-{pid_space()}-{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
        for staging, _ in moves:
            (staging / JOURNAL_NAME_FILE).write_text(str(journal), encoding="utf-8")
            fsync_dir(staging)
        entries = [[os.path.relpath(staging, root), os.path.relpath(final, root), message]
                   for (staging, final), message in zip(moves, exists_messages)]
        write_json_atomic(journal, {"moves": entries, "marker": marker, "overwrite": overwrite}, exclusive=True)
        fsync_dir(root)  # the commit point: from here on the moves are finished, by this process or the next reader
    except BaseException:
        for staging, _ in moves:
            discard(staging)
        raise
    _roll_forward(journal, root)


def recover_publishes(root: Path) -> None:
    """Finish the publishes that processes now dead committed but did not complete (cheap: one listing of
    ``root``). A move that cannot be finished is left as it is, with a warning naming the journal."""
    try:
        names = [entry.name for entry in os.scandir(root) if JOURNAL_RE.fullmatch(entry.name)]
    except OSError:
        return
    for name in names:
        match = JOURNAL_RE.fullmatch(name)
        assert match is not None
        journal = Path(root) / name
        if not is_stale(match["space"], int(match["pid"]), journal):
            continue  # its owner is still moving the parts
        try:
            _roll_forward(journal, Path(root))
        except Exception as exc:  # noqa: BLE001 - a reader must still read; the journal stays for a retry
            warnings.warn(f"could not finish the publish recorded in {str(journal)!r}: {exc}", UserWarning,
                          stacklevel=2)


def _only_empty_folders(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but (nested) empty folders, which publishing may replace."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    return all(not files and all(not (Path(d) / n).is_symlink() for n in dirs)
               for d, dirs, files in os.walk(folder))


def _roll_forward(journal: Path, root: Path) -> None:
    try:
        plan = json.loads(journal.read_text(encoding="utf-8"))
    except FileNotFoundError:  # another process finished it meanwhile
        return
    for staging_rel, final_rel, message in plan["moves"]:
        staging, final = root / staging_rel, root / final_rel
        if staging.is_dir():
            publish_dir(staging, final, marker=plan["marker"], overwrite=plan["overwrite"], exists_message=message)
        with contextlib.suppress(OSError):
            (final / JOURNAL_NAME_FILE).unlink()
    with contextlib.suppress(FileNotFoundError):
        journal.unlink()
    fsync_dir(root)
