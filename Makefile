# `make demo` and `make test` work from a fresh clone: they create .venv and install into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME := $(CURDIR)/.demo/airflow_home
DEMO_ENV := AIRFLOW_HOME=$(DEMO_HOME) AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/example_dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__UNIT_TEST_MODE=False

.PHONY: install demo test lint format bench clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $@

install: $(BIN)/.installed

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
	$(BIN)/ruff check src tests example_dags bench scripts
	$(BIN)/ruff format --check src tests example_dags bench scripts
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix src tests example_dags bench scripts
	$(BIN)/ruff format src tests example_dags bench scripts

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache
