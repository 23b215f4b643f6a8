#!/usr/bin/env bash
# The project's test command (README, `make test`, CI's .ci/run).
# It checks formatting and vet, then runs every package's tests with the race
# detector: fast in-process tests, fuzz seed corpora, and the real-process
# suite in e2e/ (which builds the raftpace binary itself). Before the tests it
# finds or starts a PostgreSQL (scripts/postgres.sh) and exports
# RAFTPACE_TEST_POSTGRES and RAFTPACE_PG_BIN.
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

# PostgreSQL for the tests that need one (internal/pgstore and anything that
# reads RAFTPACE_TEST_POSTGRES or RAFTPACE_PG_BIN): the given URL, the server
# on 127.0.0.1:5432, or a throwaway server stopped when this script exits.
# See scripts/postgres.sh.
source scripts/postgres.sh
raftpace_postgres

echo "== go test -race"
go test -race -count=1 -timeout 20m ./...
