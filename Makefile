# devaccess: build, run, test. `make test` is the project's one test command
# (README, .ci/run); run it as root so the real-ACL and VM tests run too.
SWIFT ?= swift
BIN := .build/debug/devaccess

.PHONY: all build release bench status test lint unit-tests vm-tests fuzz fuzz-smoke crash-storm clean

all: build

build:
	$(SWIFT) build

status: build
	$(BIN) status

# Product sources import no Foundation (start-up time; scripts/check-no-foundation.sh);
# only the two mains read the environment (scripts/check-environment-reads.sh); the client
# library reaches no C library but libc (scripts/check-library-closure.sh); the CLI imports
# no ledger, enforcement or daemon module (scripts/check-cli-imports.sh).
lint:
	scripts/check-no-foundation.sh
	scripts/check-environment-reads.sh
	scripts/check-cli-imports.sh
	SWIFT=$(SWIFT) scripts/check-library-closure.sh

# The whole log stays in .build/unit-tests.log; failures are repeated at its end.
unit-tests:
	SWIFT=$(SWIFT) scripts/unit-tests.sh

vm-tests: build
	Tests/UseCase/VM/run-scenarios.sh --bin $(BIN)

test: lint unit-tests vm-tests

# libFuzzer targets (docs/fuzzing.md): each runs FUZZ_SECONDS (default 10 minutes);
# fuzz-smoke is CI's 30-second form. Either fails on a build error, crash or leak.
FUZZ_SECONDS ?= 600

# The optimized build the benchmark and scripts/install.sh use: whole-module
# optimisation has found what the debug build did not (a missing import), so CI builds it.
# The Swift runtime is linked in (--static-swift-stdlib): no dynamic loading of it at every
# start (docs/performance.md, "Start-up"). The linker's note about mktemp comes from the
# toolchain's FoundationEssentials archive, not from devaccess.
release:
	$(SWIFT) build -c release
	$(SWIFT) build -c release --static-swift-stdlib --product devaccess
	$(SWIFT) build -c release --static-swift-stdlib --product devaccessd

# The benchmark's quick set (docs/performance.md): every figure against its anchor measured in
# the same run, with the load average; as root for the grant and launch sections.
# BENCH_ARGS: sections and options, e.g. BENCH_ARGS="all --json".
BENCH_ARGS ?=
bench: release
	.build/release/devaccess-bench $(BENCH_ARGS)

fuzz:
	SWIFT=$(SWIFT) FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

fuzz-smoke:
	SWIFT=$(SWIFT) FUZZ_SECONDS=30 scripts/fuzz.sh

# Crash storms (docs/robustness.md): kill -9 devaccessd ITERATIONS times at random moments
# during a storm of grants, revokes, requests, approvals and expiries; SEED replays a run's
# kill moments and operations. `make test` runs the 20-iteration smoke (CrashStormTests).
ITERATIONS ?= 1000
SEED ?=

crash-storm:
	DEVACCESS_CRASH_STORM_ITERATIONS=$(ITERATIONS) $(if $(SEED),DEVACCESS_CRASH_STORM_SEED=$(SEED)) \
		$(SWIFT) test --filter CrashStormTests

clean:
	rm -rf .build
