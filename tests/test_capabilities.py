"""EnvCapabilities: what each backend declares, the flags derived from it, what the dataclass refuses, and
InfoRecordingEnv's narrowed declaration."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from tests import test_envs
from tests.envs import CountingEnv
from tests.test_envs import BACKENDS, make
from vcollect.envs import EnvCapabilities, GymnasiumVectorEnv, RayVectorEnv, VectorEnv
from vcollect.envs.base import BaseVectorEnv
from vcollect.envs.info_recording import InfoRecordingEnv

closing = test_envs.closing  # the fixture closing the vector envs a test made


def assert_declares(envs: Any, expected: EnvCapabilities) -> None:
    """envs declares exactly ``expected`` (one place: no single flag attributes beside it); it has
    ``step_reset``/``recv_any`` exactly where it declares them (an all-env backend may inherit a
    ``step_reset`` it cannot offer to the collectors)."""
    assert envs.capabilities == expected
    assert isinstance(envs, VectorEnv)
    for flag in ("steps_all_envs", "autoresets", "seeded_resets", "steps_in_blocks", "recv_batch_size",
                 "hands_over_obs"):
        assert not hasattr(envs, flag), flag
    if not expected.steps_all_envs:
        assert callable(getattr(envs, "step_reset", None)) == expected.step_reset
    assert callable(getattr(envs, "recv_any", None)) == expected.recv_any


@pytest.mark.parametrize("backend", BACKENDS)
def test_process_backends_declare_subset_steps_with_seeded_step_resets(closing, backend):
    envs = make(closing, backend, [CountingEnv] * 2)
    # the subprocess backend also splits its step_reset of every env in two where a CPU is free beside its
    # workers (send_step_reset/recv_step_reset; test_subproc_declares_split_steps_where_a_cpu_is_free)
    split = backend == "subproc" and len(os.sched_getaffinity(0)) > envs.num_workers
    assert_declares(envs, EnvCapabilities(step_reset=True, split_step_reset=split))
    assert envs.capabilities.loop == "subset"


def test_ray_backend_declares_subset_steps_with_seeded_step_resets():
    # a class attribute: read without starting Ray
    assert RayVectorEnv.capabilities == EnvCapabilities(step_reset=True)
    assert callable(RayVectorEnv.step_reset) and not hasattr(RayVectorEnv, "recv_any")


def test_a_backend_without_capabilities_is_refused():
    class Undeclared(BaseVectorEnv):
        pass

    with pytest.raises(TypeError, match="Undeclared declares no capabilities"):
        Undeclared(2, gym.spaces.Discrete(2), gym.spaces.Discrete(2))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"recv_batch_size": 0}, "recv_batch_size must be >= 1"),
        ({"steps_in_blocks": True, "steps_all_envs": True}, "steps_in_blocks needs"),
        ({"steps_in_blocks": True, "autoresets": True}, "steps_in_blocks needs"),
        ({"step_reset": True, "steps_all_envs": True}, "cannot offer it"),
        ({"hands_over_obs": True, "steps_all_envs": True, "autoresets": True}, "needs steps_in_blocks"),
        ({"split_step_reset": True}, "split_step_reset splits a step_reset in two: it needs step_reset"),
    ],
)
def test_capabilities_refuse_contradictions(fields, message):
    with pytest.raises(ValueError, match=message):
        EnvCapabilities(**fields)


def test_capabilities_are_frozen_and_name_their_loop():
    caps = EnvCapabilities()
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.step_reset = True  # type: ignore[misc]
    assert caps.loop == "subset"
    assert EnvCapabilities(steps_all_envs=True).loop == "all_envs"
    assert EnvCapabilities(steps_all_envs=True, autoresets=True, steps_in_blocks=True).loop == "blocks"


@pytest.mark.parametrize("backend", BACKENDS)
def test_info_recording_declares_what_it_records_and_forwards_nothing_else(closing, backend):
    inner = make(closing, backend, [CountingEnv] * 2)
    recording = InfoRecordingEnv(inner)
    # the wrapped env's capabilities less step_reset (infos are taken before a restart), its split, and recv_any
    expected = dataclasses.replace(inner.capabilities, step_reset=False, split_step_reset=False, recv_any=False)
    assert_declares(recording, expected)
    with pytest.raises(AttributeError):
        recording.metadata  # noqa: B018 - a backend extra: not forwarded
    assert recording.reset(seeds=3)[1] == [{"seed": 3}, {"seed": 4}]  # the protocol still goes through
    assert recording.step(np.zeros(2, np.int64))[4] == [{"t": 1}, {"t": 1}]


def test_info_recording_refuses_backends_that_restart_or_step_all_envs_by_themselves(closing):
    envs = GymnasiumVectorEnv.from_env_fns([CountingEnv] * 2)  # DISABLED, but steps every env at once
    closing.append(envs)
    with pytest.raises(ValueError, match="steps all envs at once or resets them by itself"):
        InfoRecordingEnv(envs)
