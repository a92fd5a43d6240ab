"""The one check every rename and deletion of the store passes: the path lies inside the datasets root.

A datasets root may itself be a symbolic link (it is the user's choice of where datasets live), but below it
the store only renames or deletes through real folders: a namespace folder that is a link, a ``..`` in a
name, or an absolute path would let a rename or a deletion reach files outside the root. The last component
may be a link: the store then renames or removes the link itself, never what it points to.
"""

from __future__ import annotations

import os
from pathlib import Path

from vcollect.errors import UnsafePathError

__all__ = ["check_contained", "is_plain_relative"]


def is_plain_relative(name: str) -> bool:
    """Whether ``name`` is a relative path of plain components: not absolute, no ``..``, ``.`` or empty part,
    no backslash or NUL (what a journal or a dataset id may name below a root)."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def check_contained(path: Path | str, root: Path | str, *, action: str) -> Path:
    """Return ``path`` once it is known to lie strictly inside ``root`` with no symbolic link between them.

    Args:
        path: The file or folder about to be renamed or deleted (absolute, or relative to the working
            directory).
        root: The datasets root (or Minari's datasets root) the operation belongs to.
        action: What is about to happen, for the message (e.g. ``"delete"``, ``"publish to"``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        UnsafePathError: ``path`` is the root itself or lies outside it, holds a ``..`` component, or a folder
            between the root and ``path`` is a symbolic link. Nothing is changed.
    """
    path = Path(path)
    root_abs = Path(os.path.abspath(root))
    if ".." in path.parts:
        raise UnsafePathError(f"refusing to {action} {str(path)!r}: the path holds '..'")
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(root_abs)
    except ValueError:
        raise UnsafePathError(
            f"refusing to {action} {str(path)!r}: it lies outside the datasets root {str(root_abs)!r}"
        ) from None
    if not relative.parts:
        raise UnsafePathError(f"refusing to {action} the datasets root {str(root_abs)!r} itself")
    folder = root_abs
    for part in relative.parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise UnsafePathError(
                f"refusing to {action} {str(path)!r}: {str(folder)!r} is a symbolic link, and going through it "
                "would change files outside the datasets root (replace the link by a real folder)"
            )
    return path
