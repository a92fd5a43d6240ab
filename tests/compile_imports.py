"""Import, and so byte-compile, the modules the test suite's processes import, once, in one process.

On a fresh virtual environment nothing is compiled yet (the install compiles nothing: see the Makefile), so
the suite's first processes (its test workers, subprocess envs, Ray actors, forked scripts) would each
compile the same torch, Ray, Tianshou and vcollect modules side by side. ``make test`` runs this first; a
module that does not import here is left to the tests that use it to report.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

THIRD_PARTY = (
    "torch", "ray", "ray.util", "tianshou", "gymnasium", "gymnasium.vector", "h5py", "numpy", "minari",
    "hypothesis", "pytest", "xdist", "fsspec", "s3fs", "gcsfs", "moto", "moto.server", "envpool", "mujoco",
    "ale_py", "cv2", "matplotlib.pyplot", "pyarrow", "pyarrow.parquet", "pandas", "imageio",
    "torch.utils.tensorboard", "google.cloud.storage", "playwright.sync_api", "rich", "tqdm", "zstandard",
)


def main() -> int:
    """Import every module in THIRD_PARTY and every vcollect module; print what did not import."""
    failed = []
    for name in THIRD_PARTY:
        try:
            importlib.import_module(name)
        except Exception as error:  # reported; the tests that need the module say more
            failed.append(f"{name}: {error!r}")
    import vcollect

    for module in pkgutil.walk_packages(vcollect.__path__, "vcollect."):
        if module.name == "vcollect.__main__":
            continue
        try:
            importlib.import_module(module.name)
        except Exception as error:
            failed.append(f"{module.name}: {error!r}")
    for line in failed:
        print("compile_imports: not imported:", line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
