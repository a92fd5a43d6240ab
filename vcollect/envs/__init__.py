"""Vector-env backends behind one protocol (the envs/ room of docs/ARCHITECTURE.md)."""

from __future__ import annotations

from vcollect.envs.base import (
    AsyncResetResult,
    AsyncStepResult,
    ResetResult,
    StepResult,
    VectorEnv,
)
from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.dummy import DummyVectorEnv
from vcollect.envs.envpool_adapter import EnvPoolVectorEnv, is_envpool
from vcollect.envs.factory import BACKENDS, make_vector
from vcollect.envs.gymnasium_adapter import GymnasiumVectorEnv
from vcollect.envs.ray_env import RayVectorEnv
from vcollect.envs.steps import AllEnvStep, StepBlock, StepResetResult
from vcollect.envs.subproc import SubprocVectorEnv

__all__ = [
    "BACKENDS",
    "AllEnvStep",
    "AsyncResetResult",
    "AsyncStepResult",
    "DummyVectorEnv",
    "EnvCapabilities",
    "EnvPoolVectorEnv",
    "GymnasiumVectorEnv",
    "RayVectorEnv",
    "ResetResult",
    "StepBlock",
    "StepResetResult",
    "StepResult",
    "SubprocVectorEnv",
    "VectorEnv",
    "is_envpool",
    "make_vector",
]
