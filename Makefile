# One command runs the main job, one passes the tests (see README.md).
SHELL := /bin/bash
CARGO ?= cargo
# Every cargo command builds with --locked: what Cargo.lock pins, or an error if it would change.
DLQCTL := $(CARGO) run --locked --quiet -p dlqctl --
XTASK := $(CARGO) run --locked --quiet -p xtask --
# `make test`'s checks run debug binaries of one build: the workspace with its tests, the feature
# set `cargo test --workspace` resolves. A build of one package (`cargo run -p dlqctl`) resolves
# other features and compiles the AWS SDK again, most of a gigabyte of disk each time (what a CI
# machine has runs out); so the checks below build with BUILD_TESTED and run what it left in
# TESTED (cargo's target directory, however configured; asked once, when first used). The
# function binaries among them carry the workspace's features (dlqctl's credential providers too):
# the packages deployed are `make build`'s, and the smoke test's `cargo lambda watch` builds its own.
BUILD_TESTED := $(CARGO) build --locked --quiet --workspace --bins --tests
TARGET_DIR_OF = $(shell $(CARGO) metadata --no-deps --format-version 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
TESTED = $(eval TESTED := $(TARGET_DIR_OF)/debug)$(TESTED)

.PHONY: bench-console console console-e2e demo book deny test test-ledgers watch deploy-code bench-ledgers bench-e2e bench-e2e-ci bench-evidence bench-evidence-ci bench-replay bench-audit bench-storm bench-storm-ci bench-cold-start bench-memory bench-memory-ci local-up local-stack local-down local-status unit lint bench tools infra-check build deploy simulate simulate-ci mutants fuzz fuzz-ci

## demo: start the local stack if needed and run the pipeline on a generated workload
demo: local-up
	$(XTASK) demo

TOOLS = .local-aws/tools-venv/bin
# The benchmarks' Python (pydantic, Powertools, boto3), installed on first use.
BENCH_VENV := .local-aws/bench-venv/.ok-v3

## book: the documentation (docs/) rendered with mdBook into target/book; mdBook is installed
## under .local-aws/ on first use (a few minutes of compiling)
MDBOOK := .local-aws/mdbook/bin/mdbook
book: $(MDBOOK)
	$(MDBOOK) build docs

$(MDBOOK):
	$(CARGO) install --locked --quiet --root .local-aws/mdbook mdbook --version 0.5.4

## test: format check, unit and integration tests against the local stack, template checks,
## and the smoke test of the four functions under cargo lambda
test: local-stack tools
	$(CARGO) fmt --all -- --check
	tools/deny.sh
	$(BUILD_TESTED)
	$(CARGO) test --locked --workspace --no-fail-fast
	$(MAKE) --no-print-directory test-ledgers
	tests/browser/run.sh $(TESTED)
	$(MAKE) --no-print-directory simulate-ci
	tools/mutants.sh --check
	$(MAKE) --no-print-directory fuzz-ci
	$(MAKE) --no-print-directory bench-e2e-ci
	$(MAKE) --no-print-directory bench-evidence-ci
	$(MAKE) --no-print-directory bench-storm-ci
	$(MAKE) --no-print-directory bench-memory-ci
	$(MAKE) --no-print-directory infra-check DLQCTL=$(TESTED)/dlqctl
	infra/smoke.sh $(TESTED)

## test-ledgers: the suites about posting (consume, replay, reconcile and audit, a period's fan-out, least privilege;
## FIFO on PostgreSQL) again on your PostgreSQL and on an HTTP general ledger, and the demo's
## identity on PostgreSQL
# --workspace (with the suite named): the workspace's own build, not a rebuild for one package;
# the suites are modules of one test binary (tests/integration.rs), chosen by name.
POSTING_SUITES := consume:: replay:: audit:: reconcile:: iam::
test-ledgers: local-stack
	DLQ_TEST_LEDGER=postgres $(CARGO) test --locked --workspace --no-fail-fast --test integration -- $(POSTING_SUITES) fifo::
	DLQ_TEST_LEDGER=http $(CARGO) test --locked --workspace --no-fail-fast --test integration -- $(POSTING_SUITES)
	$(BUILD_TESTED)
	$(TESTED)/xtask --ledger postgres demo

SIMULATE := $(CARGO) run --locked --release --quiet -p recon-testkit --bin simulate --
FROM ?= 0
COUNT ?= 10000
BUDGET ?= 1800

## simulate: the deterministic simulator over seeds FROM..FROM+COUNT, within BUDGET seconds;
## SEED=n replays one seed with its trace
simulate:
ifdef SEED
	$(SIMULATE) --seed $(SEED)
else
	$(SIMULATE) --from $(FROM) --count $(COUNT) --budget $(BUDGET)
endif

## simulate-ci: a time-boxed batch (150 s) of seeds new to each commit (derived from its hash)
simulate-ci:
	$(SIMULATE) --from $$(( 0x$$(git rev-parse --short=7 HEAD 2>/dev/null || echo 0) * 1000 )) --count 100000 --budget 150

## mutants: each bug of the mutant catalogue (shared/testkit/mutants) applied to a clean copy of
## HEAD, the simulator run until it finds it (SEEDS per mutant, default 1000; MUTANT=name for one)
mutants:
	SEEDS=$(or $(SEEDS),1000) FROM=$(FROM) MUTANT=$(MUTANT) tools/mutants.sh

FUZZ := $(CARGO) run --locked --release --quiet -p recon-testkit --bin fuzz --
FUZZ_COUNT ?= 1000000

## fuzz: FUZZ_COUNT mutated inputs into each decoder (body, dead letter, replay payload, manifest,
## evidence bundle); TARGET=name for one, FUZZ_SEED=n for another sequence
fuzz:
	$(FUZZ) --count $(FUZZ_COUNT) $(if $(TARGET),--target $(TARGET)) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

## fuzz-ci: 20,000 inputs per decoder from a seed new to each commit
fuzz-ci:
	$(FUZZ) --count 20000 --seed $$(( 0x$$(git rev-parse --short=7 HEAD 2>/dev/null || echo 0) ))

tools:
	infra/tools.sh install

## deny: the crates' licenses, duplicate versions and sources against deny.toml (cargo-deny), with
## a self-test that each check fails on a copy of deny.toml with one of its rules undone
deny: tools
	tools/deny.sh

## infra-check: cfn-lint, checkov, the template check (rules between resources, IAM grants; with its self-test), and
## the deploy rehearsal (SAM translated offline; what LocalStack runs created through its CloudFormation)
infra-check: tools local-stack
	$(DLQCTL) infra-spec > .local-aws/infra-spec.json
	$(TOOLS)/cfn-lint infra/template.yaml
	$(TOOLS)/checkov -f infra/template.yaml --framework cloudformation --quiet --compact --skip-download
	$(TOOLS)/python infra/check_template.py infra/template.yaml .local-aws/infra-spec.json --self-test
	$(TOOLS)/python infra/rehearse.py infra/template.yaml .local-aws/infra-spec.json --localstack http://127.0.0.1:$${LOCALSTACK_PORT:-4566}
	$(TOOLS)/python infra/deploy_code.py infra/template.yaml .local-aws/infra-spec.json --self-test http://127.0.0.1:$${LOCALSTACK_PORT:-4566}

## build: the five functions for Lambda (arm64, provided.al2023) with cargo lambda (zig cross-links),
## optimised for size (LAMBDA_PROFILE, default lambda-small: opt-level s, fat LTO — every package
## under 5 MB, the per-message path 0–10 % slower on x86, see BENCHMARKS.md; LAMBDA_PROFILE=release
## for the release profile); prints each package's size
LAMBDA_PROFILE ?= lambda-small
build: tools
	@$(TOOLS)/python -c 'import ziglang' 2>/dev/null || $(TOOLS)/pip install --quiet --disable-pip-version-check --require-hashes -r infra/requirements/zig.txt
	PATH="$(CURDIR)/$(TOOLS):$$PATH" cargo lambda build --locked --profile $(LAMBDA_PROFILE) --arm64 --bin consumer --bin enricher --bin replay --bin reference-audit --bin control
	python3 bench/package_sizes.py

## deploy: build with AWS SAM (BuildMethod rust-cargolambda) and deploy; guided the first time.
## SAM builds with --release: the environment gives that profile lambda-small's settings, so the
## packages it deploys are the ones `make build` measures
SIZE_PROFILE_ENV := CARGO_PROFILE_RELEASE_OPT_LEVEL=s CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
deploy: tools
	@command -v sam >/dev/null || { echo "deploy needs the AWS SAM CLI on PATH (e.g. pip install aws-sam-cli)"; exit 1; }
	PATH="$(CURDIR)/$(TOOLS):$$PATH" $(SIZE_PROFILE_ENV) sam build --beta-features --template-file infra/template.yaml
	if [ -f samconfig.toml ]; then sam deploy; else sam deploy --guided; fi

## watch: run the four functions under cargo lambda watch against the local stack, with the
## environment the template would give them (dlqctl env); invoke with cargo lambda invoke
watch: local-up tools
	@mkdir -p .local-aws
	$(DLQCTL) env > .local-aws/functions.env
	PATH="$(CURDIR)/$(TOOLS):$$PATH" cargo lambda watch --env-file .local-aws/functions.env

## deploy-code: new code for the four functions of a deployed stack (STACK=name) with cargo lambda
## deploy, keeping the role, environment and settings the stack gave them; DRY=1 for cargo lambda's dry run
deploy-code: build
	@test -n "$(STACK)" || { echo "make deploy-code STACK=<the deployed stack's name> [DRY=1]"; exit 2; }
	$(DLQCTL) infra-spec > .local-aws/infra-spec.json
	PATH="$(CURDIR)/$(TOOLS):$$PATH" $(TOOLS)/python infra/deploy_code.py infra/template.yaml .local-aws/infra-spec.json $(STACK) $(if $(DRY),--dry)

## console: the operator console on loopback against the local stack (local sign-in: a person in a role)
console: local-up
	$(DLQCTL) console

## console-e2e: the console's browser tests in Debian's Chromium (installed on first use); SCREENSHOTS=docs/console
## also refreshes the README's screenshots
console-e2e: local-stack
	$(BUILD_TESTED)
	tests/browser/run.sh $(TESTED)

## local-up: start LocalStack + DynamoDB Local (installing them on first use) and create the resources
local-up: local-stack
	$(XTASK) setup

local-stack:
	infra/local/stack.sh up

## local-down: stop the local stack
local-down:
	infra/local/stack.sh down

local-status:
	infra/local/stack.sh status

## unit: tests that need no local stack
unit:
	$(CARGO) test --locked --workspace --lib --bins

## lint: rustfmt and clippy, warnings are errors
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

## bench: the per-message decision path, Rust (criterion) and the source document's Python side by side
bench: $(BENCH_VENV)
	$(CARGO) bench --locked -p recon-core --bench decision_path
	.local-aws/bench-venv/bin/python bench/python_baseline.py

## bench-ledgers: cost per committed message on each ledger, side by side on the local stack
## (DynamoDB Local, an HTTP GL with its dedup table, PostgreSQL): messages/s, ms and requests or
## statements per message
bench-ledgers: local-stack
	$(CARGO) run --locked --release --quiet -p xtask -- bench ledger-cost --count $(or $(COUNT_LEDGER),2000)

## bench-e2e: the same messages (valid, duplicates, poison) through our consumer and through a
## Powertools for Python consumer (BatchProcessor, idempotency on DynamoDB, pydantic), pumped the
## same way on the local stack; then again with DynamoDB 5 ms further away. COUNT_E2E=n messages
E2E = --python .local-aws/bench-venv/bin/python
bench-e2e: local-stack $(BENCH_VENV)
	$(CARGO) run --locked --release --quiet -p xtask -- bench e2e $(E2E) --count $(or $(COUNT_E2E),2000)

## bench-console: the console's reads (triage, pages of envelopes, one envelope, requests) asked of
## the control plane at a backlog of CONSOLE_ENVELOPES PENDING envelopes (default 100000)
bench-console: local-stack
	$(CARGO) run --locked --release --quiet -p xtask -- bench console --envelopes $(or $(CONSOLE_ENVELOPES),100000)

## bench-replay: how fast the replay drains a DLQ backlog (COUNT_REPLAY envelopes, every gate on, no
## rate limit), as one invocation and as INVOCATIONS concurrent ones, then again with DynamoDB
## LATENCY_MS away (default 5; 0: not again)
bench-replay: local-stack
	$(CARGO) run --locked --release --quiet -p xtask -- bench replay-drain --count $(or $(COUNT_REPLAY),2000) --invocations $(or $(INVOCATIONS),4) --latency-ms $(or $(LATENCY_MS),5)

## bench-audit: the audit trail's ceiling: appends per second with 1, 4, 16 and 64 writers sharing
## one log and each with its own, the chains they spread over, transactions and head reads per
## append, appends that gave up, latency; on DynamoDB Local and again through a 5 ms delay line
## (AUDIT_SECONDS, AUDIT_WRITERS, LATENCY_MS)
AUDIT_WRITERS ?= 1,4,16,64
bench-audit: local-stack
	$(CARGO) run --locked --release --quiet -p xtask -- bench audit-ceiling --seconds $(or $(AUDIT_SECONDS),10) --writers $(AUDIT_WRITERS) --latency-ms $(or $(LATENCY_MS),5)

## bench-storm: the bad day: 100,000 transactions at 400/s through a ledger outage (from 30 % to
## 60 % of them), the backlog drained by the sweep (DRAIN=manual: one manual replay); per-phase
## rates, drain time, requests and write units per message, cost, projection to AWS's limits
## (STORM_MESSAGES, STORM_RATE, DRAIN)
bench-storm: local-stack
	$(CARGO) run --locked --release --quiet -p xtask -- bench storm --messages $(or $(STORM_MESSAGES),100000) --rate $(or $(STORM_RATE),400) --drain $(or $(DRAIN),sweep)

## bench-cold-start: each function's init time and first invocation against a mock Lambda runtime
## API (release builds for this machine, the local stack behind it), peak memory, binary sizes
COLD_START := target/release/consumer=events/consumer-sqs-batch.json \
  target/release/enricher=events/enricher-dlq-batch.json \
  target/release/replay=events/replay-scheduled.json \
  target/release/reference-audit=events/reference-stream.json
bench-cold-start: local-up
	$(CARGO) build --locked --release --quiet --bin consumer --bin enricher --bin replay --bin reference-audit
	@mkdir -p .local-aws
	$(DLQCTL) env > .local-aws/cold-start.env
	python3 bench/cold_start.py --env-file .local-aws/cold-start.env --runs $(or $(RUNS),10) $(COLD_START)

## bench-memory: each function, built as make build builds it (the lambda-small profile), under
## the CPU share Lambda gives each memory size (MEMORY, in MB; a CPU cgroup, so a writable cgroup
## filesystem: root, as a rule): init, then WARM invocations per process back to back (fresh
## batches of ten for the consumer and the enricher), their p50 and p99, CPU, GB-ms, peak memory
MEMORY ?= 128,256,512,768,1024,1769
bench-memory: local-up
	$(CARGO) build --locked --profile lambda-small --quiet --bin consumer --bin enricher --bin replay --bin reference-audit
	@mkdir -p .local-aws
	$(DLQCTL) env > .local-aws/cold-start.env
	python3 bench/cold_start.py --env-file .local-aws/cold-start.env --runs $(or $(RUNS),3) \
	  --warm $(or $(WARM),50) --memory $(MEMORY) $(subst target/release/,target/lambda-small/,$(COLD_START))

## bench-memory-ci: the harness of bench-cold-start and bench-memory runs (debug builds, a
## deployment of its own, one cold start and three warm invocations of each function; under one
## vCPU's share where this machine lets a process's CPU be limited). Figures, not checks.
bench-memory-ci: local-stack
	$(BUILD_TESTED)
	@mkdir -p .local-aws
	$(TESTED)/xtask --prefix bench-memory-ci setup > /dev/null
	$(TESTED)/dlqctl --prefix bench-memory-ci env > .local-aws/bench-memory-ci.env
	limit=$$(python3 bench/cold_start.py --can-limit-cpu && echo "--memory 1769"); \
	python3 bench/cold_start.py --env-file .local-aws/bench-memory-ci.env --runs 1 --warm 3 --no-sizes $$limit \
	  $(subst target/release/,$(TESTED)/,$(COLD_START))

## bench-evidence: reconcile (one period, the whole history; one segment, several) and evidence
## export as their own processes, timed with their peak memory, over POSTINGS postings (default
## 1,000,000) in PERIODS periods loaded into DynamoDB Local; then audit verify, whole and continued
## from a seal, over AUDIT_RECORDS records (default 100,000) under SEALS seals (default 10);
## BASELINE_DLQCTL=path verifies the whole trail with another build's dlqctl too, beside this one
bench-evidence: local-stack
	$(CARGO) build --locked --release --quiet -p dlqctl -p xtask --bin dlqctl --bin xtask
	target/release/xtask bench evidence --dlqctl target/release/dlqctl --postings $(or $(POSTINGS),1000000) --periods $(or $(PERIODS),12) \
	  --audit-records $(or $(AUDIT_RECORDS),100000) --seals $(or $(SEALS),10) \
	  $(if $(BASELINE_DLQCTL),--baseline-dlqctl $(BASELINE_DLQCTL))

## bench-evidence-ci: the same on 2,400 postings and 800 audit records (a check that it runs; the
## figures mean nothing)
bench-evidence-ci: local-stack
	$(BUILD_TESTED)
	$(TESTED)/xtask bench evidence --dlqctl $(TESTED)/dlqctl --postings 2400 --periods 12 --audit-records 800 --seals 4

## bench-storm-ci: the storm on 4,000 transactions, the ledger down for half of them long enough
## to dead-letter some (a check that the outage, the dead letters and the sweep end with every
## transaction committed once and the reconciliation holding; the figures mean nothing)
bench-storm-ci: local-stack
	$(BUILD_TESTED)
	$(TESTED)/xtask bench storm --messages 4000 --rate 300 --outage 0.2,0.7 --sweep-every 10

## bench-e2e-ci: the same harness on 40 messages (a check that it runs; the figures mean nothing)
bench-e2e-ci: local-stack $(BENCH_VENV)
	$(BUILD_TESTED)
	$(TESTED)/xtask bench e2e $(E2E) --count 40 --latency-ms 1

$(BENCH_VENV):
	python3 -m venv .local-aws/bench-venv
	.local-aws/bench-venv/bin/pip install --quiet --disable-pip-version-check --require-hashes \
	  -r infra/requirements/bench.txt
	touch $@
