"""Running the code blocks of a Markdown page (README.md, the pages under docs/) as a reader runs them.

Each Python block is pasted into a file of its own and run as ``python file.py`` runs it, each shell block
with ``bash -e``, in a folder of the test's choosing, with ``$VCOLLECT_DATASETS_PATH`` and
``$MINARI_DATASETS_PATH`` set to folders inside it and this checkout's vcollect first on the path. A Python
block runs in a process of its own forked from a server that has imported vcollect, gymnasium and h5py
(tests/forked_scripts.py): the block's own ``__main__``, arguments, working folder, environment, exit code,
stdout and stderr, without paying those imports again; a shell block's ``vcollect`` commands likewise run as
``python -m vcollect ...`` forked from that server (the installed console script is run by tests/test_cli.py). A block can also run with some modules hidden
(``import torch`` then fails as if torch were not installed), in a fresh interpreter, which is how the
one-line "needs the ... extra" messages are tested without uninstalling anything.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests import forked_scripts

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 240  # seconds per block
# Read by Ray when a block starts it: a local instance of the block's own (not one this test session or
# anything else on the machine runs), no usage-stats prompt or upload, no import warning.
RAY_ENV = {"RAY_ADDRESS": "local", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_DISABLE_IMPORT_WARNING": "1"}
# The modules each extra installs that a block may import, and what pip installs (a block that needs a
# module not installed here is skipped, not failed).
EXTRA_MODULES = {
    "torch": ("torch",),
    "tianshou": ("tianshou",),
    "ray": ("ray",),
    "minari": ("minari", "pyarrow"),
    "mujoco": ("mujoco",),
    "atari": ("ale_py",),
    "plot": ("matplotlib",),
    "render": ("imageio", "imageio_ffmpeg"),
    "remote": ("fsspec", "s3fs", "gcsfs"),
}
# Where a block says which extra it needs: in its first lines, in these words.
NEEDS_EXTRA = re.compile(r"needs the (?P<extra>\w+) extra")
FIRST_LINES = 4
# Installed by a run with hidden modules: a ``sitecustomize`` that marks them as absent in every process
# started with it (the block and anything it starts), before any other import.
HIDE_MODULES_SITE = """import os, sys
for _name in os.environ.get("VCOLLECT_TEST_HIDDEN_MODULES", "").split(","):
    if _name:
        sys.modules[_name] = None  # `import name` raises ImportError; find_spec(name) returns None
"""


def blocks(text: str, language: str, heading_prefix: str = "## ") -> list[tuple[str, str]]:
    """(section heading, code) of every fenced block in ``language`` in ``text``, in order; the heading is
    the last line before the block that starts with ``heading_prefix`` ("" before any)."""
    found: list[tuple[str, str]] = []
    heading = ""
    pattern = rf"^{re.escape(heading_prefix)}(?P<heading>[^\n]+)$|^```(?P<lang>\w+)\n(?P<code>.*?)^```$"
    for match in re.finditer(pattern, text, re.M | re.S):
        if match.group("heading"):
            heading = match.group("heading").strip()
        elif match.group("lang") == language:
            found.append((heading, match.group("code")))
    return found


def declared_extra(code: str) -> str | None:
    """The extra a block says it needs in its first lines ("needs the torch extra"), if any."""
    match = NEEDS_EXTRA.search("\n".join(code.splitlines()[:FIRST_LINES]))
    return match.group("extra") if match else None


def imported_extras(code: str) -> set[str]:
    """The extras whose modules a block imports (``vcollect.distributed`` counts as Ray's)."""
    found = {extra for extra, modules in EXTRA_MODULES.items()
             for module in modules if re.search(rf"^\s*(import|from) {module}\b", code, re.M)}
    if re.search(r"^\s*(import|from) vcollect\.distributed\b", code, re.M):
        found.add("ray")
    return found


def missing_module(code: str) -> str | None:
    """A module of an extra the block needs (said or imported) that is not installed here, if any."""
    extras = imported_extras(code) | ({declared_extra(code)} - {None})
    for extra in sorted(e for e in extras if e is not None):
        for module in EXTRA_MODULES.get(extra, ()):
            if importlib.util.find_spec(module) is None:
                return module
    return None


@dataclass
class Run:
    """One block run: where it ran and how it ended."""

    folder: Path
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""

    @property
    def datasets(self) -> Path:
        return self.folder / "datasets"


def environment(folder: Path, hidden: Sequence[str] = ()) -> dict[str, str]:
    """A reader's environment for a block run in ``folder``: this checkout's vcollect, roots of its own;
    the modules ``hidden`` absent in every process it starts."""
    bin_dir = str(Path(sys.executable).parent)  # the `vcollect` command of this environment, for shell blocks
    path = [str(REPO)]
    if hidden:
        site = folder / ".hide-modules"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(HIDE_MODULES_SITE, encoding="utf-8")
        path.insert(0, str(site))
    return {
        **os.environ,
        **RAY_ENV,
        "PYTHONPATH": os.pathsep.join(path),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VCOLLECT_DATASETS_PATH": str(folder / "datasets"),
        "MINARI_DATASETS_PATH": str(folder / "minari"),
        "VCOLLECT_TEST_HIDDEN_MODULES": ",".join(hidden),
    }


def start(command: list[str], folder: Path, hidden: Sequence[str] = ()) -> subprocess.Popen[str]:
    """Start ``command`` in ``folder`` with a reader's environment (see :func:`environment`); a shell block
    with nothing hidden finds the `vcollect` command of :func:`vcollect_commands` first on its path."""
    env = environment(folder, hidden)
    if command[0] == "bash" and not hidden:
        env = vcollect_commands().environment(env)
    return subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


@functools.cache
def vcollect_commands() -> forked_scripts.CommandServer:
    """The `vcollect` command of the shell blocks: ``python -m vcollect ...`` forked from the server, as the
    installed command runs it (its console script calls the same ``vcollect.cli.main``), each command
    without paying the imports again (a page runs a dozen). The folder of its socket goes at exit."""
    folder = tempfile.mkdtemp(prefix="vcollect-commands-")  # short: a Unix socket's path has a length limit
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return forked_scripts.CommandServer(folder, "vcollect", ["-m", "vcollect"], TIMEOUT)


Process = subprocess.Popen[str] | forked_scripts.Forked


def finish(process: Process, run: Run) -> Run:
    """Wait for ``process`` (killed after TIMEOUT seconds) and record how it ended in ``run``."""
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    run.stdout, run.stderr = (text.decode(errors="replace") if isinstance(text, bytes) else text
                              for text in (out, err))
    run.returncode = process.returncode
    return run


def start_block(name: str, language: str, code: str, folder: Path, hidden: Sequence[str] = ()) -> Process:
    """Write the block to ``folder/<name>.py`` (or ``.sh``) and run it there as ``python <name>.py``
    (``bash -e <name>.sh``); a Python block with nothing hidden forked from the server (see the module's
    docstring), its stderr kept beside ``folder``."""
    suffix, runner = {"python": (".py", [sys.executable]), "bash": (".sh", ["bash", "-e"])}[language]
    script = folder / f"{name}{suffix}"
    script.write_text(code, encoding="utf-8")
    if language == "python" and not hidden:
        return forked_scripts.Forked([script.name], environment(folder), str(folder),
                                     str(folder.parent / f"{folder.name}-{name}-stderr.txt"), daemon=False)
    return start([*runner, script.name], folder, hidden)


def start_python_block(name: str, code: str, folder: Path, hidden: Sequence[str] = ()) -> Process:
    """Write the block to ``folder/<name>.py`` and run it as ``python <name>.py`` in ``folder``."""
    return start_block(name, "python", code, folder, hidden)


def run_hiding_extra(name: str, language: str, code: str, folder: Path, extra: str) -> Run:
    """Run a block with the modules of ``extra`` hidden; the caller checks that it fails in one line."""
    folder.mkdir(parents=True, exist_ok=True)
    return finish(start_block(name, language, code, folder, EXTRA_MODULES[extra]), Run(folder))


def one_line_naming(run: Run, extra: str) -> bool:
    """Whether ``run`` failed with one line on stderr (nothing on stdout) naming ``extra`` and its install."""
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    return (run.returncode not in (0, None) and len(lines) == 1 and f"vcollect[{extra}]" in lines[0]
            and f"the {extra} extra" in lines[0] and run.stdout == "")
