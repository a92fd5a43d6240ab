"""The worker process of SubprocVectorEnv: builds its envs, reports their spaces, then answers commands
(see vcollect.envs.subproc_transport for the protocol) until told to close or its parent is gone."""

from __future__ import annotations

import contextlib
import functools
import mmap
import multiprocessing as mp
import multiprocessing.spawn
import os
import pickle
import select
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

import gymnasium as gym
from cloudpickle import Pickler as CloudPickler
from gymnasium.vector.utils import CloudpickleWrapper

from vcollect.envs.env_attrs import AttrReply, read_attr, write_attr
from vcollect.envs.layout import FixedLayout
from vcollect.envs.subproc_transport import (
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
    spin_acquire,
)

__all__ = [
    "NO_MAIN_GUARD_EXIT",
    "FailureTuple",
    "WorkerHandle",
    "exit_if_importing_main",
    "factories_need_main",
    "mp_context",
    "start_worker",
    "stop_workers",
    "worker_main",
]

CLOSE_JOIN_S = 2.0  # how long a closing worker gets to exit before it is terminated (then killed)
WORKER_NAME = "vcollect-env-worker-"  # + the worker index: the process name, known before main is imported
# The exit code of a worker that found itself building a SubprocVectorEnv while importing the main module
# at start-up (a script without an ``if __name__ == "__main__":`` guard): the parent explains it.
NO_MAIN_GUARD_EXIT = 86


FailureTuple = tuple[int, str, str, str]  # (env id, kind, message, traceback) of a failed env call


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def exit_if_importing_main() -> None:
    """Exit quietly (code NO_MAIN_GUARD_EXIT) when this process is a vcollect worker importing the main
    module at start-up, i.e. a script without a ``__main__`` guard is building a SubprocVectorEnv again.

    The standard library would raise its "bootstrapping phase" RuntimeError (about 100 lines of traceback
    on stderr); the parent names the cause in one line instead. Same test as multiprocessing's own
    (``_inheriting``), limited to vcollect's workers by the process name, which is set before main is
    imported; other processes get the standard library's error.
    """
    process = mp.current_process()
    if getattr(process, "_inheriting", False) and process.name.startswith(WORKER_NAME):
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(NO_MAIN_GUARD_EXIT)


# -- does a worker need the main module? ---------------------------------------------------------------
# A process started by spawn or forkserver runs the parent's main script again (as __mp_main__) before it
# unpickles its target, so that functions and classes pickled by reference to __main__ can be found
# (multiprocessing's "safe importing of main module"). The env factories go through cloudpickle, which
# pickles what __main__ defines by value, so the worker only needs the script when the factories use it.


def _is_gym_make(func: Any) -> bool:
    return func is gym.make or getattr(func, "__wrapped__", None) is gym.make


def _gym_id(obj: Any) -> str | None:
    """The env id of ``functools.partial(gym.make, id, ...)``, else None."""
    if isinstance(obj, functools.partial) and _is_gym_make(obj.func):
        env_id = obj.args[0] if obj.args else obj.keywords.get("id")
        if isinstance(env_id, str):
            return env_id
    return None


def _registered_spec(env_id: str) -> Any:
    """The parent's registry entry for a ``gym.make`` id (``"module:Name-v0"`` too), or None."""
    name = env_id.split(":", 1)[1] if ":" in env_id else env_id
    try:
        return gym.spec(name)
    except Exception:
        return None


class _MainFinder(CloudPickler):
    """Pickles like cloudpickle into a sink, noting whether anything defined in ``__main__`` is met and
    collecting the registry entries of the gym.make ids met (which the worker registers if it lacks them)."""

    def __init__(self) -> None:
        super().__init__(_Sink(), protocol=pickle.HIGHEST_PROTOCOL)
        self.uses_main = False
        self.specs: dict[str, Any] = {}

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)):
            module = getattr(obj, "__module__", None)
        else:
            module = getattr(type(obj), "__module__", None)
        if module in ("__main__", "__mp_main__"):
            self.uses_main = True
        env_id = _gym_id(obj)
        if env_id is not None and env_id not in self.specs:
            self.specs[env_id] = _registered_spec(env_id)
        return super().reducer_override(obj)


class _Sink:
    def write(self, data: Any) -> int:
        return len(data)


def factories_need_main(env_fns: Sequence[Callable[[], Any]]) -> tuple[bool, list[Any]]:
    """(whether the workers must import the main module, the gym registry entries to send them: the
    workers register those they lack, so an id the script registers under its ``__main__`` guard works).

    The main module is needed when a factory (a lambda or function, a class, an instance's class, a
    closure's contents, a partial's arguments, ...) is defined in ``__main__``, when a ``gym.make`` id
    is registered with an entry point in ``__main__``, or when an id is not registered here at all.
    Ids registered here by other modules (``gym.register_envs(ale_py)`` in the script, say) are sent
    along and registered in the worker, which then does not need the script for them.
    """
    main = sys.modules.get("__main__")
    if main is None or (getattr(main, "__file__", None) is None and getattr(main, "__spec__", None) is None):
        return False, []  # nothing to import (an interactive session, python -c)
    finder = _MainFinder()
    try:
        finder.dump(list(env_fns))
    except Exception:
        return True, []  # the real pickling will report it; do not guess
    specs = [spec for spec in finder.specs.values() if spec is not None and _picklable(spec)]
    # an id not registered here, or not sendable, is left to the script; but "module:Name-v0" is
    # registered by gym.make itself, importing the module
    unknown = [env_id for env_id, spec in finder.specs.items() if spec is None and ":" not in env_id]
    if finder.uses_main or unknown or len(specs) < sum(spec is not None for spec in finder.specs.values()):
        return True, specs
    for spec in specs:
        entry = spec.entry_point
        if isinstance(entry, str) and entry.split(":", 1)[0] in ("__main__", "__mp_main__"):
            return True, specs
    spec_finder = _MainFinder()
    try:
        spec_finder.dump(specs)  # a callable entry point, or kwargs, from __main__
    except Exception:
        return True, specs
    return spec_finder.uses_main, specs


def _picklable(obj: Any) -> bool:
    try:
        pickle.dumps(obj)
    except Exception:
        return False
    return True


_preparation = threading.local()  # .skip_main: leave the main module out of the processes started here
_preparation_lock = threading.Lock()


def _install_preparation_filter() -> bool:
    """Wrap ``multiprocessing.spawn.get_preparation_data`` (once) so that processes started by this thread
    while ``_preparation.skip_main`` is set are not told to import the main module; False where that
    function is missing (then workers import main as usual)."""
    with _preparation_lock:
        current = getattr(multiprocessing.spawn, "get_preparation_data", None)
        if current is None:
            return False
        if getattr(current, "_vcollect_filter", False):
            return True

        @functools.wraps(current)
        def get_preparation_data(name: str) -> dict[str, Any]:
            data = current(name)
            if getattr(_preparation, "skip_main", False):
                data.pop("init_main_from_name", None)
                data.pop("init_main_from_path", None)
            return data

        get_preparation_data._vcollect_filter = True  # type: ignore[attr-defined]
        multiprocessing.spawn.get_preparation_data = get_preparation_data
        return True


@contextlib.contextmanager
def _without_main(skip: bool) -> Any:
    if not skip or not _install_preparation_filter():
        yield
        return
    _preparation.skip_main = True
    try:
        yield
    finally:
        _preparation.skip_main = False


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
    channel = Channel(cmd_reader.fileno(), reply_writer.fileno())
    envs: list[gym.Env] = []
    for spec in specs:  # ids the parent's script registered, for a worker that did not import it
        gym.registry.setdefault(spec.id, spec)
    try:
        for env_id, fn in zip(env_ids, env_fns):
            try:
                envs.append(fn())
            except Exception as exc:
                message = ("error", env_id, f"env factory raised {_describe(exc)}", traceback.format_exc())
                channel.send(pickle.dumps(message))
                return
        first = envs[0]
        for env_id, env in zip(env_ids[1:], envs[1:]):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                text = f"spaces {env.observation_space}, {env.action_space} differ from env {env_ids[0]}'s"
                channel.send(pickle.dumps(("error", env_id, text, "")))
                return
        try:
            spec = pickle.loads(pickle.dumps(first.spec))
        except Exception:
            spec = None
        channel.send(
            pickle.dumps(("spaces", first.observation_space, first.action_space, spec, dict(first.metadata)))
        )
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

    After each reply the worker polls its command semaphore for up to spin_s seconds before sleeping.
    """
    control = rows.control[index]
    obs_rows, act_rows = rows.obs, rows.act
    rewards, terminations, truncations = rows.rewards, rows.terminations, rows.truncations
    reset_mode = rows.reset_mode
    obs_flat = obs_rows[0] if obs_layout.flat else None
    # a single scalar action leaf (Discrete and the like): the row's numpy scalar is what read_row gives
    act_scalar = act_rows[0] if act_layout.flat and not act_layout.shapes[0] else None
    everything = tuple(range(len(envs)))
    poller = select.poll()
    poller.register(channel.read_fd, select.POLLIN)

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
                if obs_flat is not None:
                    obs_flat[g] = obs
                else:
                    obs_layout.write_row(obs_rows, g, obs)
            except Exception as exc:
                message = f"observation does not fit {obs_layout.space}: {exc!r}"
                failures.append((g, "obs", message, traceback.format_exc()))
                infos.append({})
                continue
            if stepping:
                rewards[g] = reward
                terminations[g] = terminated
                truncations[g] = truncated
            infos.append(info)
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
        _await_command(commands, poller, spin_s)
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


def _await_command(commands: Any, poller: select.poll, spin_s: float) -> None:
    """Return once the parent has announced a command; EOFError once the parent is gone (its end of the
    command pipe hung up), checked whenever a wait of LIVENESS_POLL_S times out."""
    if spin_acquire(commands, spin_s):
        return
    while not commands.acquire(True, LIVENESS_POLL_S):
        if any(events & select.POLLHUP for _, events in poller.poll(0)):
            raise EOFError("the parent process is gone")


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
        return (g, "obs", f"observation does not fit {obs_layout.space}: {exc!r}", traceback.format_exc())
    rows.restarted[g] = True
    if info:
        reset_infos[g] = info
    return None


@dataclass
class WorkerHandle:
    """The parent's end of one started worker process: its process, the pipe ends it keeps (to close them),
    the message channel and its poller, and the command / done semaphores."""

    proc: Any
    pipes: list[Any]
    channel: Channel
    poller: select.poll
    commands: Any
    done: Any


def start_worker(
    ctx: BaseContext,
    index: int,
    env_ids: list[int],
    env_fns: Sequence[Callable[[], gym.Env]],
    shared_fd: int,
    num_envs: int,
    num_workers: int,
    spin_s: float,
    *,
    import_main: bool = True,
    specs: Sequence[Any] = (),
) -> WorkerHandle:
    """Start worker ``index`` for env_ids (its factories sent with cloudpickle); the shared file is
    duplicated into it at start. ``import_main=False``: a spawn or forkserver worker does not import the
    main module at start-up (``specs``: gym registry entries it registers instead)."""
    cmd_reader, cmd_writer = ctx.Pipe(duplex=False)  # type: ignore[attr-defined]
    reply_reader, reply_writer = ctx.Pipe(duplex=False)  # type: ignore[attr-defined]
    try:
        commands, done = ctx.Semaphore(0), ctx.Semaphore(0)  # type: ignore[attr-defined]
        fns = [CloudpickleWrapper(fn) for fn in env_fns]
        shared = InheritedFd(shared_fd)
        args = (
            index, env_ids, fns, cmd_reader, reply_writer, shared, num_envs, num_workers, spin_s, commands, done,
            list(specs),
        )  # fmt: skip
        proc = ctx.Process(  # type: ignore[attr-defined]
            target=worker_main, args=args, name=f"{WORKER_NAME}{index}", daemon=True
        )
        with _without_main(not import_main):
            proc.start()
    except BaseException:
        for end in (cmd_reader, cmd_writer, reply_reader, reply_writer):
            end.close()
        raise
    cmd_reader.close()
    reply_writer.close()
    poller = select.poll()
    poller.register(reply_reader.fileno(), select.POLLIN)
    channel = Channel(reply_reader.fileno(), cmd_writer.fileno())
    return WorkerHandle(proc, [cmd_writer, reply_reader], channel, poller, commands, done)


def stop_workers(procs: Sequence[Any], channels: Sequence[Channel], command_sems: Sequence[Any]) -> None:
    """Tell every live worker to close, give them CLOSE_JOIN_S to exit, then terminate (and kill) the rest."""
    close_message = pickle.dumps((CLOSE, (), None))
    for channel, proc, commands in zip(channels, procs, command_sems):
        if proc.is_alive():
            with contextlib.suppress(OSError):
                channel.send(close_message)
                commands.release()
    deadline = time.monotonic() + CLOSE_JOIN_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        end_process(proc)


def end_process(proc: Any) -> None:
    """Stop a worker process that is still alive: SIGTERM, then SIGKILL if it ignores that."""
    if proc.is_alive():
        proc.terminate()
        proc.join(CLOSE_JOIN_S)
    if proc.is_alive():  # pragma: no cover - ignores SIGTERM
        proc.kill()
        proc.join()


def mp_context(context: str | BaseContext | None) -> BaseContext:
    if isinstance(context, BaseContext):
        return context
    if context is None:
        context = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(context)
    if context == "forkserver":
        # workers fork from a server that has imported this module (numpy, gymnasium) once
        from multiprocessing import forkserver

        current = list(getattr(forkserver._forkserver, "_preload_modules", []))
        if __name__ not in current:
            ctx.set_forkserver_preload(current + [__name__])
    return ctx
