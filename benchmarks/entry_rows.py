"""compare.py's ``entry`` rows: ``vcollect collect`` as a process against the same collection written in
Python (benchmarks/entry_python.py), each window a fresh process; and the check, shared with the
``distributed`` rows, that another process runs the vcollect this one imported."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import vcollect

Window = Callable[[int], float | None]
"""One timed window of about n transitions: transitions/s, or None when the process failed (said on stderr)."""


def same_vcollect(found: str, where: str) -> None:
    """RuntimeError unless ``found`` (vcollect's __init__ in another process) is the one this process runs."""
    if Path(found).resolve() != Path(vcollect.__file__).resolve():
        raise RuntimeError(
            f"{where} imports vcollect from {found}, but this process from {vcollect.__file__}: the rows "
            "would compare different code; set PYTHONPATH to the checkout to measure"
        )


ENTRY_SHARD_STEPS = 100_000
"""Shard size of the entry-point rows, passed to both sides (the CLI's default --shard-steps)."""

_STEPS_PER_S = re.compile(r"^\W*steps/s\W+([\d,]+(?:\.\d+)?)", re.MULTILINE)


def entry_window(
    cleanup: contextlib.ExitStack, kind: str, backend: str, num_envs: int, *, progress: bool = True
) -> Window | None:
    """One fresh process per window: ``vcollect collect`` (kind "cli"; ``progress=False`` adds --no-progress)
    or benchmarks/entry_python.py (kind "python", the direct Collector + EpisodeStore), CartPole-v1 on
    ``backend`` with ``num_envs`` envs,
    random actions, every episode stored in a dataset in a temporary folder, one collect call of ``steps``;
    the folder is removed when ``cleanup`` closes.

    Timed from inside: the steps/s of the one collect call, as the CLI prints it (its CollectStats table)
    and as entry_python.py prints it. Timing the whole process instead would add the interpreter start,
    the imports (0.3 to 0.5 s per process here, and the CLI imports more: rich, its own module), building the envs
    and the store, and the final commit and close, all of which differ between the two sides and vary
    with the machine's load, while the question is what each route costs per collected step. Both sides
    start cold and make one call with ``reset_before_collect=True``, so warm-up is the same on both; the
    window sizes make that call a few seconds long. The CLI runs as ``sys.executable -m vcollect``, so
    PYTHONPATH decides which vcollect both sides run; it shows its progress bar (its default; tqdm on
    stderr, which is captured here) unless ``progress=False``.
    """
    if backend == "envpool" and importlib.util.find_spec("envpool") is None:
        return None
    root = tempfile.mkdtemp(prefix="vcollect-entry-")
    cleanup.callback(shutil.rmtree, root, ignore_errors=True)
    dataset = f"bench/{kind}-{backend}-{num_envs}{'' if progress else '-quiet'}-v0"
    seed = "0"
    # `python -m` puts its working directory first on sys.path: run in the empty temporary folder, so that
    # PYTHONPATH (made absolute) picks vcollect and not a checkout that happens to be the working directory.
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep))
    found = subprocess.run(
        [sys.executable, "-c", "import vcollect; print(vcollect.__file__)"], cwd=root, env=env,
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    same_vcollect(found, "a process started in a temporary folder")

    def window(steps: int) -> float | None:
        if kind == "cli":
            command = [
                sys.executable, "-m", "vcollect", "collect", "CartPole-v1", "--backend", backend,
                "--num-envs", str(num_envs), "--steps", str(steps), "--seed", seed, "--dataset", dataset,
                "--root", root, "--overwrite", "--shard-steps", str(ENTRY_SHARD_STEPS),
                *([] if progress else ["--no-progress"]),
            ]
        else:
            command = [
                sys.executable, str(Path(__file__).with_name("entry_python.py")), "CartPole-v1", backend,
                str(num_envs), str(steps), dataset, root, seed, str(ENTRY_SHARD_STEPS),
            ]
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
        found = _STEPS_PER_S.search(done.stdout)
        if done.returncode != 0 or found is None:  # reported, and the run goes on without this window
            print(
                f"compare.py: {' '.join(command)} exited with {done.returncode} and printed no steps/s:\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}",
                file=sys.stderr,
            )
            return None
        return float(found.group(1).replace(",", ""))

    return window
