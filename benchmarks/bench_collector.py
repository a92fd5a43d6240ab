"""pytest-benchmark suite for the collection hot path: ``pytest benchmarks/bench_collector.py``.

Each benchmark collects a fixed number of CartPole-v1 steps on 8 envs; compare the rows of one run
(the raw gymnasium loop is the baseline). ``benchmarks/compare.py`` prints the same as a ratio table.
The ``policy`` rows act with a small numpy policy (random=True calls no policy), once as a plain policy
and once as one that asks for the envs' infos (vcollect.policies.SupportsInfos): what handing infos costs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
from lean_policies import LeanPolicyWithInfos, lean_policy

import vcollect
from vcollect.store import EpisodeStore

NUM_ENVS = 8
STEPS = 8_000


def test_raw_sync_vector_env(benchmark) -> None:  # type: ignore[no-untyped-def]
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1")] * NUM_ENVS, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    envs.reset(seed=0)
    rng = np.random.default_rng(0)

    def run() -> None:
        for _ in range(STEPS // NUM_ENVS):
            envs.step(rng.integers(0, 2, size=NUM_ENVS))

    benchmark(run)
    envs.close()


@pytest.fixture(params=["dummy", "subproc"])
def collector(request: pytest.FixtureRequest) -> Iterator[vcollect.Collector]:
    kwargs = {"num_workers": 2} if request.param == "subproc" else {}
    envs = vcollect.make_vector("CartPole-v1", NUM_ENVS, backend=request.param, **kwargs)
    with vcollect.Collector(None, envs, seed=0) as c:
        c.reset()
        yield c


def test_collector(benchmark, collector: vcollect.Collector) -> None:  # type: ignore[no-untyped-def]
    stats = benchmark(lambda: collector.collect(n_step=STEPS, random=True))
    assert stats.n_collected_steps == STEPS


def test_collector_with_store(benchmark) -> None:  # type: ignore[no-untyped-def]
    envs = vcollect.make_vector("CartPole-v1", NUM_ENVS)
    with tempfile.TemporaryDirectory() as root:
        store = EpisodeStore.create("bench/cartpole-v0", envs.single_observation_space,
                                    envs.single_action_space, root=root)
        with store, vcollect.Collector(None, envs, store=store, seed=0) as c:
            c.reset()
            benchmark(lambda: c.collect(n_step=STEPS, random=True))


try:  # (the same file times a vcollect from before policies could ask for infos)
    from vcollect.policies import SupportsInfos  # noqa: F401

    HANDS_INFOS = True
except ImportError:
    HANDS_INFOS = False


@pytest.mark.parametrize("infos", [False, True], ids=["plain", "infos"])
@pytest.mark.parametrize("backend", ["dummy", "subproc", "gymnasium"])
def test_collector_policy(benchmark, backend: str, infos: bool) -> None:  # type: ignore[no-untyped-def]
    if infos and not HANDS_INFOS:
        pytest.skip("this vcollect hands no infos to policies")
    kwargs = {"num_workers": 2} if backend == "subproc" else {}
    envs = vcollect.make_vector("CartPole-v1", NUM_ENVS, backend=backend, **kwargs)
    policy = LeanPolicyWithInfos() if infos else lean_policy
    with vcollect.Collector(policy, envs, seed=0) as c:
        c.reset()
        stats = benchmark(lambda: c.collect(n_step=STEPS))
    assert stats.n_collected_steps == STEPS
