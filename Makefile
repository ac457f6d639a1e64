# Two commands set everything up on a fresh machine (only the package registries are needed):
#   make demo   create .venv, install the project, run the main job (tour, Cliffwalk, imbalanced MNIST)
#   make test   create .venv, install the project with its test tools, lint, type-check, test
#   make test-core   the tests in .venv-core, with only the core dependencies (extras' tests skip)
#   make docs   serve the docs site (mkdocs, http://127.0.0.1:8000); make docs-build builds it strictly
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.prisample-installed
# Two shared cores: keep torch and BLAS to one thread per process in tests and demos.
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1

.PHONY: demo test test-core lint bench offpolicy docs docs-build clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[all]'
	touch $(STAMP)

# Each stage's wall time and the load average around it go to $(DEMO_TIMING) (recipes/demo/timing.py,
# standard library only: it times the install too); the docs cite a copy made on an idle machine.
# The data stage may install Debian's dataset-fashion-mnist package (recipes/imbalanced_mnist/ensure_data.sh
# says so first; PRISAMPLE_NO_APT=1 prevents it).
DEMO_TIMING ?= runs/demo_timing.json
TIMED := $(PYTHON) recipes/demo/timing.py --out $(DEMO_TIMING)

demo:
	$(TIMED) --fresh install -- $(MAKE) --no-print-directory $(STAMP)
	$(TIMED) tour -- $(BIN)/python -m recipes.demo tour
	$(TIMED) cliffwalk -- $(BIN)/python -m recipes.cliffwalk run
	$(TIMED) data -- sh recipes/imbalanced_mnist/ensure_data.sh $(BIN)/python
	$(TIMED) imbalanced_mnist -- $(BIN)/python -m recipes.imbalanced_mnist compare

lint: $(STAMP)
	$(BIN)/ruff check prisample tests benchmarks recipes docs/_ext conftest.py
	$(BIN)/ruff format --check prisample tests benchmarks recipes docs/_ext conftest.py
	$(BIN)/mypy prisample recipes benchmarks

test: lint
	$(BIN)/python -m pytest

# Core only: numpy, numba and torch (pinned to the version on local disk) plus pytest and hypothesis.
# `import prisample` must import no extra; tests that need one skip (pytest.importorskip, conftest.py).
CORE_VENV := .venv-core
CORE_TORCH ?= torch==2.14.1
CORE_STAMP := $(CORE_VENV)/.prisample-installed

$(CORE_STAMP): pyproject.toml
	rm -rf $(CORE_VENV)
	$(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check '$(CORE_TORCH)' -e . pytest hypothesis
	touch $(CORE_STAMP)

test-core: $(CORE_STAMP)
	$(CORE_VENV)/bin/python -m tests.core_only --no-extras
	$(CORE_VENV)/bin/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

offpolicy: $(STAMP)
	$(BIN)/python -m recipes.offpolicy run

# `make test` builds the site too, strictly (tests/test_docs_site.py): a broken link or anchor, or a
# docstring cross-reference to nothing, fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) $(CORE_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site
