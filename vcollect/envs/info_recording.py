"""Keep each env's info dicts since its last reset, so finished episodes can be stored with their infos.

``Collector(record_infos=True)`` wraps its vector env in :class:`InfoRecordingEnv`; when an episode
ends, :meth:`InfoRecordingEnv.episode_infos` stacks that env's dicts into a nested dict of arrays
(T+1 rows for keys the reset also returned, T rows for step-only keys), the layout the store writes
under ``infos/``. The structure is fixed by the first episode the store accepts; a later mismatch is
an InfoStructureError naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from vcollect.envs.capabilities import EnvCapabilities
from vcollect.envs.pass_through import PassThroughVectorEnv
from vcollect.errors import InfoStructureError, VCollectError
from vcollect.infos import flatten_info, nest_info, stack_rows


def stack_episode_infos(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The info dicts of one episode (the reset's, then one per step) as a nested dict of arrays, T+1 rows
    per key. As for Minari's DataCollector, the reset's info fixes the structure: a step whose info lacks
    one of its keys or has another raises InfoStructureError naming the key and the step."""
    flat = [flatten_info(info, "info") for info in rows]
    keys = tuple(flat[0])
    for t, info in enumerate(flat[1:], start=1):
        if tuple(info) != keys and set(info) != set(keys):
            missing = [k for k in keys if k not in info]
            new = [k for k in info if k not in set(keys)]
            key = "/".join((missing or new)[0])
            raise InfoStructureError(
                f"info key {key!r} {'is missing' if missing else 'is new'} at step {t}: recorded infos keep the "
                f"structure of the reset's info (keys {['/'.join(k) for k in keys]}), as Minari's DataCollector "
                "does; make the env return the same info keys at reset and every step"
            )
    out = {key: stack_rows([info[key] for info in flat], f"info[{'/'.join(key)!r}]") for key in keys}
    return nest_info(out)


class InfoRecordingEnv(PassThroughVectorEnv):
    """A VectorEnv that passes the protocol through and keeps each env's info dicts since its last reset.

    ``Collector(record_infos=True)`` wraps its vector env in it and takes an env's infos when it
    writes that env's finished episode. It offers only what it records: the wrapped env's capabilities
    without ``step_reset`` (an episode's infos are taken after its last step, before its env restarts)
    or ``recv_any``; a backend's other attributes are not forwarded. Backends that step every env at
    once or restart envs by themselves are refused (their episodes' info dicts cannot be told apart).

    Args:
        envs: The wrapped vcollect VectorEnv.

    Raises:
        ValueError: ``envs`` steps every env at once or resets envs by itself.
    """

    def __init__(self, envs: Any) -> None:
        wrapped: EnvCapabilities = envs.capabilities
        if wrapped.steps_all_envs or wrapped.autoresets:
            raise ValueError(
                f"recording infos needs a backend that steps and resets each env on request; "
                f"{type(envs).__name__} steps all envs at once or resets them by itself"
            )
        super().__init__(envs, replace(wrapped, step_reset=False, split_step_reset=False, recv_any=False))
        self._rows: list[list[dict[str, Any]]] = [[] for _ in range(self.num_envs)]

    def on_reset(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        """Start a new info record for each env id."""
        for env_id, info in zip(env_ids.tolist(), infos):
            self._rows[env_id] = [info]

    def on_step(self, env_ids: np.ndarray, infos: Sequence[dict[str, Any]]) -> None:
        """Append each env's info dict."""
        for env_id, info in zip(env_ids.tolist(), infos):
            self._rows[env_id].append(info)

    def episode_infos(self, env_id: int, steps: int) -> dict[str, Any]:
        """The stacked infos of env ``env_id``'s finished episode of ``steps`` steps."""
        rows = self._rows[env_id]
        if len(rows) != steps + 1:
            raise VCollectError(
                f"record_infos saw {len(rows)} info dicts for env {env_id}'s episode of {steps} steps "
                "(expected one per reset and step); this backend resets envs by itself, so record without it"
            )
        return stack_episode_infos(rows)
