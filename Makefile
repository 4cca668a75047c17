# uac — run `make help` for the list of targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: help install demo test test-fast test-kafka broker-jars lint bench clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install uac with its dev tools

demo: $(STAMP) ## Run the bundled example history through the embedded pipeline
	$(BIN)/uac --data-dir .uac/demo demo

test: $(STAMP) ## Run lint and the whole test suite (what CI runs)
	$(MAKE) lint
	$(BIN)/pytest -q

test-fast: $(STAMP) ## Run the tests not marked slow or kafka
	$(BIN)/pytest -q -m "not slow and not kafka"

test-kafka: $(STAMP) ## Run only the tests on the real Kafka broker (Java 17 + Maven)
	$(BIN)/pytest -q -m kafka

broker-jars: $(STAMP) ## Fetch the Kafka broker jars with Maven into deploy/kafka/.jars
	$(BIN)/python -c "from uac.streams.testbroker import *; print(resolve_jars(DEFAULT_POM, DEFAULT_JAR_CACHE))"

lint: $(STAMP) ## ruff + mypy (strict on uac/)
	$(BIN)/ruff check uac tests benchmarks
	$(BIN)/mypy

bench: $(STAMP) ## Run the benchmarks; prints a table, writes benchmarks/results.json
	$(BIN)/python -m benchmarks.run

clean: ## Remove the virtualenv, caches and demo data
	rm -rf $(VENV) .uac .pytest_cache .mypy_cache .ruff_cache .hypothesis
