# raftpace — `make help` lists the targets.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
GO      ?= go
FUZZTIME ?= 15s

.PHONY: help build test test-short demo bench bench-quick bench-micro fuzz lint tidy clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/raftpace (version from git)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/raftpace ./cmd/raftpace

test: ## the test suite, as CI runs it: vet, gofmt, go test -race over every package
	./scripts/test.sh

test-short: ## the fast in-process tests only (no real-process suite)
	$(GO) test -race -count=1 -short ./...

demo: ## a local 3-node cluster under load for 20 s, no setup needed
	$(GO) run ./cmd/raftpace demo

bench: ## raftpace side by side with Postgres, Redis, x/time/rate, gubernator (~7 min; bench/README.md)
	$(GO) run ./cmd/raftpace bench

bench-quick: ## the side-by-side bench, quick mode (under a minute)
	$(GO) run ./cmd/raftpace bench --quick

bench-micro: ## micro-benchmarks of the hot paths (go test -bench)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/gcra/ ./transport/ ./fsm/ ./node/ ./agent/dataplane/ ./bench/...

# Targets are found in the sources, not with go test -list: that would build
# every test binary and run each TestMain (e2e's builds the raftpace binary),
# and a package whose tests do not compile would be skipped without a word.
fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for dir in $$(grep -rlE --include='*_test.go' --exclude-dir=testdata --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]*\(' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' $$dir/*_test.go); do \
	    echo "== $$dir $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$dir; \
	  done; done

lint: ## gofmt check and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

tidy: ## go mod tidy; fails if go.mod or go.sum change
	$(GO) mod tidy
	git diff --exit-code go.mod go.sum

clean: ## remove build output
	rm -rf bin
