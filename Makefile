# Two commands on a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
DEMO_ID := demo/cartpole-random-v0

.PHONY: demo test lint typecheck docs unit bench clean

# Base install: the library alone (what `make demo` needs).
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# Dev install: every extra the test suite exercises; torch pinned by requirements-dev.txt. pip compiles
# every module to bytecode once (about a minute of one core): where PYTHONDONTWRITEBYTECODE is set (as on
# the CI machines) no process writes bytecode, so without it every process the tests start (test workers,
# subprocess envs, Ray actors, CLI runs) compiles torch, Ray and the rest again from source.
$(VENV)/.installed-dev: pyproject.toml requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements-dev.txt -r requirements-dev.txt -e '.[dev]'
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
# one local Ray per worker that runs Ray tests); then the few tests that compare wall-clock times of envs
# running at once (marker "timing") alone, so no other test takes their cores.
unit: $(VENV)/.installed-dev
	$(BIN)/python -m compileall -q vcollect tests  # this checkout's bytecode too (see the dev install)
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=20 -m "not timing"
	$(BIN)/python -m pytest -q -m timing

# The documentation site into site/ (open site/index.html; nothing is fetched, so it builds and reads
# offline). --strict: a broken link or cross-reference, or a docstring warning, fails the build.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck docs unit

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/compare.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .benchmarks site
