# Two commands set everything up on a fresh machine (only the package registries are needed):
#   make demo   create .venv, install the project, run the main job (tour, Cliffwalk, imbalanced MNIST)
#   make test   create .venv, install the project with its test tools, lint, type-check, test
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.prisample-installed
# Two shared cores: keep torch and BLAS to one thread per process in tests and demos.
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1

.PHONY: demo test lint bench offpolicy clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[all]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m recipes.demo
	$(BIN)/python -m recipes.cliffwalk
	sh recipes/ensure_mnist_data.sh $(BIN)/python
	$(BIN)/python -m recipes.imbalanced_mnist compare

lint: $(STAMP)
	$(BIN)/ruff check prisample tests benchmarks recipes
	$(BIN)/mypy prisample

test: lint
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run_all

offpolicy: $(STAMP)
	$(BIN)/python -m recipes.offpolicy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
