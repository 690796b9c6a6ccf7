# `make demo` and `make test` work from a fresh clone: they create .venv and install into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME := $(CURDIR)/.demo/airflow_home
DEMO_ENV := AIRFLOW_HOME=$(DEMO_HOME) AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/example_dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__UNIT_TEST_MODE=False

.PHONY: install demo test lint format bench clean docs release-check

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $@

install: $(BIN)/.installed

# The docs extra goes into the same .venv (autodoc imports the provider and Airflow).
$(BIN)/.docs-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[docs]"
	touch $@

# Strict and offline: warnings are errors, -n checks every internal reference (pages, labels, objects).
# AIRFLOW_HOME points at a scratch folder: autodoc imports Airflow, which writes its config there.
docs: $(BIN)/.docs-installed
	rm -rf docs/_build
	mkdir -p docs/_build/airflow_home
	AIRFLOW_HOME=$(CURDIR)/docs/_build/airflow_home AIRFLOW__CORE__LOAD_EXAMPLES=False \
		$(BIN)/sphinx-build -b html -W --keep-going -n -q docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

# Build the wheel and sdist, check them, install the wheel into a fresh venv and run the example DAG there.
release-check:
	PYTHON=$(PYTHON) .ci/release-check

demo: install
	rm -rf $(CURDIR)/.demo
	mkdir -p $(DEMO_HOME)
	$(DEMO_ENV) $(BIN)/airflow db migrate > $(CURDIR)/.demo/migrate.log 2>&1 || (cat $(CURDIR)/.demo/migrate.log; exit 1)
	$(DEMO_ENV) $(BIN)/airflow dags reserialize > $(CURDIR)/.demo/reserialize.log 2>&1 || (cat $(CURDIR)/.demo/reserialize.log; exit 1)
	$(DEMO_ENV) $(BIN)/airflow dags test example_durable_agent > $(CURDIR)/.demo/dags_test.log 2>&1 || true
	$(DEMO_ENV) $(BIN)/python scripts/demo_story.py $(CURDIR)/.demo/dags_test.log
	@grep -q "Durable: replayed 2 cached steps" $(CURDIR)/.demo/dags_test.log \
		&& echo "demo: the retry replayed the recorded steps (full log: .demo/dags_test.log)" \
		|| (echo "demo: expected replay line not found; see .demo/dags_test.log"; exit 1)

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check src tests example_dags bench scripts docs
	$(BIN)/ruff format --check src tests example_dags bench scripts docs
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix src tests example_dags bench scripts docs
	$(BIN)/ruff format src tests example_dags bench scripts docs

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache docs/_build dist
