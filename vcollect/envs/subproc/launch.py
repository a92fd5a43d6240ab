"""Starting and stopping SubprocVectorEnv's worker processes (the parent's side of their lives).

The start method (forkserver where available, with the worker module preloaded), whether a worker must
import the program's main module, the processes with their pipes and semaphores, and their stopping
(politely, then by force). What a worker does once started is vcollect.envs.subproc.worker.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import multiprocessing.spawn
import os
import pickle
import select
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

import gymnasium as gym
from cloudpickle import Pickler as CloudPickler
from gymnasium.vector.utils import CloudpickleWrapper

from vcollect.envs.subproc.transport import CLOSE, Channel, InheritedFd
from vcollect.envs.subproc.worker import WORKER_NAME, worker_main

__all__ = [
    "CLOSE_JOIN_S",
    "NO_MAIN_GUARD_EXIT",
    "WorkerHandle",
    "end_process",
    "exit_if_importing_main",
    "factories_need_main",
    "mp_context",
    "start_worker",
    "stop_workers",
]

CLOSE_JOIN_S = 2.0  # how long a closing worker gets to exit before it is terminated (then killed)
# The exit code of a worker that found itself building a SubprocVectorEnv while importing the main module
# at start-up (a script without an ``if __name__ == "__main__":`` guard): the parent explains it.
NO_MAIN_GUARD_EXIT = 86


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
    """The multiprocessing context the workers start in.

    Args:
        context: A start method name, a context, or None for "forkserver" where available, else "spawn".

    Returns:
        The context; a forkserver one preloads this module (and so the worker's imports) in its server.
    """
    if isinstance(context, BaseContext):
        return context
    if context is None:
        context = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(context)
    if context == "forkserver":
        # workers fork from a server that has imported this module and the worker's (numpy, gymnasium) once
        from multiprocessing import forkserver

        current = list(getattr(forkserver._forkserver, "_preload_modules", []))
        if __name__ not in current:
            ctx.set_forkserver_preload(current + [__name__])
    return ctx
