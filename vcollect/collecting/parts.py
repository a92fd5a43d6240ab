"""A collector's parts made from what a user passes: the vector env, the rings, the store, and the
StepContext that holds them with the policy actor, the ledger and the episode writer.

What a user may pass as ``envs`` (a vcollect VectorEnv, a gymnasium vector env, an EnvPool pool, one
gymnasium.Env, a list of env factories) becomes one VectorEnv; a ring given is checked against the envs
(or made); a store is checked against the EpisodeSink protocol and offered the envs' EnvSpec when it
accepts one.
"""

from __future__ import annotations

from typing import Any

from gymnasium.envs.registration import EnvSpec

from vcollect.buffers import VectorRingBuffer
from vcollect.buffers.ring import RingWriter
from vcollect.collecting.acting import PolicyActor
from vcollect.collecting.episode_writer import EpisodeWriter
from vcollect.collecting.ledger import TransitionLedger
from vcollect.collecting.options import CollectorSettings
from vcollect.collecting.step_context import StepContext
from vcollect.envs import VectorEnv
from vcollect.envs.base import BaseVectorEnv
from vcollect.envs.factory import as_vector_env
from vcollect.envs.info_recording import InfoRecordingEnv
from vcollect.envs.pass_through import PassThroughVectorEnv
from vcollect.monitor import EpisodeTally, as_monitors
from vcollect.policies import Policy
from vcollect.store.sink import AcceptsEnvSpec, EpisodeSink, check_sink

__all__ = [
    "DEFAULT_BUFFER_ROWS",
    "as_vector_env",
    "build_context",
    "checked_ring",
    "checked_store",
    "collector_envs",
]

DEFAULT_BUFFER_ROWS = 20_000
"""Rows of ring buffer made when none is given, split evenly between the envs."""


def collector_envs(envs: Any, *, record_infos: bool, batched_recv: bool) -> VectorEnv:
    """The vector env a collector steps: ``envs`` accepted (as_vector_env), wrapped to record infos.

    Args:
        envs: what the user passed.
        record_infos: keep each env's infos since its reset (InfoRecordingEnv).
        batched_recv: whether the collector keeps enough envs in flight for a backend that returns results
            in fixed-size batches.

    Raises:
        ValueError: infos asked of a backend that steps all envs or resets by itself, or a batch-returning
            backend given to a collector that cannot serve it.
    """
    vector_env = as_vector_env(envs)
    if record_infos:
        if vector_env.capabilities.steps_all_envs or vector_env.capabilities.autoresets:
            raise ValueError(
                f"record_infos needs a backend that steps and resets each env on request; "
                f"{type(vector_env).__name__} steps all envs at once or resets them by itself"
            )
        vector_env = InfoRecordingEnv(vector_env)
    batch = vector_env.capabilities.recv_batch_size
    if batch > 1 and not batched_recv:
        raise ValueError(
            f"{type(vector_env).__name__} returns results {batch} at a time (async mode): "
            "collect from it with AsyncCollector, or make it in sync mode (batch_size=num_envs)"
        )
    return vector_env


def checked_ring(buffer: VectorRingBuffer | None, envs: VectorEnv) -> VectorRingBuffer:
    """The given ring, checked against the envs (and given their spaces if it has none), or a new one of
    DEFAULT_BUFFER_ROWS rows.

    Raises:
        TypeError: ``buffer`` is not a VectorRingBuffer.
        ValueError: its number of rings or its spaces differ from the envs'.
    """
    num_envs, observation_space, action_space = envs.num_envs, envs.single_observation_space, envs.single_action_space
    if buffer is None:
        return VectorRingBuffer(num_envs, max(2, DEFAULT_BUFFER_ROWS // num_envs), observation_space, action_space)
    if not isinstance(buffer, VectorRingBuffer):
        raise TypeError(f"buffer must be a vcollect VectorRingBuffer, got {type(buffer).__name__}")
    if buffer.num_envs != num_envs:
        raise ValueError(
            f"buffer has {buffer.num_envs} env rings but the collector has {num_envs} envs; "
            "make the VectorRingBuffer with num_envs equal to envs.num_envs"
        )
    if not buffer.has_spaces:  # VectorRingBuffer(total_size=..., num_envs=...): the envs' spaces
        buffer.bind_spaces(observation_space, action_space)
    for what, ring_space, env_space in (
        ("observation", buffer.observation_space, observation_space),
        ("action", buffer.action_space, action_space),
    ):
        if ring_space != env_space:
            raise ValueError(
                f"buffer holds {what} space {ring_space} but the envs have {what} space {env_space}; "
                "make the VectorRingBuffer with envs.single_observation_space / single_action_space"
            )
    return buffer


def checked_store(store: EpisodeSink | None, envs: VectorEnv) -> EpisodeSink | None:
    """The store as an EpisodeSink of the envs' spaces (check_sink), offered the envs' EnvSpec where it
    accepts one (AcceptsEnvSpec), so that its dataset names its env and recover_environment() works."""
    if store is None:
        return None
    sink = check_sink(store, envs.single_observation_space, envs.single_action_space)
    spec = env_spec(envs)
    if spec is not None and isinstance(sink, AcceptsEnvSpec):
        sink.record_env_spec(spec)
    return sink


def env_spec(envs: VectorEnv) -> EnvSpec | None:
    """The EnvSpec of the envs where the backend knows it (made from a registered id)."""
    return envs.env_spec if isinstance(envs, BaseVectorEnv | PassThroughVectorEnv) else None


def build_context(
    policy: Policy | None,
    envs: Any,
    buffer: VectorRingBuffer | None,
    store: EpisodeSink | None,
    settings: CollectorSettings,
    *,
    batched_recv: bool,
) -> StepContext:
    """A collector's parts, made from what a user passed and held in the StepContext its loop is handed.

    The envs become one VectorEnv (collector_envs), the ring is checked or made (checked_ring), the store
    checked (checked_store); with a store the rings keep every episode whole, however long, and an
    EpisodeWriter queues the finished ones for it. The policy actor, the ledger and the hooks complete it.

    Args:
        policy: The policy (already wrapped: vcollect.policies.wrapping.as_policy), or None.
        envs: What the user passed as envs.
        buffer: The rings given, or None to make them.
        store: The sink given, or None.
        settings: The collector's keyword options, checked.
        batched_recv: Whether the collector keeps enough envs in flight for a backend that returns results
            in fixed-size batches.

    Returns:
        The StepContext holding the envs, rings, actor, ledger and episode writer (None without a store).

    Raises:
        TypeError: ``envs``, ``buffer`` or ``store`` is not something a collector takes.
        ValueError: ``buffer`` or ``store`` does not fit the envs, or the envs do not fit the options.
    """
    vector_env = collector_envs(envs, record_infos=settings.record_infos, batched_recv=batched_recv)
    ring = checked_ring(buffer, vector_env)
    sink = checked_store(store, vector_env)
    writer = None
    if sink is not None:
        RingWriter(ring).keep_whole_episodes()  # a stored episode is whole, however long
        infos = vector_env.episode_infos if isinstance(vector_env, InfoRecordingEnv) else None
        writer = EpisodeWriter(sink, ring, infos)
    actor = PolicyActor(
        policy, ring, vector_env.single_observation_space, vector_env.single_action_space,
        exploration_noise=settings.exploration_noise, validate=settings.validate,
    )
    context = StepContext(
        vector_env, ring, actor, TransitionLedger(vector_env.num_envs), writer,
        validate=settings.validate, check_finite=settings.check_finite,
    )
    context.on_step_hook = settings.on_step_hook
    context.on_episode_done_hook = settings.on_episode_done_hook
    if as_monitors(settings.monitor):
        context.tally = EpisodeTally(context.num_envs)
    return context
