# `make run`: the whole workflow on the embedded default config, then the HTML report.
# `make test`: the test suite.  Both install the package into .venv first (`make .venv`).
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
CORES ?= 2
SNAKEMAKE := $(BIN)/snakemake --workflow-profile profiles/default --cores $(CORES)
# Rules call the `intertwine` console script, so the venv comes first on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: .venv run report test test-cluster format dry-run-paper docs clean

.venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[workflow,dev]'
	touch $@

# Snakemake's job-rate limiter (--max-jobs-per-timespan, 100/1s by default) re-plans the schedule
# one timespan after every planning round that leaves jobs waiting, and each finished job adds a
# round that never stops: a profiled `make run` planned 66,804 times in 15 minutes, and its planner
# took CPU from the two jobs. A 10 s span plans a tenth as often (a finished job is still followed
# at once) and can keep Snakemake up to 10 s after the last job.
run: .venv
	$(SNAKEMAKE) --max-jobs-per-timespan 1000/10s
	$(MAKE) report

report: .venv
	$(SNAKEMAKE) --report results/report.html

# Two pytest-xdist workers, each test file on one of them (--dist loadfile), so a module-scoped
# fixture (the tiny workflow run of tests/test_workflow.py) is made once; the files with the most
# tests start first. `make test PYTEST_ARGS=-n0` runs in one process.
test: .venv
	$(BIN)/python -m pytest -n $(CORES) --dist loadfile $(PYTEST_ARGS)

format: .venv
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/snakefmt workflow/Snakefile workflow/rules

test-cluster: .venv
	bash tests/cluster/run.sh

dry-run-paper: .venv
	$(SNAKEMAKE) --configfile config/paper.yaml -n --quiet rules

clean:
	rm -rf results/data results/zoo results/tables results/figures results/logs results/benchmarks results/report.html .snakemake

docs: .venv
	$(BIN)/mkdocs build --strict --quiet
