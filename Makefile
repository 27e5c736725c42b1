# One entry point. README's quick start is `make lab` and `make test`; the rest are for the curious.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tkcourse-installed

.PHONY: setup lab test unit notebooks check exercises bench doctor lint strip

setup: $(STAMP)  ## create .venv and install the course with its dev tools

# constraints.txt is the one tested set of versions (CI tests exactly it): a change to it re-installs.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

lab: setup  ## open JupyterLab on notebooks/
	$(BIN)/python -m tkcourse lab

test: setup  ## the layers (import-linter), then the whole suite: unit tests, graders, notebooks, the browser test
	$(BIN)/lint-imports
	TKCOURSE_SOLUTIONS=1 $(BIN)/python -m pytest -q --durations=15 tests

unit: setup  ## unit tests only
	TKCOURSE_SOLUTIONS=1 $(BIN)/python -m pytest -q tests -m "not browser"

notebooks: setup  ## run every notebook as a learner does (untouched exercises, TKCOURSE_SOLUTIONS unset)
	$(BIN)/python -m pytest -q tests/test_learner_path.py

check: setup  ## grade YOUR exercises (all, or: make check LESSON=vector_add)
	$(BIN)/tkcourse check $(LESSON)

exercises: setup  ## (re)generate exercises/ from solutions/; never overwrites your edits
	$(BIN)/tkcourse exercises

bench: setup  ## on a GPU: every solution against its peer -> artifacts/bench.csv
	$(BIN)/tkcourse bench --out artifacts/bench.csv

doctor: setup  ## runs a tiny kernel; GPU or interpreter; versions against the tested set; widget extension
	$(BIN)/tkcourse doctor

lint: setup  ## style (ruff) and the layers (import-linter, pyproject.toml)
	$(BIN)/ruff check tkcourse solutions benchmarks tests
	$(BIN)/lint-imports

strip: setup  ## remove outputs from the notebooks before committing
	$(BIN)/jupyter nbconvert --clear-output --inplace notebooks/*.ipynb
