#!/usr/bin/env bash
# The project's test command (README, `make test`, CI's .ci/run).
# It checks formatting and vet, then runs every package's tests with the race
# detector: fast in-process tests, fuzz seed corpora, and the real-process
# suite in e2e/ (which builds the raftpace binary itself).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "test.sh: go is not installed (https://go.dev/dl)" >&2; exit 1; }

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 -timeout 20m ./...
