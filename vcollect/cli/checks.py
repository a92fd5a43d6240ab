"""Checks on option values that several commands share: counts, seeds and paths. Each failed check is a
UsageError naming the option, so bad input is reported on one line with exit status 2 before any work."""

from __future__ import annotations

from pathlib import Path

from vcollect.cli.exits import UsageError

#: The largest count an option takes: the collectors hold step and episode counts in int64.
MAX_COUNT = 2**63 - 1


def check_count(option: str, value: int) -> int:
    """``value`` if it is a positive integer the collectors can count to; else UsageError naming ``option``."""
    if value < 1:
        raise UsageError(f"{option} must be a positive integer, got {value}")
    if value > MAX_COUNT:
        raise UsageError(f"{option} must be at most {MAX_COUNT} (2**63 - 1), got {value}")
    return value


def check_seed(option: str, value: int | None) -> int | None:
    """``value`` if it is None or a seed numpy accepts (an integer >= 0); else UsageError naming ``option``."""
    if value is not None and value < 0:
        raise UsageError(f"{option} must be a non-negative integer, got {value}")
    return value


def check_folder(option: str, path: str | Path) -> Path:
    """``path`` as a Path if it is a folder, or can become one (its nearest existing ancestor is a folder).

    Catches a file given where a folder is meant before a command writes anything (UsageError naming
    ``option``), instead of an OSError half way through.
    """
    folder = Path(path).expanduser()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is not a folder" if existing == folder else f"is inside {str(existing)!r}, which is not a folder"
        raise UsageError(f"{option} {str(folder)!r} {what}")
    return folder


def check_output_file(option: str, path: str | Path) -> Path:
    """``path`` as a Path if a file can be written there: its folder exists; else UsageError naming ``option``."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise UsageError(f"{option} {str(file)!r} is a folder, not a file name")
    if not file.parent.is_dir():
        raise UsageError(f"{option} {str(file)!r}: there is no folder {str(file.parent)!r} to write it in")
    return file
