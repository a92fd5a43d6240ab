"""Vector-env backends behind one protocol (DESIGN.md section 4)."""

from __future__ import annotations

from vcollect.envs.base import AsyncResetResult, AsyncStepResult, ResetResult, StepResult, VectorEnv
from vcollect.envs.dummy import DummyVectorEnv
from vcollect.envs.factory import BACKENDS, make_vector
from vcollect.envs.subproc import SubprocVectorEnv

__all__ = [
    "BACKENDS",
    "AsyncResetResult",
    "AsyncStepResult",
    "DummyVectorEnv",
    "ResetResult",
    "StepResult",
    "SubprocVectorEnv",
    "VectorEnv",
    "make_vector",
]
