"""Shared fixtures, and the environment pytest-xdist workers run in.

`ray_local`: one small, quiet local Ray, started by the first test that asks for it and shut down once the
worker's next test file asks for none (the files that ask for it run one after another, see
``pytest_collection_modifyitems``), so a worker pays for one Ray start and no idle Ray while it runs the
rest. Under pytest-xdist (`make test` runs `pytest -n auto --dist loadfile`) each test file runs whole on
one worker, so a module-scoped fixture (the docs' block runs, small datasets) is built once, and the files
that use Ray all run on one worker (``pytest_xdist_make_scheduler``), so the whole run starts one Ray.
`ray_cluster`: that Ray's ``ray.cluster_utils.Cluster``, for a test that joins nodes to it (the multi-node
test) rather than starting a cluster of its own.

`default_datasets_roots` and `ray_temp_dir` (every test): the default datasets roots and Ray's temporary
folder point into this session's own folders, so no test writes into the user's roots or /tmp/ray.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import settings

# Read by Ray when it starts its processes: no usage-stats prompt or upload, no log deduplication chatter; no
# metrics recorded and no task events reported (the state API and dashboard that read them are unused
# here), and no idle workers started ahead of need (an actor takes one worker process either way).
RAY_QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_DISABLE_IMPORT_WARNING": "1",
    "RAY_enable_metrics_collection": "0",
    "RAY_task_events_report_interval_ms": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
}

# Tianshou's replay buffers compile their numba kernels in every process that builds one (about 7 s of CPU
# per process: each test worker, the docs' Tianshou blocks, the DQN benchmark's subprocess); the tests
# feed them a few hundred rows, which the same kernels run as plain Python in far less time. Set before
# any test module imports Tianshou (numba reads it when imported), inherited by the processes tests start.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

# MuJoCo renders offscreen through EGL here (no display); read when mujoco is first imported, so set before
# any test module imports it, and inherited by the processes tests start.
os.environ.setdefault("MUJOCO_GL", "egl")

# Property tests are judged by what they assert, not by how long one example takes: on a loaded machine an
# example can take several times Hypothesis's default 200 ms deadline, which fails the test as flaky without
# any assertion failing. No deadline for every test (a test's own settings may still set one).
settings.register_profile("vcollect-tests", deadline=None)
settings.load_profile("vcollect-tests")

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
    """Note the files that use `ray_local`; (xdist worker) hand pytest-xdist the heaviest files first, the
    files that use Ray one after another.

    ``--dist loadfile`` hands each worker a whole file when it runs short of work, in the order collected
    (``pytest_configure`` above turns off xdist's own ordering by number of tests, which put a few-test
    file of a minute last). Files with more tests marked ``slow`` come first, then files with more tests;
    the files that use Ray all take the place of the first of them, so they run in one stretch on one Ray
    (under ``--dist loadfile`` all on one worker: ``pytest_xdist_make_scheduler``). The tests of a file keep
    their order. A run without pytest-xdist keeps pytest's order.
    """
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(file_of(item), []).append(item)
    RAY_FILES.update(name for name, tests in by_file.items()
                     if any("ray_local" in test.fixturenames for test in tests))
    if not hasattr(config, "workerinput"):
        return
    heaviest_first = sorted(
        by_file,
        key=lambda name: (-sum(test.get_closest_marker("slow") is not None for test in by_file[name]),
                          -len(by_file[name])),
    )
    first_ray = next((i for i, name in enumerate(heaviest_first) if name in RAY_FILES), len(heaviest_first))
    order = [name for name in heaviest_first[:first_ray] if name not in RAY_FILES]
    order += [name for name in heaviest_first if name in RAY_FILES]
    order += [name for name in heaviest_first[first_ray:] if name not in RAY_FILES]
    items[:] = [item for name in order for item in by_file[name]]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """(xdist controller) Under ``--dist loadfile``: each test file whole on one worker, except that the files
    naming `ray_local` (``uses_ray_local``) are one unit of work, so one worker runs them all on one Ray.
    Any other ``--dist``: pytest-xdist's own scheduler."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayFilesAsOneScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            name = nodeid.split("::", 1)[0]
            return RAY_UNIT if uses_ray_local(config.rootpath / name) else name

    return RayFilesAsOneScheduling(config, log)


@functools.cache
def uses_ray_local(path: Path) -> bool:
    """Whether the test file at ``path`` names the `ray_local` fixture (the controller does not collect)."""
    return path.suffix == ".py" and path.is_file() and "ray_local" in path.read_text(encoding="utf-8")


def file_of(item: pytest.Item) -> str:
    """The test file of ``item``, as its node id names it."""
    return item.nodeid.split("::", 1)[0]


# The test files with a test that asks for `ray_local` (filled at collection).
RAY_FILES: set[str] = set()

# The one unit of work pytest-xdist's controller makes of the files that name `ray_local`.
RAY_UNIT = "files using ray_local"


class LocalRay:
    """The local Ray this session starts for `ray_local`: started on demand, shut down between uses."""

    def __init__(self) -> None:
        self.cluster: Any = None  # the one-node cluster started here, while it runs

    def up(self) -> Any:
        """Ray, initialised: a one-node local cluster with 2 CPUs started here (about 5 s of CPU) unless one
        is running.

        The node is what ``ray.init(include_dashboard=False)`` starts, less the processes nothing here uses:
        no autoscaler monitor (nothing scales a local node) and no log monitor (workers' output is not sent
        to the driver), which together cost ~1.5 s of CPU at the start and ~1 s a minute while Ray runs.
        """
        ray = pytest.importorskip("ray")
        if ray.is_initialized():
            return ray
        for key, value in RAY_QUIET_ENV.items():
            os.environ.setdefault(key, value)
        from ray.cluster_utils import Cluster

        # Cluster notes its address as the machine's default for a plain ray.init(); this one is the
        # session's own, so nothing else is pointed at it (create=True: a Ray release without that private
        # function still starts, only noting its address).
        with mock.patch("ray._private.utils.write_ray_address", create=True):
            self.cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 2,
                "include_dashboard": False,
                "no_monitor": True,
                "include_log_monitor": False,
                "object_store_memory": 100 * 2**20,
            })
        ray.init(address=self.cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        return ray

    def down(self) -> None:
        """Shut down the Ray started here, if it runs (a Ray started elsewhere is left as it is)."""
        if self.cluster is not None:
            import ray

            ray.shutdown()
            self.cluster.shutdown()
            self.cluster = None


LOCAL_RAY = LocalRay()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Once a test and the fixtures it ends are torn down: shut down the Ray started for `ray_local` when
    the next test's file uses none (pytest-xdist names the next test a worker runs; none at its end)."""
    yield
    if nextitem is None or file_of(nextitem) not in RAY_FILES:
        LOCAL_RAY.down()


@pytest.fixture(scope="session", autouse=True)
def default_datasets_roots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The default datasets roots of every test and of every process it starts (``$VCOLLECT_DATASETS_PATH``,
    ``$MINARI_DATASETS_PATH``): folders of this session's, so a test that names no root writes there, never
    into the user's own (~/.vcollect/datasets, ~/.minari/datasets). A test may still set either itself."""
    roots = tmp_path_factory.mktemp("default-roots")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VCOLLECT_DATASETS_PATH", str(roots / "vcollect"))
        patch.setenv("MINARI_DATASETS_PATH", str(roots / "minari"))
        yield roots


@pytest.fixture(scope="session", autouse=True)
def ray_temp_dir() -> Iterator[Path]:
    """Where every Ray the tests start keeps its sessions (``$RAY_TMPDIR``: the session's local Ray, the docs'
    blocks', the multi-node test's cluster): a folder of this test session's, removed at its end, so the
    runs leave no session folders in /tmp/ray (a few MB each) and no `session_latest` that a plain
    ``ray.init(address="auto")`` elsewhere on the machine would find. A short path: Ray's socket paths under
    it must stay within the 107 characters a Unix socket's path may have."""
    folder = Path(tempfile.mkdtemp(prefix="vcollect-ray-"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_TMPDIR", str(folder))
        yield folder
    LOCAL_RAY.down()  # if the session's Ray still runs (the last test used it), before its folder goes
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def ray_local() -> Any:
    """A local Ray with 2 CPUs: the one running (started for an earlier test of this stretch of Ray files,
    or by the session itself), else a new one, started here."""
    return LOCAL_RAY.up()


@pytest.fixture
def ray_cluster(ray_local: Any) -> Any:
    """The ``ray.cluster_utils.Cluster`` of `ray_local`'s Ray, for a test that adds nodes to it (and removes
    them again): nodes joined to a running head cost a raylet and its agents each, not another cluster."""
    if LOCAL_RAY.cluster is None:
        pytest.fail("the session's Ray was started outside tests/conftest.py: it has no Cluster to add nodes to")
    return LOCAL_RAY.cluster
