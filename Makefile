# One command runs the main job, one passes the tests (see README.md).
SHELL := /bin/bash
CARGO ?= cargo
DLQCTL := $(CARGO) run --quiet -p dlqctl --

.PHONY: demo test local-up local-stack local-down local-status unit lint bench

## demo: start the local stack if needed and run the pipeline on a generated workload
demo: local-up
	$(DLQCTL) demo

## test: format check, unit tests and integration tests against the local stack
test: local-stack
	$(CARGO) fmt --all -- --check
	$(CARGO) test --workspace --no-fail-fast

## local-up: start LocalStack + DynamoDB Local (installing them on first use) and create the resources
local-up: local-stack
	$(DLQCTL) setup

local-stack:
	infra/local/stack.sh up

## local-down: stop the local stack
local-down:
	infra/local/stack.sh down

local-status:
	infra/local/stack.sh status

## unit: tests that need no local stack
unit:
	$(CARGO) test --workspace --lib --bins

## lint: rustfmt and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## bench: the per-message decision path, Rust (criterion) and the source document's Python side by side
bench: .local-aws/bench-venv/.ok
	$(CARGO) bench -p recon-dlq --bench decision_path
	.local-aws/bench-venv/bin/python bench/python_baseline.py

.local-aws/bench-venv/.ok:
	python3 -m venv .local-aws/bench-venv
	.local-aws/bench-venv/bin/pip install --quiet --disable-pip-version-check 'pydantic==2.13.4'
	touch $@
