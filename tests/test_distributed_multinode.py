"""DistributedCollector on a real multi-node Ray cluster: three worker nodes (ray.cluster_utils' ``add_node``:
each a raylet of its own, with Ray's agents) joined to the session's local Ray, whose head holds the dataset
and the writer actor. The nodes offer no CPU, only one slot of a resource of their own, which the workers
ask for: a worker per node, and no other test's actor (Ray's take a CPU) ever lands on them. Workers land on
distinct nodes, and removing a worker's node in the middle of a collect call (object-store transport,
workers seeing another, empty datasets root) keeps every committed episode and returns exact totals."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from vcollect.distributed import DistributedCollector
from vcollect.store import EpisodeStore, load_dataset

pytestmark = pytest.mark.slow

# The resource only the nodes added here have, one slot each: the workers ask for it (and no CPU), so each
# lands on a node of its own and none on the head
NODE_RESOURCE = "multinode-test"


class PacedCartPole(gym.Wrapper):
    """CartPole whose steps take at least 0.3 ms: the collect call outlasts the node removal on any machine."""

    def step(self, action: Any) -> Any:
        time.sleep(0.0003)
        return self.env.step(action)


def paced_cartpole() -> gym.Env:
    return PacedCartPole(gym.make("CartPole-v1"))


@pytest.fixture
def worker_nodes(ray_local: Any, ray_cluster: Any) -> Iterator[list[Any]]:
    """Three nodes added to the session's Ray, one worker slot each; removed again after the test (those still
    there, gracefully: Ray learns at once that they are gone), and the fixture ends once Ray counts every one
    of them dead (a node the test killed is found dead by Ray's health checks, ~15 s later: until then Ray may
    place the next test's actors on it, and they die unstarted)."""
    ray_local.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = ray_cluster
    nodes = [cluster.add_node(num_cpus=0, resources={NODE_RESOURCE: 1}, object_store_memory=80 * 2**20)
             for _ in range(3)]
    try:
        cluster.wait_for_nodes()
        yield nodes
    finally:
        for node in nodes:
            if node in cluster.worker_nodes:
                cluster.remove_node(node, allow_graceful=True)
        added = {node.node_id for node in nodes}
        deadline = time.monotonic() + 60
        while any(n["Alive"] for n in ray_local.nodes() if n["NodeID"] in added):
            assert time.monotonic() < deadline, "Ray still counts a removed node alive after 60 s"
            time.sleep(0.05)  # polling Ray's node table: it has no call that waits for a node's death


def shard_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "test" / "nodes-v0" / "shards").glob("*.h5"))


def test_node_removed_mid_collect_keeps_committed_and_exact_totals(
    ray_cluster: Any, worker_nodes: list[Any], tmp_path: Path
) -> None:
    root, worker_root = tmp_path / "driver", tmp_path / "worker-view"
    worker_root.mkdir()
    obs = gym.make("CartPole-v1").observation_space
    EpisodeStore.create("test/nodes-v0", obs, gym.spaces.Discrete(2), root=root).close()
    started = time.monotonic()
    dc = DistributedCollector(
        paced_cartpole, None, num_workers=2, envs_per_worker=2, store="test/nodes-v0", root=root, seed=0,
        transport="object_store", max_worker_restarts=1, store_kwargs={"shard_steps": 200},
        worker_options={"num_cpus": 0, "resources": {NODE_RESOURCE: 1},
                        "runtime_env": {"env_vars": {"VCOLLECT_DATASETS_PATH": str(worker_root)}}},
    )
    try:
        started = time.monotonic() - started
        first = dc.collect(n_episode=20, random=True)
        before = [dict(node_id=i["node_id"], writer=i["writer"]) for i in dc.worker_info]
        victim = {n.node_id: n for n in worker_nodes}[before[0]["node_id"]]
        seen: list[str] = []

        def remove_when_committed() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                mine = [n for n in shard_names(root) if before[0]["writer"] in n]
                if len(mine) >= 2:  # worker 0 committed in this call (it had one shard from the first call)
                    seen.extend(mine)
                    ray_cluster.remove_node(victim, allow_graceful=False)
                    return
                time.sleep(0.02)  # polling the shards folder, not synchronisation: the call goes on regardless

        remover = threading.Thread(target=remove_when_committed)
        remover.start()
        collect_started = time.monotonic()
        stats = dc.collect(n_episode=600, random=True)
        collect_s = time.monotonic() - collect_started
        remover.join(timeout=120)
        after = [dict(node_id=i["node_id"], writer=i["writer"]) for i in dc.worker_info]
        restarts = list(dc.restarts)
    finally:
        dc.close()
    print(f"workers up in {started:.1f} s, collect with a node removed {collect_s:.1f} s")
    assert before[0]["node_id"] != before[1]["node_id"]  # one worker per node
    assert {b["node_id"] for b in before} <= {n.node_id for n in worker_nodes}
    assert restarts == [1, 0]
    assert after[0]["node_id"] not in (victim.node_id, before[1]["node_id"])  # on the spare node
    assert after[0]["writer"] != before[0]["writer"]
    names = shard_names(root)
    assert len(seen) >= 2 and set(seen) <= set(names)  # what worker 0 committed before its node went stays
    assert stats.n_collected_episodes == 600 and first.n_collected_episodes == 20
    ds = load_dataset("test/nodes-v0", root=root)
    assert ds.total_episodes == 20 + 600
    # each stored episode reported once
    assert sorted(ds.episode_lengths.tolist()[first.n_collected_episodes:]) == sorted(stats.lens.tolist())
    assert list(worker_root.iterdir()) == []
