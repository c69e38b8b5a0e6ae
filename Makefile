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
	$(UV) venv --quiet --clear --python 3.11 $(SQS_VENV)
	$(UV) pip install --quiet --python $(SQS_VENV)/bin/python -r tools/sqs-server.txt
	touch $@

.PHONY: tools
tools: $(SQS_VENV)/bin/ministack ## install the local SQS server (ministack) in its own venv

# LocalStack's open-source core (RELAY_LOCAL_SQS=localstack): it needs Python 3.13, found on
# the PATH or in pyenv; pinned by tools/localstack.txt, in its own venv like ministack.
LOCALSTACK_VENV := .tools/localstack
# (a pyenv shim may exist and still fail: each candidate must run.)
PYTHON313 := $(shell for p in $$(command -v python3.13) $(HOME)/.pyenv/versions/3.13*/bin/python3.13; do \
  "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null && { echo "$$p"; break; }; done)
$(LOCALSTACK_VENV)/installed: tools/localstack.txt | $(UV)
	@test -n "$(PYTHON313)" || { echo "make localstack: LocalStack's core needs Python 3.13, and none was found (python3.13 on the PATH, or pyenv install 3.13)" >&2; exit 1; }
	$(UV) venv --quiet --clear --python $(PYTHON313) $(LOCALSTACK_VENV)
	$(UV) pip install --quiet --python $(LOCALSTACK_VENV)/bin/python -r tools/localstack.txt
	touch $@

.PHONY: localstack
localstack: $(LOCALSTACK_VENV)/installed ## install LocalStack's core (SQS only, Python 3.13) in its own venv

# The local chain: anvil, solc and OpenZeppelin Contracts from the npm registry, pinned by
# tools/chain/package-lock.json; the forwarder and Relay's recipient compiled from source.
CHAIN_DIR := .tools/chain
$(CHAIN_DIR)/node_modules/.package-lock.json: tools/chain/package.json tools/chain/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "make chain: needs Node.js 20+ and npm (apt-get install nodejs npm)" >&2; exit 1; }
	mkdir -p $(CHAIN_DIR)
	cp tools/chain/package.json tools/chain/package-lock.json $(CHAIN_DIR)/
	cd $(CHAIN_DIR) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@test -x $(CHAIN_DIR)/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil || { echo "make chain: anvil did not install (linux x86-64 only)" >&2; exit 1; }

$(CHAIN_DIR)/build/contracts.json: $(CHAIN_DIR)/node_modules/.package-lock.json tools/chain/compile.mjs tools/chain/contracts/RelayRecipient.sol
	cd $(CHAIN_DIR) && node ../../tools/chain/compile.mjs build/contracts.json

.PHONY: chain
chain: $(CHAIN_DIR)/build/contracts.json ## install anvil + solc (npm) and compile the contracts into .tools/chain

.PHONY: run
run: install tools chain $(if $(filter localstack,$(RELAY_LOCAL_SQS)),localstack) ## run the whole system locally (API on 127.0.0.1:$${PORT:-8000}; RELAY_LOCAL_SQS=localstack for LocalStack)
	$(UV) run --locked relay dev

# Tests run three at a time (pytest-xdist): most of a test's time is spent waiting on the
# processes and servers it starts, so two cores carry three (13-15 -> 7-8 min here).
TEST_WORKERS ?= 3

TEST_SELECTION := not faults and not fuzz and not ops and not localstack and not readme and not cluster

.PHONY: test
test: install tools chain pipeline-deps ## run every test (needs MariaDB and Redis on 127.0.0.1; see DEVELOPERS.md)
	$(UV) run --locked pytest -n $(TEST_WORKERS) -m "$(TEST_SELECTION) and not solo"
	$(UV) run --locked pytest -m "$(TEST_SELECTION) and solo"

.PHONY: test-faults
test-faults: install tools chain ## the outage scenarios on the shipped defaults, every lane, real processes (~10 min; a CI step)
	$(UV) run --locked pytest -m "faults and not solo" tests/faults -n $(TEST_WORKERS)
	$(UV) run --locked pytest -m "faults and solo" tests/faults

.PHONY: test-ops
test-ops: install tools ## the operator's tools at scale on real processes (pause/drain/resume; a CI step)
	$(UV) run --locked pytest -m ops tests -v

.PHONY: test-cluster
test-cluster: install pipeline-deps ## the pipeline's report and archive on a Spark standalone cluster against local[2] (~2-4 min; a CI step)
	$(UV) run --locked pytest -m cluster services/pipeline/tests -v

.PHONY: test-localstack
test-localstack: install tools chain localstack ## the end-to-end tests, the DLQ redrive and make run on LocalStack (a CI step)
	@echo "LocalStack: localstack-core $$($(LOCALSTACK_VENV)/bin/python -c 'from importlib.metadata import version; print(version("localstack-core"))')"
	RELAY_LOCAL_SQS=localstack $(UV) run --locked pytest -m "ops or localstack or not (faults or fuzz)" -v \
	  tests/test_end_to_end.py \
	  tests/test_make_run.py::test_make_run_on_localstack_serves_a_transaction_and_ctrl_c_stops_it \
	  tests/test_operations.py::test_a_redrive_of_two_hundred_dead_letters_executes_each_exactly_once

.PHONY: test-readme
test-readme: install ## the README's commands on a fresh clone beside its own make run (~5 min; a CI step)
	$(UV) run --locked pytest -m readme tests/test_make_run.py -v

.PHONY: test-fuzz
test-fuzz: install tools chain ## fuzz the running API over its OpenAPI (schemathesis, ~3 min; a CI step)
	$(UV) run --locked pytest -m fuzz tests/fuzz -s

SOAK_MINUTES ?= 30
.PHONY: soak
soak: install tools ## the whole system at 100 tx/s while a nemesis breaks it, then a history check (SOAK_MINUTES, default 30)
	$(UV) run --locked python -m bench.soak --minutes $(SOAK_MINUTES)

.PHONY: test-stress
test-stress: install tools ## the load tests (1,000 transactions through two consumers)
	$(UV) run --locked pytest -m stress services/queue-consumer/tests

.PHONY: lint
lint: install ## ruff (lint + format check) and mypy
	$(UV) run --locked ruff check .
	$(UV) run --locked ruff format --check .
	$(UV) run --locked mypy

.PHONY: openapi
openapi: install ## write services/relay-api/openapi.json from the app (a test compares them)
	$(UV) run --locked python tools/openapi.py

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

# --- deploy checks ---
# docker-compose.yml, services/*/Dockerfile and infra/ checked without a Docker engine or AWS
# (docs/local.md, docs/deploy.md). Debian's docker-compose (v1) is used for `config` only: it
# validates the file against the Compose schema and interpolates it with .env.example.
COMPOSE_CHECK := docker-compose --project-directory . -f docker-compose.yml

.PHONY: check-deploy
check-deploy: install ## validate docker-compose.yml, the Dockerfiles and infra/ (no Docker needed)
	@command -v docker-compose >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "check-deploy: needs docker-compose: sudo apt-get install docker-compose" >&2; exit 1; fi; \
	  echo "installing docker-compose (apt)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; }
	$(COMPOSE_CHECK) --env-file .env.example config --quiet
	SQS_IMAGE=ministackorg/ministack $(COMPOSE_CHECK) --env-file .env.example config --quiet
	@# no secret has a default: with an empty env file, compose must refuse to interpolate
	@empty=$$(mktemp); trap 'rm -f "$$empty"' EXIT; \
	  if env -i PATH="$$PATH" $(COMPOSE_CHECK) --env-file "$$empty" config --quiet 2>"$$empty.err"; then \
	    echo "docker-compose.yml works without .env: a secret has a default" >&2; exit 1; fi; \
	  grep -q "MYSQL_PASSWORD" "$$empty.err" || { cat "$$empty.err" >&2; rm -f "$$empty.err"; exit 1; }; \
	  rm -f "$$empty.err"; echo "docker-compose.yml refuses to start without its secrets: ok"
	$(UV) run --locked hadolint services/*/Dockerfile
	$(UV) run --locked cfn-lint --include-checks I -- infra/cloudformation/*.yaml
	$(UV) run --locked pytest -q -p no:cacheprovider tests/deploy

# --- pipeline ---
# The PySpark pipeline (services/pipeline) needs a JVM and the JDBC drivers from Debian; its
# report test opens the HTML in Debian's chromium. Installed when missing and running as root.
PIPELINE_APT := $(strip \
  $(if $(shell command -v java 2>/dev/null),,default-jre-headless) \
  $(if $(wildcard /usr/share/java/mariadb-java-client.jar),,libmariadb-java) \
  $(if $(wildcard /usr/share/java/sqlite-jdbc.jar),,libxerial-sqlite-jdbc-java) \
  $(if $(shell command -v chromium 2>/dev/null),,chromium))

.PHONY: pipeline-deps
pipeline-deps: ## JVM, JDBC drivers and chromium for the pipeline (apt, when missing and root)
ifneq ($(PIPELINE_APT),)
	@if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(PIPELINE_APT); \
	else \
	  echo "pipeline-deps: missing $(PIPELINE_APT); run as root: apt-get install -y $(PIPELINE_APT)" >&2; \
	fi
endif

.PHONY: bench-pipeline
bench-pipeline: install pipeline-deps ## pipeline report over 1 M and 10 M seeded rows, local[2] → services/pipeline/bench/results/
	$(UV) run --locked python services/pipeline/bench/report_bench.py --results services/pipeline/bench/results

# A Spark standalone master and two workers (1 core, 1 GiB each) on 127.0.0.1 from the installed
# pyspark; the report runs on them (DATABASE_URL, else a seeded demo SQLite database), then all
# stop. Logs: .relay/pipeline-cluster/logs. SINCE (default -7d) and OUT choose the window and
# the output directory.
.PHONY: pipeline-cluster
pipeline-cluster: install pipeline-deps ## the pipeline report on a local Spark standalone cluster (master + 2 workers on 127.0.0.1), then stop it
	$(UV) run --locked python -m relay_pipeline.localcluster \
	  $(if $(DATABASE_URL),--database-url='$(DATABASE_URL)') $(if $(SINCE),--since='$(SINCE)') $(if $(OUT),--out='$(OUT)')
# --- end pipeline ---

# --- bench ---
# Relay benchmarks (docs/performance.md): ceilings (SQS receive+delete, MariaDB INSERT+COMMIT,
# a bare FastAPI endpoint) measured first in the same run, then the consumer, the accept path,
# status tiers and pickup latency; JSON + markdown in bench/results/. Needs MariaDB and Redis
# on 127.0.0.1 (as `make test`); starts its own SQS server (ministack) and relayer-stub.
BENCH := $(UV) run --locked python -m bench

.PHONY: bench
bench: install tools ## benchmarks against same-run ceilings (<= 10 min) → bench/results/
	$(BENCH) --spend-policy budget

.PHONY: bench-smoke
bench-smoke: install tools ## every benchmark scenario at tiny scale, no thresholds (CI)
	$(BENCH) --smoke

.PHONY: bench-profile
bench-profile: install tools ## py-spy profiles of the consumer and the API accept path
	$(BENCH) --profile
# --- end bench ---
