"""DistributedCollector on a real multi-node Ray cluster (ray.cluster_utils.Cluster: a head without CPUs
holding the dataset and the writer actor, three 1-CPU worker nodes), in a subprocess because the test
session already runs its own local Ray: workers land on distinct nodes, and removing a worker's node in the
middle of a collect call (object-store transport, workers seeing another, empty datasets root) keeps every
committed episode and returns exact totals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r"""
import json, pathlib, sys, threading, time
t0 = time.monotonic()
import gymnasium as gym
import numpy as np
import ray
from ray.cluster_utils import Cluster
from vcollect.distributed import DistributedCollector
from vcollect.store import EpisodeStore, load_dataset

root, worker_root = sys.argv[1], sys.argv[2]


class PacedCartPole(gym.Wrapper):
    # CartPole whose steps take at least 0.3 ms: the collect call outlasts the node removal on any machine

    def step(self, action):
        time.sleep(0.0003)
        return self.env.step(action)


def paced_cartpole():
    return PacedCartPole(gym.make("CartPole-v1"))


# the head without the dashboard, the autoscaler's monitor and the log monitor (nothing here reads or scales
# them, and the driver takes no worker output: log_to_driver=False)
cluster = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 0, "object_store_memory": 80 * 2**20, "include_dashboard": False, "no_monitor": True,
    "include_log_monitor": False,
})
nodes = [cluster.add_node(num_cpus=1, object_store_memory=80 * 2**20) for _ in range(3)]
ray.init(address=cluster.address, log_to_driver=False)
cluster.wait_for_nodes()
obs = gym.make("CartPole-v1").observation_space
EpisodeStore.create("test/nodes-v0", obs, gym.spaces.Discrete(2), root=root).close()
dc = DistributedCollector(
    paced_cartpole, None, num_workers=2, envs_per_worker=2, store="test/nodes-v0", root=root, seed=0,
    transport="object_store", max_worker_restarts=1, store_kwargs={"shard_steps": 200},
    worker_options={"num_cpus": 1, "runtime_env": {"env_vars": {"VCOLLECT_DATASETS_PATH": worker_root}}},
)
started = time.monotonic() - t0
first = dc.collect(n_episode=20, random=True)
before = [dict(node_id=i["node_id"], writer=i["writer"]) for i in dc.worker_info]
by_id = {n.node_id: n for n in nodes}
victim = by_id[before[0]["node_id"]]
seen = []

def remove_when_committed():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        names = [p.name for p in (pathlib.Path(root) / "test" / "nodes-v0" / "shards").glob("*.h5")]
        mine = [n for n in names if before[0]["writer"] in n]
        if len(mine) >= 2:  # worker 0 committed in this call (it had one shard from the first call)
            seen.extend(mine)
            cluster.remove_node(victim, allow_graceful=False)
            return
        time.sleep(0.02)

t = threading.Thread(target=remove_when_committed)
t.start()
t1 = time.monotonic()
stats = dc.collect(n_episode=600, random=True)
collect_s = time.monotonic() - t1
t.join(timeout=120)
after = [dict(node_id=i["node_id"], writer=i["writer"]) for i in dc.worker_info]
ds = load_dataset("test/nodes-v0", root=root)
names = sorted(p.name for p in (pathlib.Path(root) / "test" / "nodes-v0" / "shards").glob("*.h5"))
print("RESULT " + json.dumps(dict(
    before=before, after=after, victim=victim.node_id, seen=seen, names=names, restarts=dc.restarts,
    first=first.n_collected_episodes, episodes=stats.n_collected_episodes, lens=sorted(stats.lens.tolist()),
    stored=ds.total_episodes, stored_lens=sorted(ds.episode_lengths.tolist()[first.n_collected_episodes:]),
    started=started, collect_s=collect_s, worker_root_files=len(list(pathlib.Path(worker_root).iterdir())),
)))
dc.close()
ray.shutdown()
cluster.shutdown()
"""


@pytest.mark.slow
def test_node_removed_mid_collect_keeps_committed_and_exact_totals(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    worker_root = tmp_path / "worker-view"
    worker_root.mkdir()
    # Ray's processes record no metrics, report no task events and start no workers ahead of need (as the
    # session's local Ray in conftest.py): nothing here reads them, and four nodes would pay for each
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_enable_metrics_collection": "0",
           "RAY_task_events_report_interval_ms": "0", "RAY_enable_worker_prestart": "0"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "driver"), str(worker_root)],
        env=env, capture_output=True, text=True, timeout=240,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(lines[0][len("RESULT "):])
    assert r["before"][0]["node_id"] != r["before"][1]["node_id"]  # one worker per node
    assert r["victim"] == r["before"][0]["node_id"] and r["restarts"] == [1, 0]
    assert r["after"][0]["node_id"] not in (r["victim"], r["before"][1]["node_id"])  # on the spare node
    assert r["after"][0]["writer"] != r["before"][0]["writer"]
    print(f"cluster + workers up in {r['started']:.1f} s, collect with a node removed {r['collect_s']:.1f} s")
    assert len(r["seen"]) >= 2 and set(r["seen"]) <= set(r["names"])  # what worker 0 committed before its node went stays
    assert r["episodes"] == 600 and r["first"] == 20
    assert r["stored"] == 20 + 600 and r["stored_lens"] == r["lens"]  # each stored episode reported once
    assert r["worker_root_files"] == 0
