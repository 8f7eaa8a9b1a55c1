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

run: .venv
	$(SNAKEMAKE)
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
