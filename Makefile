# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
DEMO_ID := demo/cartpole-random-v0

.PHONY: demo test lint typecheck docs unit timing bench clean

# Every process the recipes start writes the bytecode of the modules it imports (the venv's and this
# checkout's), so the next process loads it: where PYTHONDONTWRITEBYTECODE is set (as on the CI machines),
# every process the tests start (test workers, subprocess envs, Ray actors, CLI runs) would otherwise
# compile torch, Ray and the rest from source again. Only what is imported is compiled (about a fifth of
# the venv's 23k modules), where compiling the whole venv at install costs about 90 s of CPU.
unexport PYTHONDONTWRITEBYTECODE

# Base install: the library alone (what `make demo` needs).
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# Dev install: every extra the test suite exercises; torch and Ray pinned by requirements-dev.txt. pip installs uv and
# torch (from this machine's disk, where pip's find-links point; uv does not read pip's configuration and would
# fetch a CUDA build), then uv installs the rest, downloading and unpacking in parallel (about 4x faster than
# pip on a fresh machine); torch, already installed at the pinned version, satisfies the other requirements.
# Nothing is byte-compiled here: the checks below run with bytecode writing on (see PYTHONDONTWRITEBYTECODE).
UV_VERSION := 0.13.9
$(VENV)/.installed-dev: pyproject.toml requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile uv==$(UV_VERSION)
	$(BIN)/python -m pip install --quiet --no-compile -c requirements-dev.txt torch
	$(BIN)/uv pip install --quiet --python $(BIN)/python -c requirements-dev.txt -r requirements-dev.txt -e '.[dev]'
	touch $(VENV)/.installed $@

# The demo writes under the default datasets root ($VCOLLECT_DATASETS_PATH if set, else
# ~/.vcollect/datasets), so the vcollect commands run after it find its dataset.
demo: $(VENV)/.installed
	$(BIN)/vcollect collect CartPole-v1 --num-envs 8 --backend subproc \
		--episodes 500 --seed 0 --dataset $(DEMO_ID) --overwrite
	$(BIN)/vcollect list
	$(BIN)/vcollect show $(DEMO_ID)
	@echo "Next: 'source $(VENV)/bin/activate' (or call $(BIN)/vcollect), then e.g. 'vcollect show $(DEMO_ID)'."

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy vcollect

# One pytest-xdist worker per core, each test file whole on one worker (its module fixtures built once;
# the test files that use Ray all on one worker as one unit, on one local Ray: see tests/conftest.py).
unit: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=20 -m "not timing"

# The few tests that compare wall-clock times of envs running at once (marker "timing"), alone, so no other
# test takes their cores; only the files that have them are collected.
TIMING_FILES = $(shell grep -l '^@pytest.mark.timing' tests/test_*.py)
timing: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -m timing $(TIMING_FILES)

# The documentation site into site/ (open site/index.html; nothing is fetched, so it builds and reads
# offline). --strict: a broken link or cross-reference, or a docstring warning, fails the build.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# ruff, mypy and the docs build run beside the test suite (they fill the cores its waits leave idle; each
# target's output is printed whole when it ends), then the timing tests alone.
test: $(VENV)/.installed-dev
	$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck docs unit
	$(MAKE) --no-print-directory timing

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/compare.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks site
