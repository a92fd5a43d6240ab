"""Shared fixtures and scheduling.

`ray_local`: one small, quiet local Ray instance for the whole test session. Under pytest-xdist
(`make test` runs `pytest -n auto --dist loadgroup`) every test that uses Ray is put in one xdist group, so
one worker runs them all on its one local Ray while the other workers run the rest.
"""

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


# The xdist group of every test that starts or uses Ray: one worker runs them, one after the other.
RAY_GROUP = "ray"
# Modules whose every test uses Ray (some through a Ray cluster of their own, in a subprocess).
RAY_MODULES = ("test_distributed",)


def uses_ray(item: pytest.Item) -> bool:
    """Whether ``item`` uses Ray: it asks for ``ray_local``, is a ``"ray"`` case of a parametrized test, or
    lives in a Ray-only module."""
    if "ray_local" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(isinstance(value, str) and value == "ray" for value in callspec.params.values()):
        return True
    return item.path.name.startswith(RAY_MODULES)


# pytest-xdist workers start with COLUMNS=80 and LINES=24 in their environment where the controller had
# none; the commands under test size their tables by COLUMNS, so the workers take the controller's values.
TERMINAL_SIZE_VARS = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist controller) Hand each worker the controller's COLUMNS and LINES, set or not."""
    node.workerinput["terminal_size_env"] = {name: os.environ.get(name) for name in TERMINAL_SIZE_VARS}


def pytest_configure(config: pytest.Config) -> None:
    """(xdist worker) Set COLUMNS and LINES as the controller has them."""
    given = getattr(config, "workerinput", {}).get("terminal_size_env")
    for name, value in (given or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put every test that uses Ray in the xdist group ``ray`` (a no-op without ``--dist loadgroup``)."""
    for item in items:
        if uses_ray(item):
            item.add_marker(pytest.mark.xdist_group(RAY_GROUP))


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
