"""Run a Python command line (``-c CODE ...``, ``-m MODULE ...`` or ``SCRIPT ...``) in a real child process
forked from multiprocessing's forkserver, whose server has imported vcollect's parts, gymnasium and h5py once: a child
starts in milliseconds instead of paying the imports again, and is killed, reaped and given its exit code
like any other process (``Process.kill`` sends SIGKILL).

Everything here is top-level so that the forkserver can import it.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import selectors
import subprocess
import sys
import time
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess

# `import vcollect` alone loads none of its parts (each name's module is imported on first use): the server
# imports the modules of the top level's names and the command line, which the children use
PRELOAD = [
    "vcollect.async_collector", "vcollect.buffers", "vcollect.collector", "vcollect.envs", "vcollect.hooks",
    "vcollect.minari", "vcollect.policies", "vcollect.remote", "vcollect.stats", "vcollect.store", "vcollect.cli",
    "gymnasium", "h5py", __name__,
]


def context() -> ForkServerContext:
    """The forkserver context, its server asked to preload :data:`PRELOAD` (kept with what others asked)."""
    ctx = multiprocessing.get_context("forkserver")
    current = list(getattr(forkserver._forkserver, "_preload_modules", []))
    ctx.set_forkserver_preload(current + [name for name in PRELOAD if name not in current])
    return ctx


def run_command_line(args: list[str], env: dict[str, str], cwd: str, stdout: Connection, stderr_path: str,
                     stdin: Connection | None = None) -> None:
    """In the child: ``python *args`` with ``env`` set, in ``cwd``, stdout into ``stdout``, stderr to a file,
    stdin from ``stdin`` where given. A script runs as ``python SCRIPT`` runs it: as ``__main__``, its folder
    first on ``sys.path``, multiprocessing's default start method (a forkserver's child inherits
    "forkserver"), the exit functions it registered run when it ends (the child leaves by ``os._exit``,
    which runs none)."""
    os.environ.update(env)
    os.chdir(cwd)
    with open(stderr_path, "w") as err:
        os.dup2(err.fileno(), 2)
    os.dup2(stdout.fileno(), 1)
    stdout.close()
    if stdin is not None:
        os.dup2(stdin.fileno(), 0)
        stdin.close()
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own stdout
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the process's own stderr
    if args[0] == "-c":
        code, *rest = args[1:]
        sys.argv = ["-c", *rest]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    elif args[0] == "-m":
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(args)
        multiprocessing.set_start_method(None, force=True)  # the platform's default, not the server's
        script = os.path.abspath(args[0])  # its __file__, absolute as Python makes it
        sys.path.insert(0, os.path.dirname(script))
        try:
            runpy.run_path(script, run_name="__main__")
        finally:
            atexit._run_exitfuncs()


def start(args: list[str], env: dict[str, str], cwd: str, stderr_path: str,
          daemon: bool = True) -> tuple[BaseProcess, int]:
    """Start ``python *args`` forked from the server; returns the process and the read end of its stdout.
    ``daemon=False`` for a command that starts processes of its own (multiprocessing refuses a daemon's)."""
    ctx = context()
    read, write = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=run_command_line, args=(args, env, cwd, write, stderr_path), daemon=daemon)
    proc.start()
    write.close()
    fd = os.dup(read.fileno())
    read.close()
    return proc, fd


def run(args: list[str], env: dict[str, str], cwd: str, stderr_path: str, timeout: float,
        daemon: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``python *args`` forked from the server to its end (killed after ``timeout`` seconds): its exit
    code, stdout and stderr, as ``subprocess.run(..., capture_output=True, text=True)`` gives them."""
    proc, fd = start(args, env, cwd, stderr_path, daemon)
    deadline = time.monotonic() + timeout
    chunks = []
    with open(fd, "rb") as out, selectors.DefaultSelector() as sel:
        sel.register(out, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0 and sel.select(left):
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk)
    proc.join(timeout=max(deadline - time.monotonic(), 0))
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    with open(stderr_path, encoding="utf-8", errors="replace") as err:
        stderr = err.read()
    return subprocess.CompletedProcess(args, proc.exitcode, b"".join(chunks).decode(), stderr)


class Forked:
    """``python *args`` forked from the server, with the part of ``subprocess.Popen``'s surface this suite
    uses: binary ``stdin`` and ``stdout`` pipes, stderr captured (to a file), ``poll``, ``wait``,
    ``send_signal``, ``kill``, ``communicate`` and ``returncode``. ``daemon=False`` for a command that
    starts processes of its own."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: str, stderr_path: str,
                 daemon: bool = True) -> None:
        ctx = context()
        out_read, out_write = ctx.Pipe(duplex=False)
        in_read, in_write = ctx.Pipe(duplex=False)
        self._stderr_path = stderr_path
        self._proc = ctx.Process(target=run_command_line, args=(args, env, cwd, out_write, stderr_path, in_read),
                                 daemon=daemon)
        self._proc.start()
        out_write.close()
        in_read.close()
        self.pid = self._proc.pid
        self.stdout = open(os.dup(out_read.fileno()), "rb", buffering=0)  # noqa: SIM115 - closed by communicate
        self.stdin = open(os.dup(in_write.fileno()), "wb", buffering=0)  # noqa: SIM115 - closed by communicate
        out_read.close()
        in_write.close()

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    def poll(self) -> int | None:
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(str(self._proc), timeout or 0)
        return self._proc.exitcode

    def send_signal(self, sig: int) -> None:
        if self._proc.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self._proc.kill()

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Close stdin, read stdout to its end and wait for the exit; returns (stdout, stderr)."""
        if not self.stdin.closed:
            self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = []
        with self.stdout, selectors.DefaultSelector() as sel:
            sel.register(self.stdout, selectors.EVENT_READ)
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and (left <= 0 or not sel.select(left)):
                    raise subprocess.TimeoutExpired(str(self._proc), timeout or 0)
                chunk = os.read(self.stdout.fileno(), 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.1))
        with open(self._stderr_path, "rb") as err:
            return b"".join(chunks), err.read()
