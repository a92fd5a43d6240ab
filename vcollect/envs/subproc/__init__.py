"""The subprocess backend: SubprocVectorEnv, its worker pool, the worker processes and their protocol.

vector_env.py is what the collectors see; pool.py holds the processes and waits for their replies;
launch.py starts and stops them; worker.py is what runs inside one; transport.py is the protocol between
the two sides (pipes, shared-memory rows, semaphores, command codes).
"""

from __future__ import annotations

from vcollect.envs.subproc.vector_env import SubprocVectorEnv

__all__ = ["SubprocVectorEnv"]
