"""Shared fixtures. `ray_local`: one small, quiet local Ray instance for the whole test session."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

# Read by Ray when it starts its processes: no usage-stats prompt or upload, no log deduplication chatter.
RAY_QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_DISABLE_IMPORT_WARNING": "1",
}


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """A local Ray with 2 CPUs, started on first use (about 5 s, paid once) and shut down at the end.

    Used as it is when the session already has Ray initialised.
    """
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        yield ray
        return
    for key, value in RAY_QUIET_ENV.items():
        os.environ.setdefault(key, value)
    ray.init(
        address="local",  # always a new local cluster, never one another process on this machine started
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100 * 2**20,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
