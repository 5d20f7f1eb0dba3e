# devaccess: build, run, test. `make test` is the project's one test command
# (README, .ci/run); run it as root so the real-ACL and VM tests run too.
SWIFT ?= swift
BIN := .build/debug/devaccess

.PHONY: all build status test unit-tests vm-tests clean

all: build

build:
	$(SWIFT) build

status: build
	$(BIN) status

unit-tests:
	$(SWIFT) test

vm-tests: build
	Tests/VM/run-scenarios.sh --bin $(BIN)

test: unit-tests vm-tests

clean:
	rm -rf .build
