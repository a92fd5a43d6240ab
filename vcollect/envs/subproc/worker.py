"""The worker process of SubprocVectorEnv: builds its envs, reports their spaces, then answers commands
(see vcollect.envs.subproc.transport for the protocol) until told to close or its parent is gone."""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import pickle
import select
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector.utils import CloudpickleWrapper

from vcollect.envs.base import spaces_problem, step_values_failure
from vcollect.envs.env_attrs import AttrReply, read_attr, write_attr
from vcollect.envs.layout import FixedLayout
from vcollect.envs.subproc.transport import (
    ATTR,
    CLOSE,
    CTRL_CURRENT,
    CTRL_FAST,
    CTRL_REPLY,
    LIVENESS_POLL_S,
    NO_RESET,
    PROTOCOL,
    RENDER,
    REPLY_MESSAGE,
    REPLY_RESTARTED,
    RESET,
    SEEDED,
    STEP_RESET,
    Channel,
    InheritedFd,
    SharedRows,
    Spinner,
)

__all__ = ["WORKER_NAME", "FailureTuple", "worker_main"]

WORKER_NAME = "vcollect-env-worker-"  # + the worker index: the process name, known before main is imported

FailureTuple = tuple[int, str, str, str]  # (env id, kind, message, traceback) of a failed env call


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def worker_main(
    index: int,
    env_ids: list[int],
    env_fns: list[CloudpickleWrapper],
    cmd_reader: Any,
    reply_writer: Any,
    shared: InheritedFd,
    num_envs: int,
    num_workers: int,
    spin_s: float,
    commands: Any,
    done: Any,
    specs: Sequence[Any] = (),
) -> None:
    """The worker process: build the envs, report their spaces, map the shared rows, answer commands.

    Args:
        index: The worker's index (its control row in the shared rows).
        env_ids: The env ids of its envs.
        env_fns: Their factories.
        cmd_reader: The pipe end commands arrive on.
        reply_writer: The pipe end replies go out on.
        shared: The shared file, mapped once the parent has sent its size.
        num_envs: Envs of the whole vector env (the shared rows' length).
        num_workers: Workers of the whole vector env (their control rows).
        spin_s: The longest poll for the next command before sleeping (see Spinner).
        commands: The semaphore each command is announced on.
        done: The semaphore posted when a fast command is answered.
        specs: Gym registry entries to register where missing (ids the parent's script registered).
    """
    channel = Channel(cmd_reader.fileno(), reply_writer.fileno())
    envs: list[gym.Env] = []
    for spec in specs:  # ids the parent's script registered, for a worker that did not import it
        gym.registry.setdefault(spec.id, spec)
    try:
        try:
            for env_id, fn in zip(env_ids, env_fns):
                try:
                    envs.append(fn())
                except Exception as exc:
                    text = f"env factory raised {_describe(exc)}"
                    channel.send(pickle.dumps(("error", env_id, text, traceback.format_exc(), "env")))
                    return
                problem = spaces_problem(envs[-1])
                if problem is not None:
                    channel.send(pickle.dumps(("error", env_id, problem, "", "value")))
                    return
            first = envs[0]
            for env_id, env in zip(env_ids[1:], envs[1:]):
                if env.observation_space != first.observation_space or env.action_space != first.action_space:
                    text = f"spaces {env.observation_space}, {env.action_space} differ from env {env_ids[0]}'s"
                    channel.send(pickle.dumps(("error", env_id, text, "", "env")))
                    return
            try:
                spec = pickle.loads(pickle.dumps(first.spec))
            except Exception:
                spec = None
            report = pickle.dumps(
                ("spaces", first.observation_space, first.action_space, spec, dict(first.metadata or {}))
            )
        except Exception as exc:  # anything else while starting up is said, not left as an exit code
            text = f"worker process {index} could not start its envs: {_describe(exc)}"
            channel.send(pickle.dumps(("error", env_ids[0], text, traceback.format_exc(), "env")))
            return
        channel.send(report)
        size = pickle.loads(channel.recv())
        if not isinstance(size, int):  # closed before start-up finished
            return
        buffer = mmap.mmap(shared.fd, size)
        os.close(shared.fd)
        obs_layout = FixedLayout(first.observation_space)
        act_layout = FixedLayout(first.action_space)
        rows = SharedRows(buffer, obs_layout, act_layout, num_envs, num_workers)
        _serve(index, env_ids, envs, channel, rows, obs_layout, act_layout, spin_s, commands, done)
    except (KeyboardInterrupt, EOFError, OSError):
        pass
    finally:
        for env in envs:
            with contextlib.suppress(Exception):
                env.close()


def _serve(
    index: int,
    env_ids: list[int],
    envs: list[gym.Env],
    channel: Channel,
    rows: SharedRows,
    obs_layout: FixedLayout,
    act_layout: FixedLayout,
    spin_s: float,
    commands: Any,
    done: Any,
) -> None:
    """Answer commands until told to close (or the parent goes away).

    After each reply the worker polls its command semaphore a while (a Spinner, at most spin_s) before sleeping.
    """
    control = rows.control[index]
    obs_rows, act_rows = rows.obs, rows.act
    rewards, terminations, truncations = rows.rewards, rows.terminations, rows.truncations
    reset_mode = rows.reset_mode
    obs_flat = obs_rows[0] if obs_layout.flat else None
    obs_views = obs_layout.row_views(obs_rows, env_ids)  # local env li's row: obs_views[li]
    # a single scalar action leaf (Discrete and the like): the row's numpy scalar is what read_row gives
    act_scalar = act_rows[0] if act_layout.flat and not act_layout.shapes[0] else None
    everything = tuple(range(len(envs)))
    poller = select.poll()
    poller.register(channel.read_fd, select.POLLIN)
    spinner = Spinner(spin_s)
    announced = functools.partial(commands.acquire, False)

    def run(op: int, local: Sequence[int], payload: Any) -> tuple[list[Any], list[FailureTuple], dict, int]:
        """Step (or reset) the envs at local indices: (infos, failures, restart infos, restarts)."""
        infos: list[Any] = []
        failures: list[FailureTuple] = []
        reset_infos: dict[int, Any] = {}
        restarts = 0
        stepping = op != RESET
        for k, li in enumerate(local):
            g = env_ids[li]
            control[CTRL_CURRENT] = g
            try:
                if not stepping:
                    obs, info = envs[li].reset(seed=payload[0][k], options=payload[1])
                elif act_scalar is not None:
                    obs, reward, terminated, truncated, info = envs[li].step(act_scalar[g])
                else:
                    obs, reward, terminated, truncated, info = envs[li].step(act_layout.read_row(act_rows, g))
            except Exception as exc:
                what = "step" if stepping else "reset"
                failures.append((g, "env", f"{what} raised {exc!r}", traceback.format_exc()))
                infos.append({})
                continue
            try:
                if obs_views is not None:
                    obs_views[li][...] = obs
                elif obs_flat is not None:
                    obs_flat[g] = obs
                else:
                    obs_layout.write_row(obs_rows, g, obs)
            except Exception as exc:
                call = "step" if stepping else "reset"
                message = (
                    f"{call} returned an observation of type {type(obs).__name__} that does not fit "
                    f"{obs_layout.space}: {exc!r}"
                )
                failures.append((g, "obs", message, traceback.format_exc()))
                infos.append({})
                continue
            if stepping:
                try:
                    rewards[g] = reward
                    terminations[g] = terminated
                    truncations[g] = truncated
                except Exception:
                    bad = step_values_failure(g, (reward, terminated, truncated), traceback.format_exc())
                    failures.append((g, bad.kind, bad.message, bad.traceback_text))
                    infos.append({})
                    continue
            infos.append(info)
            # the flags as just stored (numpy's bool cast is Python's truth value), not read back from them
            if op == STEP_RESET and (terminated or truncated) and reset_mode[g] != NO_RESET:
                failure = _restart(envs[li], g, rows, obs_layout, payload, reset_infos)
                if failure is None:
                    restarts += 1
                else:
                    failures.append(failure)
        control[CTRL_CURRENT] = -1
        return infos, failures, reset_infos, restarts

    def encode(
        local: Sequence[int], infos: list[Any], failures: list[FailureTuple], reset_infos: dict
    ) -> bytes:
        """The pickled reply; an env whose info cannot be pickled becomes a failure."""
        try:
            return pickle.dumps((infos, failures, reset_infos), protocol=PROTOCOL)
        except Exception as exc:
            trace = traceback.format_exc()
            failed = {f[0] for f in failures}
            failures = failures + [
                (env_ids[li], "env", f"info is not picklable: {exc!r}", trace)
                for li in local
                if env_ids[li] not in failed
            ]
            return pickle.dumps(([{} for _ in local], failures, {}), protocol=PROTOCOL)

    while True:
        _await_command(commands, poller, spinner, announced)
        if control[CTRL_FAST]:
            control[CTRL_FAST] = 0
            infos, failures, reset_infos, restarts = run(STEP_RESET, everything, None)
            flags = REPLY_RESTARTED if restarts else 0
            if not failures and not reset_infos and not any(infos):
                control[CTRL_REPLY] = flags
                done.release()
                continue
            reply = encode(everything, infos, failures, reset_infos)
            control[CTRL_REPLY] = flags | REPLY_MESSAGE
            done.release()  # before sending: a reply bigger than the pipe is read while it is written
            channel.send(reply)
            continue
        op, local, payload = pickle.loads(channel.recv())
        if op == CLOSE:
            return
        if op == RENDER:
            channel.send(pickle.dumps([env.render() for env in envs], protocol=PROTOCOL))
            continue
        if op == ATTR:
            channel.send(_attr_reply([envs[li] for li in local], *payload))
            continue
        infos, failures, reset_infos, _ = run(op, local, payload)
        if not failures and not any(infos) and not reset_infos:
            channel.send(b"")
        else:
            channel.send(encode(local, infos, failures, reset_infos))


def _attr_reply(envs: Sequence[gym.Env], name: str, write: bool, value: Any) -> bytes:
    """The pickled replies of an ATTR command; a value that cannot be pickled becomes a failed reply."""
    replies = [write_attr(env, name, value) if write else read_attr(env, name) for env in envs]
    try:
        return pickle.dumps(replies, protocol=PROTOCOL)
    except Exception:
        safe: list[AttrReply] = []
        for reply in replies:
            try:
                pickle.dumps(reply, protocol=PROTOCOL)
                safe.append(reply)
            except Exception as exc:
                safe.append((False, f"the value of {name!r} cannot be sent from the worker process: {exc!r}"))
        return pickle.dumps(safe, protocol=PROTOCOL)


def _await_command(commands: Any, poller: select.poll, spinner: Spinner, announced: Callable[[], bool]) -> None:
    """Return once the parent has announced a command (``announced``: a non-blocking take of the command
    semaphore); EOFError once the parent is gone (its end of the command pipe hung up), checked whenever a
    wait of LIVENESS_POLL_S times out."""
    if spinner.wait_for(announced):
        return
    while not commands.acquire(True, LIVENESS_POLL_S):
        if any(events & select.POLLHUP for _, events in poller.poll(0)):
            raise EOFError("the parent process is gone")
    spinner.slept()


def _restart(
    env: gym.Env, g: int, rows: SharedRows, obs_layout: FixedLayout, options: Any, reset_infos: dict[int, Any]
) -> FailureTuple | None:
    """Reset env g (which just ended) for a step-and-reset command; a failure tuple if that failed."""
    seed = int(rows.reset_seed[g]) if rows.reset_mode[g] == SEEDED else None
    try:
        obs, info = env.reset(seed=seed, options=options)
    except Exception as exc:
        return (g, "env", f"reset raised {exc!r}", traceback.format_exc())
    try:
        obs_layout.write_row(rows.reset_obs, g, obs)
    except Exception as exc:
        message = f"reset returned an observation of type {type(obs).__name__} that does not fit {obs_layout.space}: {exc!r}"
        return (g, "obs", message, traceback.format_exc())
    rows.restarted[g] = True
    if info:
        reset_infos[g] = info
    return None
