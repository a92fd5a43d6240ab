"""Run a Python command line (``-c CODE ...`` or ``-m MODULE ...``) in a real child process forked from
multiprocessing's forkserver, whose server has imported vcollect, gymnasium and h5py once: a child starts in
milliseconds instead of paying the imports again, and is killed, reaped and given its exit code like any
other process (``Process.kill`` sends SIGKILL).

Everything here is top-level so that the forkserver can import it.
"""

from __future__ import annotations

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

PRELOAD = ["vcollect", "vcollect.cli", "gymnasium", "h5py", __name__]


def context() -> ForkServerContext:
    """The forkserver context, its server asked to preload :data:`PRELOAD` (kept with what others asked)."""
    ctx = multiprocessing.get_context("forkserver")
    current = list(getattr(forkserver._forkserver, "_preload_modules", []))
    ctx.set_forkserver_preload(current + [name for name in PRELOAD if name not in current])
    return ctx


def run_command_line(args: list[str], env: dict[str, str], cwd: str, stdout: Connection, stderr_path: str) -> None:
    """In the child: ``python *args`` with ``env`` set, in ``cwd``, stdout into ``stdout``, stderr to a file."""
    os.environ.update(env)
    os.chdir(cwd)
    with open(stderr_path, "w") as err:
        os.dup2(err.fileno(), 2)
    os.dup2(stdout.fileno(), 1)
    stdout.close()
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own stdout
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the process's own stderr
    flag, target, *rest = args
    if flag == "-c":
        sys.argv = ["-c", *rest]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)


def start(args: list[str], env: dict[str, str], cwd: str, stderr_path: str) -> tuple[BaseProcess, int]:
    """Start ``python *args`` forked from the server; returns the process and the read end of its stdout."""
    ctx = context()
    read, write = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=run_command_line, args=(args, env, cwd, write, stderr_path), daemon=True)
    proc.start()
    write.close()
    fd = os.dup(read.fileno())
    read.close()
    return proc, fd


def run(args: list[str], env: dict[str, str], cwd: str, stderr_path: str,
        timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``python *args`` forked from the server to its end (killed after ``timeout`` seconds): its exit
    code, stdout and stderr, as ``subprocess.run(..., capture_output=True, text=True)`` gives them."""
    proc, fd = start(args, env, cwd, stderr_path)
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
