"""The ``requirements`` a dataset stores (pip specifiers), checked before its env is made, as Minari does."""

from __future__ import annotations

import importlib.metadata
import re
import warnings
from collections.abc import Iterable

__all__ = ["warn_unmet_requirements"]

# The name part of a PEP 508 requirement, for when ``packaging`` is not installed.
_NAME_RE = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def warn_unmet_requirements(requirements: Iterable[object], stacklevel: int = 3) -> list[str]:
    """Warn (UserWarning) for each requirement that is malformed, not installed, or installed at a version
    outside its specifier, with the pip command that fixes it; returns the warnings' messages.

    Versions are compared with ``packaging`` when it is installed (it nearly always is); without it only
    whether the package is installed is checked.
    """
    try:
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging ships with nearly every Python environment
        Requirement = None  # type: ignore[assignment,misc]  # noqa: N806
    messages: list[str] = []
    for item in requirements:
        text = str(item)
        specifier = None
        if Requirement is not None:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                messages.append(f"ignoring the malformed requirement {text!r} stored with the dataset")
                continue
            name, specifier = req.name, req.specifier
        else:
            match = _NAME_RE.match(text)
            if match is None:
                messages.append(f"ignoring the malformed requirement {text!r} stored with the dataset")
                continue
            name = match.group(1)
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            messages.append(f"package {name} is not installed; install it with `pip install \"{text}\"`")
            continue
        if specifier is not None:
            try:
                ok = specifier.contains(Version(installed), prereleases=True)
            except InvalidVersion:
                ok = True
            if not ok:
                messages.append(
                    f"installed {name} {installed} does not meet the requirement {text!r}; "
                    f"install it with `pip install \"{text}\"`"
                )
    for message in messages:
        warnings.warn(message, UserWarning, stacklevel=stacklevel)
    return messages
