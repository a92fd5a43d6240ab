"""DistributedCollector when the driver dies mid-call: a separate driver process attached to the session's
real local Ray (ray.init(num_cpus=2)) is SIGKILLed while its workers are writing; its worker actors must
stop (Ray ends the actors a dead job owned) and every shard they committed must load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from vcollect.store import EpisodeStore, load_dataset
from vcollect.store.layout.dataset_info import SHARDS_DIR

CARTPOLE_OBS = gym.spaces.Box(
    np.array([-4.8, -np.inf, -0.41887903, -np.inf], np.float32),
    np.array([4.8, np.inf, 0.41887903, np.inf], np.float32),
    dtype=np.float32,
)

DRIVER = """
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
from vcollect.distributed import DistributedCollector
dc = DistributedCollector("CartPole-v1", None, num_workers=2, envs_per_worker=2, store="test/orphan-v0",
                          root=sys.argv[2], seed=0, store_kwargs={"shard_steps": 50}, transport=sys.argv[4])
with open(sys.argv[3], "w") as f:
    pids = [info["pid"] for info in dc.worker_info]
    if dc.writer_actor is not None:
        pids.append(ray.get(dc.writer_actor.node_and_pid.remote())[1])
    json.dump(pids, f)
dc.collect(n_step=10**9, random=True)  # runs until killed
"""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition: Any, timeout: float, what: str) -> None:
    """Poll ``condition`` (bounded): the events waited for happen in other processes."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkilled_driver_takes_its_workers_down(ray_local: Any, tmp_path: Path) -> None:
    # the object-store transport: the driver owns the worker actors and the writer actor, all must end
    # (the shared_fs transport differs only in having no writer actor; dropped from the suite for time)
    transport = "object_store"
    EpisodeStore.create("test/orphan-v0", CARTPOLE_OBS, gym.spaces.Discrete(2), root=tmp_path).close()
    shards = tmp_path / "test" / "orphan-v0" / SHARDS_DIR
    pids_file = tmp_path / "pids.json"
    address = ray_local.get_runtime_context().gcs_address
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, address, str(tmp_path), str(pids_file), transport],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: pids_file.exists() and pids_file.stat().st_size > 0 or driver.poll() is not None, 90,
                 "the driver's workers starting")
        assert driver.poll() is None, driver.stderr.read().decode()[-2000:] if driver.stderr else ""
        worker_pids = json.loads(pids_file.read_text())  # and the writer actor's, with the object store
        assert len(worker_pids) == (2 if transport == "shared_fs" else 3)
        wait_for(lambda: len(list(shards.glob("*.h5"))) >= 2, 60, "two shards committed")  # mid-call
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        wait_for(lambda: not any(pid_alive(p) for p in worker_pids), 60, "the workers of the killed driver exiting")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
    committed = sorted(shards.glob("*.h5"))
    ds = load_dataset("test/orphan-v0", root=tmp_path)  # every committed shard loads, whole
    assert ds.total_episodes > 0 and len(committed) >= 2
    assert sum(1 for _ in ds) == ds.total_episodes
    assert sorted(shards.glob("*.h5")) == committed  # nothing writes into the dataset any more
