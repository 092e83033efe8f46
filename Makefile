# chatstream — the front door. `make test` and `make local` set up everything they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export SAM_CLI_TELEMETRY := 0
export AWS_DEFAULT_REGION ?= us-east-1
# Commands that talk to a real account take the region from the caller's AWS configuration (the
# profile), never from the local default above: without this, us-east-1 would override the profile's region.
AWS_ACCOUNT_ENV := $(if $(filter file,$(origin AWS_DEFAULT_REGION)),env -u AWS_DEFAULT_REGION)

.PHONY: help venv lint typecheck unit streams streams-spread streams-fuzz checks pytest lambda-python \
	lambda-python-unit lambda-python-stack validate build test local chat deploy clean browser-deps screenshot
LOCAL_PATH := PYTHONPATH=local:layers/chatstream:layers/streaming-runtime
# The tests run make's commands (make local, make invoke...) as a user runs them: outside this make, whose flags and
# jobserver (`make test` runs its parts side by side) are not theirs.
TEST_ENV := env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL

help:
	@echo "make local     run the whole pipeline on this machine (http://127.0.0.1:3000)"
	@echo "make chat      a terminal chat client (URL=... for a deployed Function URL)"
	@echo "make redrive   re-process the consumer's dead-letter queue (STACK=... ARGS=--dry-run)"
	@echo "make delete    delete a deployed stack: detach its caller policy, delete it, say what it kept (STACK=...)"
	@echo "make limits    show, set or lift one caller's own limits (STACK=... OWNER=... ARGS=\"--turns-at-once 2\")"
	@echo "make invoke    sam local invoke without Docker: FUNCTION=ProxyFunction EVENT=events/proxy-generate.json"
	@echo "make smoke     check a deployment, one line per check (URL=https://<id>.lambda-url.<region>.on.aws)"
	@echo "make token     an access token for the local stack in the JWT mode (SUB=alice LIFETIME=-60 AUDIENCE=other)"
	@echo "make test      lint, type-check, checkov, tests (again on Python 3.13), sam validate --lint, sam build (what CI runs)"
	@echo "make bench     chatstream vs direct streaming vs per-token pipeline (bench/results.md)"
	@echo "make capacity  docs/CAPACITY.md from bench/results.json: capacity and latency on AWS, on paper"
	@echo "make chaos     200 chats under injected faults; prints one chaos: line (ARGS=--cpu-stress: one core kept busy)"
	@echo "make build     sam build"
	@echo "make deploy    sam deploy --guided"
	@echo "make lint, typecheck, scan, unit, streams, lambda-python, validate, checks   the parts of make test (docs/DEVELOPING.md)"
	@echo "make pytest    every test once, in the development environment (PYTEST_ARGS=... passes options)"
	@echo "make screenshot  refresh docs/screenshot.png from the browser test; make clean  remove build and caches"
	@echo "make venv, browser-deps   the development environment and the browser tests' Chromium (make test makes both)"

venv: $(STAMP)

$(STAMP): requirements/dev.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "chatstream needs Python 3.11 or newer: $(PYTHON) is $$($(PYTHON) --version 2>&1); run make PYTHON=python3.11 …" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements/dev.txt
	touch $(STAMP)

lint: $(STAMP)
	$(NICE) $(BIN)/ruff check .
	$(NICE) $(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(NICE) $(BIN)/mypy

pytest: $(STAMP) browser-deps
	$(TEST_ENV) $(BIN)/pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(NICE) $(TEST_ENV) $(BIN)/pytest tests/unit $(PYTEST_ARGS)

validate: $(STAMP)
	$(NICE) $(BIN)/sam validate --lint --region $(AWS_DEFAULT_REGION)

build: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(NICE) $(BIN)/sam build

# What CI runs: every test `make pytest` runs, and the rest, in two steps. First the development environments
# (Python 3.13's beside this one) and the browser. Then, side by side: the tests that stream against timers (`make
# streams` and the local-stack part of `make lambda-python`) at normal priority, and everything that keeps no timer
# (`make checks`) at the lowest, so that it runs on the CPU the streaming tests leave idle while they wait.
test:
	$(MAKE) --no-print-directory -j3 --output-sync=target venv browser-deps $(LAMBDA_PYTHON_ENV)
	$(MAKE) --no-print-directory -j5 --output-sync=target streams-spread streams-fuzz \
		$(if $(PYTHON313),lambda-python-stack) checks

# The unit tests (fake time) on both Pythons, mypy, sam build, checkov, sam validate and ruff, the longest first, at
# niceness 19: each of their recipes runs under $(NICE).
checks: NICE := nice -n 19
checks: unit lambda-python-unit typecheck build scan validate lint

# The integration and e2e tests: their files spread over STREAMS_WORKERS processes (pytest-xdist; a file's tests stay
# in one process, in order, so a module's stack serves them all), and beside them the HTTP API's fuzzing in a process
# of its own (its schemathesis cases are built when its file is collected: one process collects it, not every worker).
STREAMS_WORKERS ?= 2
STREAMS_FUZZ := tests/integration/test_fuzz_http.py
streams: $(STAMP) browser-deps
	$(MAKE) --no-print-directory -j2 --output-sync=target streams-spread streams-fuzz

# browser-deps comes before (make test's first step, make streams' prerequisite): with a phony prerequisite of its own,
# make -j would start the later goals' jobs before this one.
streams-spread: $(STAMP)
	$(TEST_ENV) $(BIN)/pytest -n $(STREAMS_WORKERS) --dist loadfile --ignore=$(STREAMS_FUZZ) tests/integration tests/e2e \
		$(PYTEST_ARGS)

streams-fuzz: $(STAMP)
	$(TEST_ENV) $(BIN)/pytest $(STREAMS_FUZZ) $(PYTEST_ARGS)

# Lambda runs the functions on Python 3.13; the suite above runs on $(PYTHON). Where a Python 3.13 exists (found as
# the builds find it, make/bytecode.mk), the unit tests of what Lambda runs (the layers, the functions, the client),
# the streaming runtime's protocol tests and the tests that run each function on the local stack run again on it, in
# a virtual environment of its own made from the same pins, where the local Lambda runs the functions on 3.13 too.
# The tests of the development tools (the emulators, chaos, bench) run on $(PYTHON) only. With none, one warning line;
# under CI (CI=true), an error: CI must run them on 3.13.
include make/bytecode.mk
VENV313 := .venv-3.13
LAMBDA_PYTHON_ENV = $(if $(PYTHON313),$(VENV313)/.installed)
LAMBDA_PYTHON_UNIT := tests/unit $(addprefix --ignore=tests/unit/test_,moto_fixes.py moto_patches.py chaos_checks.py \
	chaos_client.py chaos_inject.py chaos_plan.py chaos_readback.py chaos_run.py bench_cost.py bench_procstat.py \
	bench_records.py bench_jwt.py bench_budgets.py bench_coldstart_against.py local_model_replies.py local_resources.py iam.py \
	ops_delete.py bench_capacity.py bench_quote.py docs_links.py docs_wording.py)
LAMBDA_PYTHON_STACK := $(addprefix tests/integration/test_,streaming_runtime_protocol.py local_stack.py proxy.py)
$(VENV313)/.installed: requirements/dev.txt
	test -x $(VENV313)/bin/python || "$(PYTHON313)" -m venv $(VENV313)
	$(VENV313)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/dev.txt
	touch $@

# Its two parts: the unit tests (fake time), and the tests that stream through the local stack (`make test` runs each
# beside the tests of its kind).
ifeq ($(PYTHON313),)
ifeq ($(CI),true)
lambda-python lambda-python-unit lambda-python-stack:
	@echo "error: no Python 3.13 found (set PYTHON313 to one): under CI=true the tests must run again on Lambda's Python" >&2; exit 1
else
lambda-python lambda-python-unit lambda-python-stack:
	@echo "warning: no Python 3.13 found (set PYTHON313 to one): the tests ran on $$($(PYTHON) -V 2>&1) only" >&2
endif
else
lambda-python: $(VENV313)/.installed
	PATH="$(CURDIR)/$(VENV313)/bin:$$PATH" $(TEST_ENV) $(VENV313)/bin/pytest -q $(LAMBDA_PYTHON_UNIT) \
		$(LAMBDA_PYTHON_STACK) $(PYTEST_ARGS)

lambda-python-unit: $(VENV313)/.installed
	PATH="$(CURDIR)/$(VENV313)/bin:$$PATH" $(NICE) $(TEST_ENV) $(VENV313)/bin/pytest -q $(LAMBDA_PYTHON_UNIT) \
		$(PYTEST_ARGS)

lambda-python-stack: $(VENV313)/.installed
	PATH="$(CURDIR)/$(VENV313)/bin:$$PATH" $(TEST_ENV) $(VENV313)/bin/pytest -q $(LAMBDA_PYTHON_STACK) $(PYTEST_ARGS)
endif

# Debian's Chromium for the browser test (tests/e2e/test_browser.py drives it with Playwright, which never
# downloads a browser of its own). Installed with apt-get when missing; where it cannot be, apt's own last lines say
# why and the test skips, but under CI (CI=true) the target fails: CI must run every test.
CHROMIUM ?= /usr/bin/chromium
browser-deps:
	@if [ ! -x "$(CHROMIUM)" ] && command -v apt-get >/dev/null 2>&1; then \
		sudo=; [ "$$(id -u)" = 0 ] || sudo="sudo -n"; \
		echo "installing Debian's chromium for the browser test"; \
		log=$$(mktemp); \
		{ $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium; } \
			>"$$log" 2>&1 || { echo "apt-get failed:" >&2; tail -n 20 "$$log" >&2; }; \
		rm -f "$$log"; \
	fi; \
	if [ ! -x "$(CHROMIUM)" ] && [ "$(CI)" = true ]; then \
		echo "error: no Chromium at $(CHROMIUM) (see above): under CI=true the browser test must run" >&2; \
		exit 1; \
	elif [ ! -x "$(CHROMIUM)" ]; then \
		echo "warning: no Chromium at $(CHROMIUM): the browser test will be skipped" >&2; \
	fi

# Refresh docs/screenshot.png (docs/HTTP_API.md's, of the page): the browser test's mid-stream screenshot.
screenshot: $(STAMP) browser-deps
	CHATSTREAM_SCREENSHOT=docs/screenshot.png $(TEST_ENV) $(BIN)/pytest tests/e2e/test_browser.py -k grows $(PYTEST_ARGS)

# The whole pipeline on this machine (LOCAL_STACK.md). ARGS=--verbose shows every component's logs.
local: $(STAMP)
	$(LOCAL_PATH) exec $(BIN)/python -m chatstream_local $(ARGS)

# `make chat`, `make invoke` and `make smoke` do not echo their command: their stdout is the reply, the payload,
# the checks. The relay `make chat` and `make smoke` talk to: URL, else the local stack on CHATSTREAM_PORT when it is set, else the
# client's own default (CHATSTREAM_URL, else the local stack's default port).
CLIENT_URL = $(or $(URL),$(if $(CHATSTREAM_PORT),http://127.0.0.1:$(CHATSTREAM_PORT)))

chat: $(STAMP)
	@PYTHONPATH=client $(BIN)/python -m chatstream_client.cli $(if $(CLIENT_URL),--url $(CLIENT_URL)) $(ARGS)

deploy: build
	$(AWS_ACCOUNT_ENV) $(BIN)/sam deploy --guided

clean:
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache tests/e2e/js/node_modules $(VENV313)

# Re-process ConsumerDLQ (docs/OPERATIONS.md) with the operator command in ops/ (no Lambda layer holds it; it shares
# the consumer's core from the layer's package). STACK=<stack name> reads the queue, table and stream from the
# stack's outputs (or set DLQ_URL / CHAT_TABLE_NAME); ARGS="--dry-run --max 10" passes options through.
.PHONY: redrive
redrive: $(STAMP)
	$(AWS_ACCOUNT_ENV) PYTHONPATH=ops:layers/chatstream $(BIN)/python -m chatstream_ops.redrive $(if $(STACK),--stack-name $(STACK)) $(ARGS)

# One caller's own limits (budgets per caller): shown, or set with ARGS="--turns-at-once 2 --tokens-per-day 50000"
# (0: no limit; default: the deployment's), or all lifted with ARGS=--lift. OWNER is the owner the relay's
# "turn refused" log lines name (anonymous under FunctionUrlAuthType NONE).
.PHONY: limits
limits: $(STAMP)
	@test -n "$(OWNER)" || { echo "make limits needs OWNER=<owner>, as the relay's 'turn refused' log lines name it (anonymous under NONE)" >&2; exit 2; }
	$(AWS_ACCOUNT_ENV) PYTHONPATH=ops:layers/chatstream $(BIN)/python -m chatstream_ops.limits $(if $(STACK),--stack-name $(STACK)) --owner '$(OWNER)' $(ARGS)

# Delete a deployed stack (docs/DEPLOY.md, "Tear down"): detaches the caller policy from every user, role and group,
# deletes the stack, reports what it kept (the table) and deletes data only once asked. ARGS=--yes-delete-data
# deletes queued messages and the kept table without asking.
.PHONY: delete
delete: $(STAMP)
	@test -n "$(STACK)" || { echo "make delete needs STACK=<stack name>" >&2; exit 2; }
	$(AWS_ACCOUNT_ENV) PYTHONPATH=ops:layers/chatstream $(BIN)/python -m chatstream_ops.delete --stack-name $(STACK) $(ARGS)

# Fault injection under load (chaos/run.py; docs/RELIABILITY.md). ARGS="--chats 50 --verbose" passes options through;
# ARGS=--cpu-stress keeps one core busy for the whole run.
.PHONY: chaos scan
chaos: $(STAMP)
	PYTHONPATH=local:client:ops:layers/chatstream:layers/streaming-runtime:. $(BIN)/python -m chaos.run $(ARGS)

# The IaC security scanner (checkov), in its own virtualenv: its dependencies conflict with the pinned SAM CLI set.
# Installed without compiling its modules: checkov runs once a test run and compiles the ones it imports (31 s of
# CPU to install and 3 s more to run, against 37 s to install compiled).
SCAN_VENV := .venv-scan
SCAN_STAMP := $(SCAN_VENV)/.installed
$(SCAN_STAMP): requirements/scan.txt
	test -x $(SCAN_VENV)/bin/python || $(PYTHON) -m venv $(SCAN_VENV)
	$(NICE) $(SCAN_VENV)/bin/python -m pip install --quiet --no-compile --disable-pip-version-check -r requirements/scan.txt
	touch $(SCAN_STAMP)

scan: $(SCAN_STAMP)
	$(NICE) $(SCAN_VENV)/bin/checkov --quiet --compact --skip-download --framework cloudformation --file template.yaml

# The benchmark (bench/README.md): direct, naive and chatstream side by side on the local stack, in one run;
# writes bench/results.json, results.md and results.png, and from them docs/CAPACITY.md and the documents' quoted
# figures (bench/quote.py). Not part of `make test`. ARGS="--quick" checks the harness.
.PHONY: bench
bench: $(STAMP)
	PYTHONPATH=local:client:layers/chatstream:layers/streaming-runtime:. $(BIN)/python -m bench.run $(ARGS)

# Capacity and the first token's latency on AWS, on paper (docs/CAPACITY.md), from bench/results.json: `make bench`
# writes it too (and the figures every document quotes, bench/quote.py); `make test` fails while either is not what
# results.json gives.
.PHONY: capacity
capacity: $(STAMP)
	PYTHONPATH=local:client:layers/chatstream:layers/streaming-runtime:. $(BIN)/python -m bench.capacity $(ARGS)

# `sam local invoke` without Docker (docs/LOCAL_STACK.md, "make invoke"): FUNCTION=<logical id> EVENT=events/<file>.json runs that
# function on that event on the stack `make local` runs on CHATSTREAM_PORT, or on one it starts and stops itself.
.PHONY: invoke
invoke: $(STAMP)
	@$(LOCAL_PATH) $(BIN)/python -m chatstream_local.sam.invoke $(FUNCTION) $(if $(EVENT),--event $(EVENT)) $(ARGS)

# Check a deployment (docs/DEPLOY.md, "Check it"): make smoke URL=https://<id>.lambda-url.<region>.on.aws, signed with SigV4 for a
# Function URL; ARGS="--second-profile NAME" adds the check that another principal gets 404 on the session.
.PHONY: smoke
smoke: $(STAMP)
	@PYTHONPATH=client $(BIN)/python -m chatstream_client.smoke $(if $(CLIENT_URL),--url $(CLIENT_URL)) $(ARGS)

# An access token for the local stack running with --auth-type JWT (its relay names its local issuer): one line, for
# curl -H "Authorization: Bearer $$(make token SUB=alice)". LIFETIME=<seconds> (negative: expired), AUDIENCE=<other API>.
.PHONY: token
token: $(STAMP)
	@$(LOCAL_PATH) $(BIN)/python -m chatstream_local.oidc.token $(if $(SUB),--sub $(SUB)) \
		$(if $(LIFETIME),--lifetime $(LIFETIME)) $(if $(AUDIENCE),--audience $(AUDIENCE)) $(if $(CLIENT_URL),--url $(CLIENT_URL)) $(ARGS)
