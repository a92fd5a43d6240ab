"""Run a Python command line (``-c CODE ...``, ``-m MODULE ...`` or ``SCRIPT ...``) in a real child process
forked from multiprocessing's forkserver, whose server has imported vcollect's parts, gymnasium and h5py once: a child
starts in milliseconds instead of paying the imports again, and is killed, reaped and given its exit code
like any other process (``Process.kill`` sends SIGKILL).

Everything here is top-level so that the forkserver can import it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import os
import runpy
import selectors
import socket
import subprocess
import sys
import threading
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
    stdin from ``stdin`` where given (see :func:`run_args`)."""
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
    run_args(args)


def run_with_streams(args: list[str], env: dict[str, str], cwd: str,
                     streams: tuple[Connection, Connection, Connection]) -> None:
    """In the child: ``python *args`` with ``env`` set, in ``cwd``, its stdin, stdout and stderr the three
    ``streams`` (another process's own, handed over by a :class:`CommandServer`)."""
    os.environ.update(env)
    os.chdir(cwd)
    for fd, stream in enumerate(streams):
        os.dup2(stream.fileno(), fd)
        stream.close()
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin
    run_args(args)


def run_args(args: list[str]) -> None:
    """In the child, its streams in place: run ``python *args`` as Python runs it. A script runs as
    ``python SCRIPT`` runs it: as ``__main__``, its folder first on ``sys.path``, multiprocessing's default
    start method (a forkserver's child inherits "forkserver"); a script's or module's exit functions run
    when it ends (the child leaves by ``os._exit``, which runs none)."""
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own stdout
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the process's own stderr
    if args[0] == "-c":
        code, *rest = args[1:]
        sys.argv = ["-c", *rest]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    elif args[0] == "-m":
        sys.argv = args[1:]
        try:
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        finally:
            atexit._run_exitfuncs()
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


# The `vcollect` command of a :class:`CommandServer`: a stdlib-only script (``python -I -S``: no site
# packages, nothing imported but these) that hands the server its command line, working folder,
# environment and its own stdin, stdout and stderr, and exits with the command's exit code
SHIM = """import json, os, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(os.environ[{variable!r}])
body = json.dumps({{"args": {args!r} + sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(sock, [len(body).to_bytes(8, "big")], [0, 1, 2])
sock.sendall(body)
reply = b""
while chunk := sock.recv(64):
    reply += chunk
code = int(reply)
sys.exit(code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a shell reports it
"""


class CommandServer:
    """Runs the command ``name`` for any process that finds its folder first on ``$PATH``: each run of it
    is ``python *args ARGUMENTS`` (e.g. ``args = ["-m", "vcollect"]``) forked from the server, with the
    caller's working folder, environment, stdin, stdout and stderr, and its exit code; a shell script
    calling the command runs as it would with the installed one, without paying the imports per command.

    A thread accepts the callers on a Unix socket in ``folder``; a command whose caller goes away (killed),
    or that outlasts ``timeout`` seconds, is killed.
    """

    VARIABLE = "VCOLLECT_TEST_COMMAND_SOCKET"

    def __init__(self, folder: str, name: str, args: list[str], timeout: float) -> None:
        self.bin_dir = os.path.join(folder, "bin")
        os.makedirs(self.bin_dir, exist_ok=True)
        self.socket_path = os.path.join(folder, "commands.sock")
        self.timeout = timeout
        command = os.path.join(self.bin_dir, name)
        with open(command, "w", encoding="utf-8") as script:
            script.write(f"#!{sys.executable} -IS\n" + SHIM.format(variable=self.VARIABLE, args=list(args)))
        os.chmod(command, 0o755)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.socket_path)
        self._listener.listen(16)
        threading.Thread(target=self._accept, name=f"command server {name}", daemon=True).start()

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with this server's command first on ``PATH`` and its socket named."""
        return {**env, "PATH": f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}", self.VARIABLE: self.socket_path}

    def _accept(self) -> None:
        while True:
            caller, _ = self._listener.accept()
            threading.Thread(target=self._run, args=(caller,), daemon=True).start()

    def _run(self, caller: socket.socket) -> None:
        """Run one caller's command to its end and send it the exit code."""
        with caller:
            header, fds, _, _ = socket.recv_fds(caller, 8, 3)  # the body's size, with the caller's streams
            header = receive(caller, header, 8)
            body = receive(caller, b"", int.from_bytes(header, "big")) if len(header) == 8 else b""
            if len(fds) != 3 or not body:  # not a caller of the command's: nothing to run
                for fd in fds:
                    os.close(fd)
                return
            request = json.loads(body)
            streams = tuple(Connection(fd) for fd in fds)
            proc = context().Process(target=run_with_streams, daemon=False,
                                     args=(request["args"], request["env"], request["cwd"], streams))
            proc.start()
            for stream in streams:
                stream.close()
            deadline = time.monotonic() + self.timeout
            with selectors.DefaultSelector() as sel:
                sel.register(proc.sentinel, selectors.EVENT_READ)
                sel.register(caller, selectors.EVENT_READ)  # readable only at its end: the caller went away
                while proc.exitcode is None:
                    left = deadline - time.monotonic()
                    ready = [key.fileobj for key, _ in sel.select(max(left, 0))]
                    if caller in ready or left <= 0:  # the caller went away, or the command outlasted the timeout
                        proc.kill()
                    proc.join(1)
            with contextlib.suppress(OSError):  # the caller went away: no one to tell
                caller.sendall(str(proc.exitcode).encode())


def receive(sock: socket.socket, data: bytes, size: int) -> bytes:
    """``data`` and what ``sock`` sends after it, up to ``size`` bytes in all (fewer: it closed first)."""
    while len(data) < size and (chunk := sock.recv(size - len(data))):
        data += chunk
    return data
