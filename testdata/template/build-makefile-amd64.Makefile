# genjobs: Go Lambda functions that drive Genace render jobs safely.
# Everything the tests need is fetched once into .cache/ and started here.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
CACHE     := $(CURDIR)/.cache
BIN       := $(CACHE)/bin
STATICCHECK_VERSION := v0.8.2
FUNCTIONS := $(notdir $(patsubst %/,%,$(wildcard functions/*/)))
GOARCH_DEPLOY ?= arm64
FUZZTIME  ?= 10s
EXAMPLE_PORT ?= 8791
# The fault simulation runs without the race detector: one goroutine
# drives it by design (its package doc), and under -race its simulations
# take several times as long as the rest of the suite together.
FAULTSIM  := github.com/genjobs/genjobs/internal/dev/faultsim

export GOBIN := $(BIN)
# Where `make install` puts genjobs (the Makefile's own GOBIN holds tools).
INSTALL_DIR ?= $(shell env -u GOBIN $(GO) env GOPATH)/bin

.PHONY: help run example install invoke sam-env build test unit lint fmt bench fuzz soak faultsim mutants clean console screenshots

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sort | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-10s\033[0m %s\n", $$1, $$2}'

run: ## run the whole pipeline locally on the built-in demo (ARGS="--workload FILE --report FILE ..." to change it)
	$(GO) run ./cmd/genjobs local $(ARGS)

example: ## an application's side: serve a local run, buy 3 renders through it with client/examples/render, print their completion events
	@mkdir -p $(CACHE)/example && rm -rf $(CACHE)/example/state
	$(GO) build -o $(CACHE)/example/genjobs ./cmd/genjobs
	@$(CACHE)/example/genjobs local --serve --quiet --listen 127.0.0.1:$(EXAMPLE_PORT) --state $(CACHE)/example/state > $(CACHE)/example/local.log 2>&1 & pid=$$!; \
	trap 'kill -INT $$pid 2>/dev/null; wait $$pid; cat $(CACHE)/example/local.log' EXIT; \
	for i in $$(seq 100); do grep -q "intake API at" $(CACHE)/example/local.log && break; kill -0 $$pid || exit 1; sleep 0.1; done; \
	AWS_ACCESS_KEY_ID=example AWS_SECRET_ACCESS_KEY=example AWS_REGION=us-east-1 \
		$(GO) run ./client/examples/render --url http://127.0.0.1:$(EXAMPLE_PORT) --events $(CACHE)/example/state/latest/events.jsonl

install: ## install the genjobs command into $(INSTALL_DIR) (default: go env GOPATH/bin; put it on your PATH)
	GOBIN=$(INSTALL_DIR) $(GO) install ./cmd/genjobs
	@echo "installed $(INSTALL_DIR)/genjobs"

build: ## compile everything, and each function as a Lambda bootstrap (linux/arm64)
	$(GO) build ./...
	@for fn in $(FUNCTIONS); do \
		echo "build/$$fn/bootstrap"; \
		GOOS=linux GOARCH=$(GOARCH_DEPLOY) CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
			-o build/$$fn/bootstrap ./functions/$$fn; \
	done

test: ## run every test (unit, race, integration) against DynamoDB Local and moto, started and stopped here
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	PATH="$$PATH:$$HOME/.pyenv/shims" cfn-lint template.yaml
	bash .ci/rie.sh install
	bash .ci/chromium.sh install
	bash .ci/dynamodb-local.sh run -- bash .ci/moto.sh run -- env GENJOBS_REQUIRE_INTEGRATION=1 bash -c '\
		$(GO) test -race -tags integration -count=1 -timeout 20m $$($(GO) list ./... | grep -v "$(FAULTSIM)$$") && \
		$(GO) test -tags integration -count=1 -timeout 20m $(FAULTSIM)'
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME)

console: ## serve the operator console on the newest local run's store (ARGS="--table NAME ..." for another store)
	$(GO) run ./cmd/genjobs console $(ARGS)

screenshots: ## redraw docs/console-*.png from the console's browser test (headless Chromium)
	bash .ci/chromium.sh install
	GENJOBS_REQUIRE_INTEGRATION=1 GENJOBS_UPDATE_SCREENSHOTS=1 $(GO) test -tags integration -run 'TestConsoleInBrowser$$' -count=1 ./internal/console

invoke: ## run one function under the Lambda runtime emulator with a sample event: make invoke FN=submit EVENT=events/submit.json
	@test -n "$(FN)" -a -n "$(EVENT)" || { echo "usage: make invoke FN=NAME EVENT=events/FILE.json (NAME: one of $(FUNCTIONS))"; exit 2; }
	bash .ci/rie.sh install
	bash .ci/dynamodb-local.sh run -- bash .ci/moto.sh run -- $(GO) run ./cmd/genjobs invoke --function $(FN) --event $(EVENT)

sam-env: ## keep local services up for `sam local invoke`: writes .cache/sam-local/{env.json,parameters}, prints the sam commands, Ctrl-C ends
	bash .ci/dynamodb-local.sh run -- bash .ci/moto.sh run -- $(GO) run ./cmd/genjobs sam-env

unit: ## run the tests that need no local service (integration tests skip)
	$(GO) test -race -count=1 ./...

fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@for target in $$(grep -rhoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sed 's/^func //' | sort -u); do \
		pkg=$$(grep -rlE --include='*_test.go' "^func $$target\b" . | head -1 | xargs dirname); \
		echo "fuzz $$target in $$pkg for $(FUZZTIME)"; \
		log=$(CACHE)/fuzz-$$target.log; mkdir -p $(CACHE); \
		for attempt in 1 2; do \
			if $(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) $$pkg > $$log 2>&1; then break; fi; \
			cat $$log; \
			if grep -q "Failing input written to" $$log || [ $$attempt = 2 ]; then exit 1; fi; \
			echo "the fuzzing engine failed without a failing input; trying $$target once more"; \
		done; \
	done

lint: $(BIN)/staticcheck ## gofmt, go vet and staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(BIN)/staticcheck ./...
	$(BIN)/staticcheck -tags integration ./...

$(BIN)/staticcheck:
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

bench: ## run the Go benchmarks (with DynamoDB Local and moto), then genjobs bench (bench/results.md: requests, throughput, a real-time run, cold starts) the observation benchmark (bench/observation.md) and the designs' costs (bench/cost.md, bench/cost.svg)
	bash .ci/rie.sh install
	bash .ci/dynamodb-local.sh run -- bash .ci/moto.sh run -- \
		$(GO) test -tags integration -run='^$$' -bench=. -benchmem -count=1 ./...
	bash .ci/moto.sh run -- $(GO) run ./cmd/genjobs bench --out bench
	GENJOBS_OBSERVATION_OUT=$(CURDIR)/bench/observation.md $(GO) test -run 'TestObservationFigures$$' -count=1 -timeout 60m ./internal/dev/benchmark
	GENJOBS_COST_OUT=$(CURDIR)/bench $(GO) test -run 'TestCostFigures$$' -count=1 -timeout 60m ./internal/dev/benchmark

SOAK_OPS    ?= 100000
SOAK_SEED   ?= 1
SOAK_FAULTS ?= all

soak: ## fault-injection soak on the deployed timing: SOAK_OPS operations (default 100000, ~18 min), SOAK_SEED, SOAK_FAULTS; fails on any invariant violation or missed liveness bound
	$(GO) run ./cmd/genjobs soak --operations $(SOAK_OPS) --seed $(SOAK_SEED) --faults $(SOAK_FAULTS)

faultsim: ## replay one simulation: SEED=N [OPS=1000] [FAULTS=all]
	$(GO) test -count=1 -v -run 'TestSimulation$$' ./internal/dev/faultsim -faultsim.seed=$(SEED) -faultsim.ops=$(or $(OPS),1000) -faultsim.faults=$(or $(FAULTS),all)

MUTANTS_LAYERS  ?= unit,faultsim,integration
# The simulation alone must kill MUTANTS_MIN_SIM of the core set: the 20
# mutants of testdata/mutants/mutants.txt marked "core: yes" (issue 9).
MUTANTS_MIN_SIM ?= 18

mutants: ## mutation check of testdata/mutants/mutants.txt: each must be killed, the simulation alone must kill MUTANTS_MIN_SIM (MUTANTS_ARGS="--check" only checks the anchors; "-run ID -j 2 -logs DIR")
	$(GO) run ./internal/dev/mutation/cmd/mutants -go $(GO) -layers $(MUTANTS_LAYERS) -min-sim $(MUTANTS_MIN_SIM) $(MUTANTS_ARGS)

clean: ## remove build output (keeps the download cache)
	rm -rf build

# ---------------------------------------------------------------------------
# SAM build targets (template.yaml: Metadata: BuildMethod: makefile).
# `sam build` runs `make build-<LogicalId>` with ARTIFACTS_DIR set; each
# target leaves one linux/arm64 `bootstrap` there for provided.al2023.
# internal/dev/templatecheck runs `make -n` on each for every function in the template.
# ---------------------------------------------------------------------------
SAM_GO_BUILD = $(if $(ARTIFACTS_DIR),,$(error ARTIFACTS_DIR is not set (sam build sets it)))GOOS=linux GOARCH=amd64 CGO_ENABLED=0 \
	$(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $(ARTIFACTS_DIR)/bootstrap

# One rule for every function: build-<Name>Function builds ./functions/<name>
# (the logical id lowercased without "Function"; the topology test holds
# each function's folder to its logical id).
lower = $(shell echo '$(1)' | tr A-Z a-z)

build-%Function:
	$(SAM_GO_BUILD) ./functions/$(call lower,$*)
