"""A dataset written by a Collector names the env it came from when the envs know it (made from a registered
id), so recover_environment() works in vcollect and, after export, in minari; a spec the user gave is kept."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import vcollect
from tests.envs import CountingEnv
from vcollect import Collector, EpisodeStore, load_dataset
from vcollect.envs import DummyVectorEnv, make_vector


def collect_into(root: Path, dataset_id: str, envs: object, **create: object) -> vcollect.Dataset:
    store = EpisodeStore.create(dataset_id, envs.single_observation_space, envs.single_action_space,  # type: ignore[attr-defined]
                                root=root, **create)  # type: ignore[arg-type]
    with Collector(None, envs, store=store, seed=0, unfinished="truncate") as collector:
        collector.collect(n_step=40, random=True, reset_before_collect=True)
    store.close()
    return load_dataset(dataset_id, root=root)


@pytest.mark.parametrize("backend", ["dummy", "subproc", "gymnasium"])
def test_envs_made_from_an_id_are_recorded(backend: str, tmp_path: Path) -> None:
    data = collect_into(tmp_path, f"spec/{backend}-v0", make_vector("CartPole-v1", 2, backend))
    assert data.env_spec is not None and data.env_spec.id == "CartPole-v1"
    env = data.recover_environment()
    assert env.spec is not None and env.spec.id == "CartPole-v1"


def test_a_given_spec_is_kept_and_unknown_envs_record_none(tmp_path: Path) -> None:
    given = collect_into(tmp_path, "spec/given-v0", make_vector("CartPole-v1", 2), env_spec=gym.spec("CartPole-v0"))
    assert given.env_spec.id == "CartPole-v0"
    anonymous = collect_into(tmp_path, "spec/anon-v0", DummyVectorEnv([CountingEnv] * 2))
    assert anonymous.env_spec is None


def test_minari_recovers_the_env_after_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    minari = pytest.importorskip("minari")
    data = collect_into(tmp_path, "spec/export-v0", make_vector("CartPole-v1", 2))
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    vcollect.export_minari(data, "spec/export-v0")
    env = minari.load_dataset("spec/export-v0").recover_environment()
    assert env.spec.id == "CartPole-v1"


def test_a_sink_that_forwards_the_store_records_the_spec_too(tmp_path: Path) -> None:
    """Accepting an env spec is part of what a sink may offer (AcceptsEnvSpec), not a probe for EpisodeStore:
    the CLI's GuardedSink forwards it, so its dataset names its env like one written to the store itself."""
    from vcollect.cli.interrupts import GuardedSink, InterruptGuard
    from vcollect.store.sink import AcceptsEnvSpec

    envs = make_vector("CartPole-v1", 2)
    store = EpisodeStore.create("spec/guarded-v0", envs.single_observation_space, envs.single_action_space,
                                root=tmp_path)
    with InterruptGuard() as guard:
        sink = GuardedSink(store, guard)
        assert isinstance(sink, AcceptsEnvSpec)
        with Collector(None, envs, store=sink, seed=0) as collector:
            collector.collect(n_episode=2, random=True, reset_before_collect=True)
        sink.close()
    data = load_dataset("spec/guarded-v0", root=tmp_path)
    assert data.env_spec is not None and data.env_spec.id == "CartPole-v1"


def test_an_env_registered_with_a_callable_says_at_collect_time_what_its_dataset_lacks(tmp_path: Path) -> None:
    """gymnasium cannot write a spec whose entry point is a callable as JSON: the Collector offering it to
    its store warns once, at the user's line, naming replay and recover_environment; nothing is recorded."""
    import warnings

    from vcollect.errors import EnvSpecNotStoredWarning

    gym.register("CallableCounting-v0", entry_point=lambda: CountingEnv(5))
    try:
        envs = make_vector("CallableCounting-v0", 2)
        store = EpisodeStore.create("spec/callable-v0", envs.single_observation_space, envs.single_action_space,
                                    root=tmp_path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            collector = Collector(None, envs, store=store, seed=0)
            collector.collect(n_episode=4, random=True, reset_before_collect=True)
            collector.close()
        store.close()
    finally:
        gym.registry.pop("CallableCounting-v0")
    said = [w for w in caught if issubclass(w.category, EnvSpecNotStoredWarning)]
    assert len(said) == 1, [str(w.message) for w in caught]
    text = str(said[0].message)
    assert text.startswith("the env spec of 'CallableCounting-v0' cannot be stored with the dataset (")
    assert "vcollect verify --replay" in text and "recover_environment() raises" in text
    assert said[0].filename == __file__
    data = load_dataset("spec/callable-v0", root=tmp_path)
    assert data.env_spec is None and data.total_episodes == 4
    with pytest.raises(ValueError, match="no env_spec stored"):
        data.recover_environment()
