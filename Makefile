# `make demo` and `make test` work from a fresh clone: they create .venv and install into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME := $(CURDIR)/.demo/airflow_home
DEMO_ENV := AIRFLOW_HOME=$(DEMO_HOME) AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/example_dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW__CORE__UNIT_TEST_MODE=False

.PHONY: install demo test test-unit test-dags test-system lint format bench bench-peer clean docs release-check matrix matrix-oldest matrix-newer-python matrix-list constraints celery-trial cross-release

# Version matrix: one session per constraints/airflow-A-pydantic-ai-P.txt, each in its own venv
# under .matrix/, installed with uv (from PyPI, into .tools/) because it installs a full Airflow
# in seconds where pip takes minutes. `make matrix-list` names the sessions.
# 3.4.0b2 is a pre-release (the newest until 3.4.0 ships; then replace it by the release).
MATRIX_AIRFLOW := 3.1.8 3.2.2 3.3.2 3.4.0b2
MATRIX_PYDANTIC_AI := 2.62.0 2.68.0 2.78.0
MATRIX_SESSIONS := $(foreach a,$(MATRIX_AIRFLOW),$(foreach p,$(MATRIX_PYDANTIC_AI),airflow-$(basename $(a))-pydantic-ai-$(basename $(p))))
MATRIX_OLDEST := airflow-$(basename $(firstword $(MATRIX_AIRFLOW)))-pydantic-ai-$(basename $(firstword $(MATRIX_PYDANTIC_AI)))
# The interpreter of every session: a name on PATH or a path (uv never downloads one here). Each
# interpreter gets its own venvs: .matrix/<interpreter>/airflow-A-pydantic-ai-P.
MATRIX_PYTHON ?= python3.11
MATRIX_ENV = .matrix/$(notdir $(MATRIX_PYTHON))/airflow-$*
# A newer Python for `make matrix-newer-python`: none comes from the package registries here (Debian 12
# has no python3.12/3.13 package, and uv's own downloads come from GitHub); pyenv's 3.13, when the
# machine has one, is used.
NEWER_PYTHON ?= $(firstword $(wildcard $(shell pyenv root 2>/dev/null)/versions/3.13*/bin/python3.13))
PYTEST_ARGS ?=
TOOLS := .tools
UV := $(TOOLS)/bin/uv
UV_VERSION := 0.13.9
export UV_PYTHON_DOWNLOADS := never

# uv installs the pinned set several times faster than pip (docs/compatibility.rst has the figures);
# --seed keeps pip in the venv for anyone who uses it. --compile-bytecode writes the .pyc files pip
# would: without them every `airflow` process (the CLI tests, the scheduler) compiles ~2,200 modules
# again (2.5-5 s each), since PYTHONDONTWRITEBYTECODE may be set.
# A src/*.egg-info left by an older setuptools build sits on the editable install's path: Airflow would see
# the package twice and show "Plugin ... already registered" on its Home page, so it goes first.
$(BIN)/.installed: pyproject.toml constraints.txt | $(UV)
	rm -rf src/*.egg-info
	$(UV) venv --quiet --seed --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python -c constraints.txt -e ".[test]"
	touch $@

install: $(BIN)/.installed

# The docs extra goes into the same .venv (autodoc imports the provider and Airflow).
$(BIN)/.docs-installed: $(BIN)/.installed
	$(UV) pip install --quiet --python $(BIN)/python -c constraints.txt -e ".[docs]"
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
release-check: | $(UV)
	UV=$(abspath $(UV)) PYTHON=$(PYTHON) .ci/release-check

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

# Every tier (what CI runs). The tiers alone, fastest first (tests/README.rst: which test goes where):
# test-unit in about a minute, test-dags in minutes, test-system (the scheduler, servers) the longest.
test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: install
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

test-dags: install
	$(BIN)/python -m pytest tests/dags $(PYTEST_ARGS)

test-system: install
	$(BIN)/python -m pytest tests/system $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check src tests example_dags bench scripts docs
	$(BIN)/ruff format --check src tests example_dags bench scripts docs
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix src tests example_dags bench scripts docs
	$(BIN)/ruff format src tests example_dags bench scripts docs

bench: install
	$(BIN)/python -m bench

# Side by side with apache-airflow-providers-common-ai on a local S3 server. The peer goes into
# bench/.peer with --no-deps (it runs on the Airflow and pydantic-ai of .venv), never into .venv.
bench-peer: install
	test -d bench/.peer || .tools/bin/uv pip install --quiet --no-deps --python $(BIN)/python --target bench/.peer apache-airflow-providers-common-ai==1.0.0
	$(BIN)/python -m bench --side-by-side

# A real CeleryExecutor deployment on 127.0.0.1 (issue 28): PostgreSQL and Redis from Debian's packages,
# a scheduler, a dag-processor, an api-server and two Celery workers, each with its own AIRFLOW_HOME; a durable
# task's retry lands on the other worker (tests/system/test_celery_workers.py says what it checks). Not part of
# `make test` or CI: it installs system packages (as root) and takes several minutes. Its own venv, so the
# Celery provider never enters .venv; the packages constraints.txt does not pin are pinned in
# constraints/celery-trial.txt.
CELERY_VENV := .celery/venv
CELERY_TRIAL_PACKAGES := 'apache-airflow-providers-celery[redis]' psycopg2-binary asyncpg
$(CELERY_VENV)/bin/.installed: pyproject.toml constraints.txt constraints/celery-trial.txt | $(UV)
	$(UV) venv --quiet --seed --allow-existing --python $(PYTHON) $(CELERY_VENV)
	$(UV) pip install --quiet --compile-bytecode --python $(CELERY_VENV)/bin/python \
		-c constraints.txt -c constraints/celery-trial.txt -e ".[test]" $(CELERY_TRIAL_PACKAGES)
	touch $@

celery-trial: $(CELERY_VENV)/bin/.installed
	@if ! command -v redis-server >/dev/null || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo -n"; fi; \
		$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq redis-server postgresql; \
	fi
	@groups=$(CURDIR)/.celery/groups; : > $$groups; \
	trap 'for g in $$(cat '"$$groups"'); do kill -9 -$$g 2>/dev/null; pkill -9 -s $$g; done; rm -f '"$$groups" EXIT INT TERM; \
	started=$$(date +%s); status=0; \
	CELERY_TRIAL_GROUPS=$$groups AIRFLOW_PYDANTIC_AI_CELERY_TRIAL=1 $(CELERY_VENV)/bin/python -m pytest \
		tests/system/test_celery_workers.py -p no:cacheprovider -s -v $(PYTEST_ARGS) || status=$$?; \
	echo "celery-trial: $$(( $$(date +%s) - started )) s"; exit $$status

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet uv==$(UV_VERSION)

# Issue 34: record three durable agents under pydantic-ai FROM, replay them under TO; fails when a step runs
# live. Venvs under .xrel/ (git-ignored). Not part of CI (it installs two releases).
cross-release: $(UV)
	@test -n "$(FROM)" && test -n "$(TO)" || { echo "usage: make cross-release FROM=2.68.0 TO=2.78.0"; exit 2; }
	UV=$(UV) XREL_PYTHON=$(MATRIX_PYTHON) scripts/cross_release.sh $(FROM) $(TO)

matrix-list:
	@for s in $(MATRIX_SESSIONS); do echo "matrix-$$s"; done

matrix: $(addprefix matrix-,$(MATRIX_SESSIONS))

matrix-oldest: matrix-$(MATRIX_OLDEST)

# One session: a fresh venv, the package with its `test` extra under that combination's constraints,
# then the whole suite. A missing constraints file is an error, never an unpinned install.
matrix-airflow-%: $(UV)
	@test -f constraints/airflow-$*.txt || { echo "no constraints/airflow-$*.txt; run make matrix-list"; exit 2; }
	$(UV) venv --quiet --clear --python $(MATRIX_PYTHON) $(MATRIX_ENV)
	$(UV) pip install --quiet --compile-bytecode --python $(MATRIX_ENV)/bin/python -c constraints/airflow-$*.txt -e ".[test]"
	@$(MATRIX_ENV)/bin/python -c "import sys; from importlib.metadata import version as v; \
		print('matrix session airflow-$*: Python', sys.version.split()[0], 'Airflow', v('apache-airflow'), \
		'pydantic-ai-slim', v('pydantic-ai-slim'))"
	$(MATRIX_ENV)/bin/python -m pytest -p no:cacheprovider $(PYTEST_ARGS)

# The latest combination on a newer Python (see NEWER_PYTHON); not part of `make matrix`.
matrix-newer-python:
	@test -n "$(NEWER_PYTHON)" || { echo "no Python 3.13 found (set NEWER_PYTHON=/path/to/python3.13)"; exit 2; }
	$(MAKE) matrix-airflow-$(basename $(lastword $(MATRIX_AIRFLOW)))-pydantic-ai-$(basename $(lastword $(MATRIX_PYDANTIC_AI))) \
		MATRIX_PYTHON=$(NEWER_PYTHON)

# Regenerate every constraints/*.txt from pyproject.toml: the two pinned versions, everything else
# the newest release that resolves on Python 3.11 / Linux, except for caps Airflow 3.2.2 needs and does
# not declare (3.3 declares or does not need them):
# - fastapi<0.137: with fastapi 0.165 its execution API fails to build (pydantic "Model
#   'TITerminalStatePayload' needs a discriminator field"); Airflow 3.3 declares fastapi<0.137 itself.
# - svcs<26.2: svcs 26.2 removes `svcs_registry` from the app state when a lifespan exits, and 3.2.2's
#   InProcessExecutionAPI ends its lifespan when the object is collected, which dag.test() does at once
#   ("'State' object has no attribute 'svcs_registry'"); 3.3 ties the lifespan to the transport instead.
# Without them every dag.test() task fails before it starts on Airflow 3.2.
# --prerelease=if-necessary-or-explicit: a pinned pre-release (apache-airflow==3.4.0b2) brings its own
# pre-release core and task SDK; every other package stays on its newest release.
AIRFLOW_3_2_CAPS := 'fastapi<0.137' 'svcs<26.2'
# The extras a user installs (pyproject.toml) are compiled too, so that each one resolves under every file
# (tests/system/test_extras_resolve.py checks it). google-genai 2.30-2.34 (pydantic-ai-slim[google]) need
# tenacity<9.2, which Airflow (tenacity>=8.3) accepts: the resolver picks 9.1.x.
INSTALL_EXTRAS := openai anthropic google bedrock mistral groq mcp s3
constraints: $(UV)
	mkdir -p constraints
	@set -e; for a in $(MATRIX_AIRFLOW); do for p in $(MATRIX_PYDANTIC_AI); do \
		out=constraints/airflow-$${a%.*}-pydantic-ai-$${p%.*}.txt; \
		printf 'apache-airflow==%s\npydantic-ai-slim==%s\n' $$a $$p > $(TOOLS)/pins.txt; \
		case $$a in 3.2.*) printf '%s\n' $(AIRFLOW_3_2_CAPS) >> $(TOOLS)/pins.txt;; esac; \
		$(UV) pip compile pyproject.toml --extra test $(addprefix --extra ,$(INSTALL_EXTRAS)) -c $(TOOLS)/pins.txt --python-version 3.11 \
			--python-platform x86_64-unknown-linux-gnu --prerelease=if-necessary-or-explicit \
			--no-header --no-annotate --quiet -o $$out; \
		echo "wrote $$out"; done; done

clean:
	rm -rf $(VENV) .celery .demo .pytest_cache .mypy_cache .ruff_cache docs/_build dist .matrix .tools
