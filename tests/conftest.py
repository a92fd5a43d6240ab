"""Shared fixtures, and the environment pytest-xdist workers run in.

`ray_local`: one small, quiet local Ray instance for the whole test session. Under pytest-xdist
(`make test` runs `pytest -n auto --dist loadfile`) that is one per worker that runs a Ray test; each test
file runs whole on one worker, so a module-scoped fixture (the docs' block runs, small datasets) is built once.
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

# Tianshou's replay buffers compile their numba kernels in every process that builds one (about 7 s of CPU
# per process: each test worker, the docs' Tianshou blocks, the DQN benchmark's subprocess); the tests
# feed them a few hundred rows, which the same kernels run as plain Python in far less time. Set before
# any test module imports Tianshou (numba reads it when imported), inherited by the processes tests start.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

# MuJoCo renders offscreen through EGL here (no display); read when mujoco is first imported, so set before
# any test module imports it, and inherited by the processes tests start.
os.environ.setdefault("MUJOCO_GL", "egl")

# pytest-xdist workers start with COLUMNS=80 and LINES=24 in their environment where the controller had
# none; the commands under test size their tables by COLUMNS, so the workers take the controller's values.
TERMINAL_SIZE_VARS = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(xdist controller) Hand each worker the controller's COLUMNS and LINES, set or not."""
    node.workerinput["terminal_size_env"] = {name: os.environ.get(name) for name in TERMINAL_SIZE_VARS}


def pytest_configure(config: pytest.Config) -> None:
    """(xdist controller) Keep the workers' order of test files; (xdist worker) set COLUMNS and LINES as the
    controller has them."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    given = getattr(config, "workerinput", {}).get("terminal_size_env")
    for name, value in (given or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """(xdist worker) Hand pytest-xdist the heaviest test files first, so none is left to run alone at the end.

    ``--dist loadfile`` hands each worker a whole file when it runs short of work, in the order collected
    (``pytest_configure`` above turns off xdist's own ordering by number of tests, which put a few-test
    file of a minute last). Files with more tests marked ``slow`` come first, then files with more tests;
    the tests of a file keep their order. A run without pytest-xdist keeps pytest's order.
    """
    if not hasattr(config, "workerinput"):
        return
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    heaviest_first = sorted(
        by_file.values(),
        key=lambda tests: (-sum(test.get_closest_marker("slow") is not None for test in tests), -len(tests)),
    )
    items[:] = [item for tests in heaviest_first for item in tests]


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
