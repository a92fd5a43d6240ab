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
from vcollect.errors import InfoStructureError, VCollectError
from vcollect.infos import flatten_info, nest_info, stack_rows


def stack_episode_infos(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The info dicts of one episode (the reset's, then one per step) as a nested dict of arrays.

    A key present in every dict gets T+1 rows; a key present in every step's dict but not the reset's
    gets T rows; any other key raises InfoStructureError (it cannot be aligned with the steps).
    """
    flat = [flatten_info(info, "info") for info in rows]
    keys: dict[tuple[str, ...], None] = {}
    for info in flat:
        keys.update(dict.fromkeys(info))
    out: dict[tuple[str, ...], Any] = {}
    for key in keys:
        if all(key in info for info in flat):
            values = [info[key] for info in flat]
        elif len(flat) > 1 and all(key in info for info in flat[1:]):
            values = [info[key] for info in flat[1:]]
        else:
            present = sum(key in info for info in flat)
            raise InfoStructureError(
                f"info key {'/'.join(key)!r} is in {present} of the {len(flat)} info dicts of an episode "
                "(reset and steps); recorded infos need keys present at every step (or every step but the reset)"
            )
        out[key] = stack_rows(values, f"info[{'/'.join(key)!r}]")
    return nest_info(out)


class InfoRecordingEnv:
    """A VectorEnv that passes the protocol through and keeps each env's info dicts since its last reset.

    ``Collector(record_infos=True)`` wraps its vector env in it and takes an env's infos when it
    writes that env's finished episode. It offers only what it records: the wrapped env's capabilities
    without ``step_reset`` (an episode's infos are taken after its last step, before its env restarts)
    or ``recv_any``; a backend's other attributes are not forwarded. Backends that step every env at
    once or restart envs by themselves are refused (their episodes' info dicts cannot be told apart).
    """

    def __init__(self, envs: Any) -> None:
        wrapped: EnvCapabilities = envs.capabilities
        if wrapped.steps_all_envs or wrapped.autoresets:
            raise ValueError(
                f"recording infos needs a backend that steps and resets each env on request; "
                f"{type(envs).__name__} steps all envs at once or resets them by itself"
            )
        self.capabilities = replace(wrapped, step_reset=False, recv_any=False)
        self.envs = envs
        self.num_envs: int = envs.num_envs
        self.single_observation_space = envs.single_observation_space
        self.single_action_space = envs.single_action_space
        self.observation_space = envs.observation_space
        self.action_space = envs.action_space
        self._rows: list[list[dict[str, Any]]] = [[] for _ in range(self.num_envs)]

    @property
    def closed(self) -> bool:
        """Whether the wrapped vector env is closed."""
        return bool(self.envs.closed)

    @property
    def in_flight(self) -> np.ndarray:
        """Env ids with a step or reset in flight."""
        return self.envs.in_flight  # type: ignore[no-any-return]

    def _ids(self, env_ids: Any) -> list[int]:
        return list(range(self.num_envs)) if env_ids is None else np.asarray(env_ids, dtype=np.int64).tolist()

    def _started(self, env_ids: Any, infos: Sequence[dict[str, Any]]) -> None:
        for env_id, info in zip(self._ids(env_ids), infos):
            self._rows[env_id] = [info]

    def _stepped(self, env_ids: Any, infos: Sequence[dict[str, Any]]) -> None:
        for env_id, info in zip(self._ids(env_ids), infos):
            self._rows[env_id].append(info)

    def reset(self, env_ids: Any = None, seeds: Any = None, options: dict[str, Any] | None = None) -> Any:
        """Reset, starting a new info record for each env id."""
        obs, infos = self.envs.reset(env_ids=env_ids, seeds=seeds, options=options)
        self._started(env_ids, infos)
        return obs, infos

    def step(self, actions: Any, env_ids: Any = None) -> Any:
        """Step, appending each env's info dict."""
        result = self.envs.step(actions, env_ids)
        self._stepped(env_ids, result[4])
        return result

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Dispatch steps (async half)."""
        self.envs.send(actions, env_ids)

    def recv(self, min_ready: int = 1, timeout: float | None = None) -> Any:
        """Receive finished steps, appending each env's info dict."""
        result = self.envs.recv(min_ready=min_ready, timeout=timeout)
        self._stepped(result[5], result[4])
        return result

    def reset_async(self, env_ids: Any = None, seeds: Any = None, options: dict[str, Any] | None = None) -> None:
        """Dispatch resets (async half)."""
        self.envs.reset_async(env_ids, seeds=seeds, options=options)

    def recv_reset(self, min_ready: int = 1, timeout: float | None = None) -> Any:
        """Receive finished resets, starting a new info record for each env id."""
        obs, infos, env_ids = self.envs.recv_reset(min_ready=min_ready, timeout=timeout)
        self._started(env_ids, infos)
        return obs, infos, env_ids

    def render(self) -> Any:
        """The wrapped envs' render results."""
        return self.envs.render()

    def close(self) -> None:
        """Close the wrapped vector env."""
        self.envs.close()

    def episode_infos(self, env_id: int, steps: int) -> dict[str, Any]:
        """The stacked infos of env ``env_id``'s finished episode of ``steps`` steps."""
        rows = self._rows[env_id]
        if len(rows) != steps + 1:
            raise VCollectError(
                f"record_infos saw {len(rows)} info dicts for env {env_id}'s episode of {steps} steps "
                "(expected one per reset and step); this backend resets envs by itself, so record without it"
            )
        return stack_episode_infos(rows)
