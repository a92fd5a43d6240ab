"""A dataset id from a request, to the dataset's folder under the root, never anything outside it.

The page serves datasets that lie inside the datasets root through real folders only: an id with ``..``,
an absolute path, a malformed id, or a path through a symbolic link (a namespace or dataset folder that is
a link, a dataset.json that is one) is refused, whatever the link points to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

from vcollect.store.layout.containment import is_plain_relative
from vcollect.store.layout.dataset_info import DATASET_FILE
from vcollect.store.layout.naming import is_dataset_id

__all__ = ["Located", "locate_served"]


@dataclass(frozen=True)
class Located:
    """Where a requested dataset lies, or why it is not served.

    Attributes:
        status: OK, NOT_FOUND (no such dataset, or no id) or FORBIDDEN (outside the root, through a link).
        folder: The dataset's folder when ``status`` is OK.
        message: Why it is not served (empty when it is).
    """

    status: HTTPStatus
    folder: Path | None = None
    message: str = ""


def locate_served(root: Path, dataset_id: str) -> Located:
    """The folder of ``dataset_id`` under ``root`` if the page may serve it.

    Args:
        root: The datasets root (itself may be a link: the user's choice of where datasets live).
        dataset_id: The id taken from the request's path (percent-decoded).

    Returns:
        The folder, or the status and reason of a refusal.
    """
    if not is_plain_relative(dataset_id):
        return Located(HTTPStatus.FORBIDDEN, message=f"{dataset_id!r} is not a path inside the datasets root")
    if not is_dataset_id(dataset_id):
        return Located(HTTPStatus.NOT_FOUND, message=f"{dataset_id!r} is no dataset id (namespace/name-vN)")
    folder = root
    for part in dataset_id.split("/"):
        folder = folder / part
        if os.path.islink(folder):
            return Located(HTTPStatus.FORBIDDEN, message=f"{dataset_id!r} lies behind a symbolic link; only "
                                                         "datasets inside the root are served")
        if not folder.is_dir():
            return Located(HTTPStatus.NOT_FOUND, message=f"no dataset {dataset_id!r} under the datasets root")
    info = folder / DATASET_FILE
    if os.path.islink(info):
        return Located(HTTPStatus.FORBIDDEN, message=f"the {DATASET_FILE} of {dataset_id!r} is a symbolic link")
    if not info.is_file():
        return Located(HTTPStatus.NOT_FOUND, message=f"no dataset {dataset_id!r} under the datasets root")
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(folder)]) != real_root:
        return Located(HTTPStatus.FORBIDDEN, message=f"{dataset_id!r} lies outside the datasets root")
    return Located(HTTPStatus.OK, folder=folder)
