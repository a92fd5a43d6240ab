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

A journal is replayed only when it is provably this user's own: it carries an HMAC-SHA256 of its content
under a secret key kept in the user's home (``~/.vcollect/journal.key``, mode 0600), and names the root it
was written for. A journal unpacked from a tarball, copied from a remote or written by another user has no
valid signature; it, and any journal whose moves are not plain staging folders beside their final places
inside the root, is reported with a :class:`~vcollect.errors.ForeignJournalWarning` and left alone.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vcollect.durable import fsync_dir
from vcollect.errors import (
    CorruptDatasetError,
    DatasetError,
    DatasetExistsError,
    ForeignJournalWarning,
    UnsafePathError,
)
from vcollect.store.layout.containment import check_contained, is_plain_relative
from vcollect.store.layout.dataset_info import read_side_file, write_json_atomic
from vcollect.store.layout.staging import JOURNAL_NAME_FILE, is_stale, pid_space, publish_dir

__all__ = ["JOURNAL_RE", "journal_key_path", "journal_signature", "publish_together", "recover_publishes"]

JOURNAL_RE = re.compile(r"\.vcollect-publish-(?P<space>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{12}\.json")
# what write_json_atomic leaves when killed while writing a journal: <journal>.<pid>.<hex>.tmp
_JOURNAL_TMP_RE = re.compile(
    r"\.vcollect-publish-(?P<space>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{12}\.json\.\d+\.[0-9a-f]+\.tmp"
)
#: The markers a journal may name: vcollect's dataset.json, Minari's data folder.
_MARKERS = frozenset({"dataset.json", "data"})
_JOURNAL_VERSION = 1
#: A journal larger than this is not one of ours (a few hundred bytes per move).
_MAX_JOURNAL_BYTES = 1 << 20


def journal_key_path() -> Path:
    """Where this user's journal signing key lives (``~/.vcollect/journal.key``)."""
    return Path.home() / ".vcollect" / "journal.key"


@functools.cache
def _key_at(path: Path) -> bytes:
    """The signing key in ``path``, made (32 random bytes, mode 0600) when absent. When the home folder is
    not writable, a key for this process only: its journals are then replayed by this process alone."""
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    except OSError:
        return secrets.token_bytes(32)
    key = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key.hex().encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # of two processes making the key at once, one wins; both then read it
        finally:
            os.unlink(tmp)
    except FileExistsError:
        pass
    except OSError:
        return key
    try:
        return _read_key(path)
    except OSError:
        return key


def _read_key(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        text = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise OSError(errno.EINVAL, "not a journal key", str(path)) from None
    if len(key) < 16:
        raise OSError(errno.EINVAL, "journal key too short", str(path))
    return key


def journal_signature(body: dict[str, Any]) -> str:
    """The HMAC-SHA256 (hex) of a journal's ``body`` (every field but the signature) under this user's key."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hmac.new(_key_at(journal_key_path()), text, hashlib.sha256).hexdigest()


def _root_name(root: Path) -> str:
    return os.path.realpath(root)


def publish_together(
    moves: Sequence[tuple[Path, Path]], root: Path, *, marker: str, overwrite: bool, exists_messages: Sequence[str],
    discard: Callable[[Path], None],
) -> None:
    """Move each finished staging folder to its final place, all or none (see the module docstring).

    Args:
        moves: (staging folder, final place) pairs; each staging folder is a hidden sibling of its final place
            (staging.new_staging_dir), both inside ``root``.
        root: The datasets root the journal is written to.
        marker: The file or folder that tells a dataset at a final place.
        overwrite: Replace datasets at the final places (publish_dir); else DatasetExistsError before anything
            moves.
        exists_messages: The DatasetExistsError message of each move.
        discard: Called on every staging folder on an error before the commit point; after it, the staging
            folders are left for :func:`recover_publishes` to publish.

    Raises:
        DatasetExistsError: A dataset is at a final place and ``overwrite`` is False.
        DatasetError: Something that is not a dataset is at a final place.
        UnsafePathError: A folder lies outside ``root`` or is reached through a symbolic link.
    """
    root = Path(root)
    try:
        if marker not in _MARKERS:
            raise ValueError(f"unknown dataset marker {marker!r}")
        for (staging, final), message in zip(moves, exists_messages):
            check_contained(staging, root, action="publish from")
            check_contained(final, root, action="publish to")
            if not overwrite and os.path.lexists(final / marker):
                raise DatasetExistsError(message)
            if os.path.lexists(final) and not os.path.lexists(final / marker) and not _only_empty_folders(final):
                raise DatasetError(
                    f"cannot put the new dataset at {str(final)!r}: something that is not a dataset is there"
                )
        name = f".vcollect-publish-{pid_space()}-{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
        journal = root / name
        for staging, _ in moves:
            (staging / JOURNAL_NAME_FILE).write_text(str(journal), encoding="utf-8")
            fsync_dir(staging)
        body: dict[str, Any] = {
            "version": _JOURNAL_VERSION,
            "name": name,
            "root": _root_name(root),
            "moves": [[os.path.relpath(staging, root), os.path.relpath(final, root), message]
                      for (staging, final), message in zip(moves, exists_messages)],
            "marker": marker,
            "overwrite": overwrite,
        }
        write_json_atomic(journal, {**body, "signature": journal_signature(body)}, exclusive=True)
        fsync_dir(root)  # the commit point: from here on the moves are finished, by this process or the next reader
    except BaseException:
        for staging, _ in moves:
            discard(staging)
        raise
    _apply(body, journal, root)


def recover_publishes(root: Path) -> None:
    """Finish the publishes that processes now dead committed but did not complete (cheap: one listing of
    ``root``).

    A journal that is malformed, unsigned, signed by another key or names a move that is not a staging
    folder beside its final place inside ``root`` is left alone with a ForeignJournalWarning; a move that
    cannot be finished is left as it is, with a UserWarning naming the journal. The temporary files of
    journals whose writer died while writing them are removed.
    """
    try:
        entries = [(entry.name, entry.is_file(follow_symlinks=False)) for entry in os.scandir(root)]
    except OSError:
        return
    for name, is_file in entries:
        leftover = _JOURNAL_TMP_RE.fullmatch(name)
        if leftover is not None and is_file:
            path = Path(root) / name
            if is_stale(leftover["space"], int(leftover["pid"]), path):
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        match = JOURNAL_RE.fullmatch(name)
        if match is None:
            continue
        journal = Path(root) / name
        if not is_stale(match["space"], int(match["pid"]), journal):
            continue  # its owner is still moving the parts
        try:
            body = _read_journal(journal, Path(root))
        except FileNotFoundError:
            continue  # another process finished it meanwhile
        except (ValueError, OSError, UnsafePathError) as exc:
            warnings.warn(
                f"left the publish journal {str(journal)!r} alone (not replayed): {exc}. If it is not yours, "
                "delete it; vcollect replays only journals its own user wrote for this root",
                ForeignJournalWarning, stacklevel=2,
            )
            continue
        try:
            _apply(body, journal, Path(root))
        except Exception as exc:  # noqa: BLE001 - a reader must still read; the journal stays for a retry
            warnings.warn(f"could not finish the publish recorded in {str(journal)!r}: {exc}", UserWarning,
                          stacklevel=2)


def _read_journal(journal: Path, root: Path) -> dict[str, Any]:
    """The checked content of ``journal``: ValueError naming what is wrong unless it is a regular file of
    ours (signed with this user's key, written for ``root``) whose moves stay inside ``root``."""
    try:
        raw = read_side_file(journal, _MAX_JOURNAL_BYTES, follow_links=False)
    except CorruptDatasetError as exc:  # a FIFO, a link, a folder, far too large: the message says which
        raise ValueError(str(exc).removeprefix(f"{journal} ")) from None
    try:
        plan = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"it is not UTF-8 JSON ({type(exc).__name__})") from None
    if isinstance(plan, dict) and "signature" not in plan:
        raise ValueError("it carries no signature (vcollect's own journals are signed with its user's key)")
    if not isinstance(plan, dict) or set(plan) != {"version", "name", "root", "moves", "marker", "overwrite",
                                                    "signature"}:
        raise ValueError("it is not a vcollect publish journal (missing or unknown fields, or an older format)")
    signature = plan.pop("signature")
    if not isinstance(signature, str) or not hmac.compare_digest(signature, journal_signature(plan)):
        raise ValueError("its signature is not this user's (written elsewhere, by someone else, or edited)")
    if plan["version"] != _JOURNAL_VERSION or plan["name"] != journal.name or plan["root"] != _root_name(root):
        raise ValueError("it was written for another root or under another name")
    if plan["marker"] not in _MARKERS or not isinstance(plan["overwrite"], bool) or not isinstance(
            plan["moves"], list):
        raise ValueError("its marker, overwrite flag or moves are malformed")
    for move in plan["moves"]:
        _check_move(move, root)
    return plan


def _check_move(move: Any, root: Path) -> None:
    """ValueError unless ``move`` is [staging, final, message]: plain relative paths, the staging folder a
    hidden staging sibling of the final place, both inside ``root`` through real folders."""
    if not (isinstance(move, list) and len(move) == 3 and all(isinstance(part, str) for part in move)):
        raise ValueError("a move is not [staging, final, message]")
    staging_rel, final_rel, _ = move
    if not (is_plain_relative(staging_rel) and is_plain_relative(final_rel)):
        raise ValueError(f"a move names a path that is absolute or climbs out: {staging_rel!r} -> {final_rel!r}")
    staging, final = root / staging_rel, root / final_rel
    if staging.parent != final.parent or not re.fullmatch(
        rf"\.{re.escape(final.name)}\.staging-[0-9a-f]{{8}}-\d+-[0-9a-f]{{12}}", staging.name
    ):
        raise ValueError(f"{staging_rel!r} is not a staging folder of {final_rel!r}")
    check_contained(staging, root, action="publish from")
    check_contained(final, root, action="publish to")


def _only_empty_folders(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but (nested) empty folders, which publishing may replace."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    return all(not files and all(not (Path(d) / n).is_symlink() for n in dirs)
               for d, dirs, files in os.walk(folder))


def _names_journal(staging: Path, journal: Path) -> bool:
    """Whether ``staging`` is a real folder whose journal file names ``journal`` (read without following a
    link or blocking on a FIFO)."""
    if staging.is_symlink() or not staging.is_dir():
        return False
    try:
        named = read_side_file(staging / JOURNAL_NAME_FILE, 4096, follow_links=False)
    except (OSError, CorruptDatasetError):
        return False
    return named.decode("utf-8", "replace") == str(journal)


def _apply(plan: dict[str, Any], journal: Path, root: Path) -> None:
    """Do the moves of a checked journal ``plan`` (those not done yet), then remove the journal."""
    for staging_rel, final_rel, message in plan["moves"]:
        staging, final = root / staging_rel, root / final_rel
        if _names_journal(staging, journal):  # not yet moved (once moved, an overwrite left the old one there)
            publish_dir(staging, final, root=root, marker=plan["marker"], overwrite=plan["overwrite"],
                        exists_message=message)
        check_contained(final / JOURNAL_NAME_FILE, root, action="remove")
        with contextlib.suppress(OSError):
            (final / JOURNAL_NAME_FILE).unlink()
    with contextlib.suppress(FileNotFoundError):
        journal.unlink()
    fsync_dir(root)
