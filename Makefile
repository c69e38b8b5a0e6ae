# Relay — every entry point. `make run` and `make test` install what they need themselves.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
SQS_VENV := .tools/sqs
# MariaDB for tests and the migration check (root over TCP, empty password, as on CI).
TEST_DATABASE_URL ?= mysql://root@127.0.0.1:3306
export TEST_DATABASE_URL

.PHONY: help
help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

$(UV):
	$(PYTHON) -m pip install --user --quiet 'uv>=0.5'

.PHONY: install
install: $(UV) ## install the workspace (uv, locked dependencies)
	$(UV) sync --locked --quiet

$(SQS_VENV)/bin/ministack: tools/sqs-server.txt | $(UV)
	$(UV) venv --quiet --python 3.11 $(SQS_VENV)
	$(UV) pip install --quiet --python $(SQS_VENV)/bin/python -r tools/sqs-server.txt
	touch $@

.PHONY: tools
tools: $(SQS_VENV)/bin/ministack ## install the local SQS server (ministack) in its own venv

.PHONY: run
run: install tools ## run the whole system locally (API on 127.0.0.1:$${PORT:-8000})
	$(UV) run --locked relay dev

.PHONY: test
test: install tools ## run every test (needs MariaDB and Redis on 127.0.0.1; see DEVELOPERS.md)
	$(UV) run --locked pytest

.PHONY: lint
lint: install ## ruff (lint + format check) and mypy
	$(UV) run --locked ruff check .
	$(UV) run --locked ruff format --check .
	$(UV) run --locked mypy

.PHONY: migrations-check
migrations-check: install ## alembic upgrade head + alembic check on MariaDB and SQLite
	$(UV) run --locked python tools/check_migrations.py

.PHONY: format
format: install ## apply ruff formatting and safe fixes
	$(UV) run --locked ruff check --fix .
	$(UV) run --locked ruff format .

.PHONY: clean
clean: ## remove local state (.relay/) and tool venvs
	rm -rf .relay .tools .pytest_cache .mypy_cache .ruff_cache
