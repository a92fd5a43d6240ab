"""What an installation promises: a clean import, a valid package license, and only installed backends listed."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from vcollect.envs.factory import BACKENDS, FROM_ENV_ID

REPO = Path(__file__).resolve().parents[1]


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh process that imports this checkout's vcollect."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_import_is_warning_free() -> None:
    result = run_python("-W", "error", "-c", "import vcollect")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_license_is_an_spdx_expression_with_a_setuptools_that_reads_it() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")  # (tomllib is Python 3.11+)
    assert re.search(r'^license = "MIT"$', pyproject, re.M)  # a string, not the deprecated {text = ...} table
    assert re.search(r'^requires = \["setuptools>=77"', pyproject, re.M)  # the first to read SPDX strings


def test_backends_lists_installed_optional_backends() -> None:
    assert {"dummy", "subproc", "gymnasium"} <= set(BACKENDS)
    assert ("ray" in BACKENDS) == (importlib.util.find_spec("ray") is not None)
    assert ("envpool" in FROM_ENV_ID) == (importlib.util.find_spec("envpool") is not None)


def test_backends_without_ray_and_envpool() -> None:
    """With neither package importable, neither backend is listed, and asking for one names its extra."""
    script = """
import json, sys
sys.modules["ray"] = None  # makes `import ray` fail as if Ray were not installed
sys.modules["envpool"] = None
from vcollect.envs.factory import BACKENDS, FROM_ENV_ID, make_vector
from vcollect.cli.sources import available_backends
errors = {}
for backend in ("ray", "envpool"):
    try:
        make_vector("CartPole-v1", 2, backend=backend)
    except ImportError as exc:
        errors[backend] = str(exc)
try:
    make_vector("CartPole-v1", 2, backend="nope")
except ValueError as exc:
    errors["nope"] = str(exc)
print(json.dumps({"backends": sorted(BACKENDS), "from_id": sorted(FROM_ENV_ID),
                  "cli": available_backends(), "errors": errors}))
"""
    result = run_python("-c", script)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["backends"] == ["dummy", "gymnasium", "subproc"]
    assert found["from_id"] == ["gymnasium"]
    assert found["cli"] == ["dummy", "gymnasium", "subproc"]
    assert found["errors"] == {
        "ray": "the ray backend needs the ray extra: pip install 'vcollect[ray]'",
        "envpool": "the envpool backend needs the envpool extra: pip install 'vcollect[envpool]'",
        "nope": "unknown backend 'nope'; available backends: dummy, subproc, gymnasium; "
                "not installed: ray (vcollect[ray]), envpool (vcollect[envpool])",
    }
