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
# The chaos suite (e2e) starts throwaway servers of its own inside network
# namespaces: it needs the server binaries even when a server answered.
if [ -z "${RAFTPACE_PG_BIN:-}" ]; then
  raftpace_pg_install
  RAFTPACE_PG_BIN=$(raftpace_pg_find_bin) || { echo "test.sh: no initdb/pg_ctl after installing postgresql" >&2; exit 1; }
  export RAFTPACE_PG_BIN
fi
# ... and iproute2's ip, for the namespaces and the partitions.
if ! command -v ip >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing iproute2 (ip) for the chaos suite"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 >/dev/null; }
  else
    echo "test.sh: the chaos suite needs ip (iproute2) and root" >&2
  fi
fi

# ... and Debian's chromium, the headless browser that loads the agent's
# status page in e2e/observe_test.go (skipped without it, failed under CI).
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing chromium for the status page test"
    apt_log=$(mktemp /tmp/raftpace-apt.XXXXXX.log)
    if { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; } </dev/null >"$apt_log" 2>&1; then
      rm -f "$apt_log"
    else
      tail -n 30 "$apt_log" >&2
      echo "test.sh: apt-get install chromium failed (full log in $apt_log)" >&2
    fi
  else
    echo "test.sh: the status page test needs chromium (apt-get install chromium) and is skipped without it" >&2
  fi
fi

# The Python client (clients/python, standard library only) against the
# real agent: its tests start the built binary named by RAFTPACE_BINARY.
if ! command -v python3 >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing python3 for the Python client's tests"
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3; } </dev/null >/dev/null 2>&1 ||
      { echo "test.sh: apt-get install python3 failed" >&2; exit 1; }
  else
    echo "test.sh: the Python client's tests need python3" >&2; exit 1
  fi
fi
# One agent binary in one temp dir serves the Python and the Ruby clients'
# tests; it is removed after them, also when they fail (no trap here: the
# EXIT trap is scripts/postgres.sh's, which stops a throwaway server).
client_bin=$(mktemp -d /tmp/raftpace-clients.XXXXXX)
go build -o "$client_bin/raftpace" ./cmd/raftpace || { rm -rf "$client_bin"; exit 1; }
echo "== python client tests (clients/python, against the built agent)"
(cd clients/python && RAFTPACE_BINARY="$client_bin/raftpace" python3 -m unittest discover -s tests -t . 2>&1 | tail -n 40; exit "${PIPESTATUS[0]}") ||
  { rm -rf "$client_bin"; exit 1; }

# The Celery integration with a real worker: Debian's python3 with
# python3-celery and python3-redis, and a redis-server the test starts
# itself (any running one is not used).
if ! /usr/bin/python3 -c 'import celery, redis' >/dev/null 2>&1 || ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing python3-celery, python3-redis and redis-server for the Celery test"
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-celery python3-redis redis-server; } </dev/null >/dev/null 2>&1 ||
      { echo "test.sh: apt-get install python3-celery python3-redis redis-server failed" >&2; rm -rf "$client_bin"; exit 1; }
  else
    echo "test.sh: the Celery test needs /usr/bin/python3 with celery and redis (Debian: python3-celery python3-redis) and redis-server; run as root to install them" >&2; rm -rf "$client_bin"; exit 1
  fi
fi
echo "== python client: Celery with a real worker (clients/python/tests/with_celery.py)"
(cd clients/python && RAFTPACE_BINARY="$client_bin/raftpace" RAFTPACE_REQUIRE_CELERY=1 /usr/bin/python3 -m unittest -v tests.with_celery 2>&1 | tail -n 40; exit "${PIPESTATUS[0]}") ||
  { rm -rf "$client_bin"; exit 1; }

# The Ruby client (clients/ruby, standard library and minitest only) against
# the same binary.
if ! command -v ruby >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ruby for the Ruby client's tests"
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ruby; } </dev/null >/dev/null 2>&1 ||
      { echo "test.sh: apt-get install ruby failed" >&2; rm -rf "$client_bin"; exit 1; }
  else
    echo "test.sh: the Ruby client's tests need ruby (apt-get install ruby, as root)" >&2; rm -rf "$client_bin"; exit 1
  fi
fi
if ! ruby -e 'require "minitest"' >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ruby-minitest for the Ruby client's tests"
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ruby-minitest; } </dev/null >/dev/null 2>&1 ||
      { echo "test.sh: apt-get install ruby-minitest failed" >&2; rm -rf "$client_bin"; exit 1; }
  else
    echo "test.sh: the Ruby client's tests need minitest (apt-get install ruby-minitest, as root)" >&2; rm -rf "$client_bin"; exit 1
  fi
fi
echo "== ruby client tests (clients/ruby, against the built agent)"
(cd clients/ruby && RAFTPACE_BINARY="$client_bin/raftpace" ruby -Ilib -Itest -e 'Dir["test/*_test.rb"].each { |f| require File.expand_path(f) }' 2>&1 | tail -n 40; exit "${PIPESTATUS[0]}") ||
  { rm -rf "$client_bin"; exit 1; }
rm -rf "$client_bin"

echo "== go test -race"
go test -race -count=1 -timeout 20m ./...
