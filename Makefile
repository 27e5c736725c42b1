# One entry point. README's quick start is `make lab` and `make test`; the rest are for the curious.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tkcourse-installed

.PHONY: setup lessons lab test unit notebooks check progress exercises bench doctor lint strip book

setup: $(STAMP)  ## create .venv and install the course with its dev tools

# constraints.txt is the one tested set of versions (CI tests exactly it): a change to it re-installs.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

# Outputs never enter git: you work in $(MINE)/ (git-ignored), on your own copies of the lessons in
# notebooks/, which stay as the course stores them (README, "Quick start", says why). A lesson is copied
# only where you have no copy of it yet: your work is never overwritten.
MINE    := my-notebooks
LESSONS := $(wildcard notebooks/[0-9][0-9]_*.ipynb)
lessons:  ## copy into my-notebooks/ each lesson you have no copy of (make lab does)
	@mkdir -p $(MINE)
	@for nb in $(LESSONS); do mine="$(MINE)/$${nb##*/}"; \
	  if [ ! -e "$$mine" ]; then cp "$$nb" "$$mine" && echo "copied $$nb to $$mine"; \
	  elif [ "$$nb" -nt "$$mine" ]; then echo "$$nb changed after your copy $$mine was last saved;" \
	    "yours is kept: to take the new version, rename yours and run make lab again"; fi; done

lab: setup lessons  ## open JupyterLab on your copies of the lessons (my-notebooks/)
	$(BIN)/python -m tkcourse lab --notebook-dir $(MINE)

# The suite on WORKERS processes (pytest-xdist): the notebooks on one (tests/conftest.py), the rest beside
# them. WORKERS=0 runs it in this one process; more than 2 help only on machines with more cores.
WORKERS ?= 2
test: setup  ## the layers (import-linter), then the whole suite: unit tests, graders, notebooks, the browser test
	$(BIN)/lint-imports
	TKCOURSE_SOLUTIONS=1 $(BIN)/python -m pytest -q --durations=15 -n $(WORKERS) --dist loadgroup tests

unit: setup  ## unit tests only
	TKCOURSE_SOLUTIONS=1 $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup tests -m "not browser"

notebooks: setup  ## run every notebook as a learner does (untouched exercises, TKCOURSE_SOLUTIONS unset)
	$(BIN)/python -m pytest -q tests/test_learner_path.py

check: setup  ## grade YOUR exercises (all, or: make check LESSON=vector_add)
	$(BIN)/tkcourse check $(LESSON)

progress: setup  ## one line a lesson: done, failing at which case, or not started (kept on this machine)
	$(BIN)/tkcourse progress

exercises: setup  ## (re)generate exercises/ from solutions/; never overwrites your edits
	$(BIN)/tkcourse exercises

bench: setup  ## on a GPU: every solution against its peer -> artifacts/bench.csv
	$(BIN)/tkcourse bench --out artifacts/bench.csv

doctor: setup  ## runs a tiny kernel; GPU or interpreter; versions against the tested set; widget extension
	$(BIN)/tkcourse doctor

lint: setup  ## style (ruff) and the layers (import-linter, pyproject.toml)
	$(BIN)/ruff check tkcourse solutions benchmarks tests book
	$(BIN)/lint-imports

# The stored form of a lesson: no outputs, no execution counts, the cells' ids kept (tests check it).
strip: setup  ## remove outputs from notebooks/ (after running a lesson there rather than in my-notebooks/)
	$(BIN)/python -m nbstripout --keep-id notebooks/*.ipynb

book: setup  ## the course as a static site: every lesson run here, with its outputs -> build/book/index.html
	$(BIN)/python book/build.py
